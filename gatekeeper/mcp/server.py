"""`oms mcp`: a stdio MCP server that is a thin, bounded caller of the gates.

It parses input, calls one gate or store function, and returns a bounded result
(under 8 KiB of text; longer data is paged). It decides nothing and can approve
or release nothing: there is no such tool. Errors are one clean line, with no
traceback, no host path outside the repository and no secret. It serves the one
repository it was started for.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import anyio
import pydantic_core
import rfc8785
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel

from evidence import EvidenceStore, audit, state_root
from gatekeeper.errors import Unavailable, classify
from gatekeeper.gates import doctor as doctor_mod
from gatekeeper.gates.result import pipeline as result_gate
from gatekeeper.gates.transfer.autopilot import trusted_policy
from gatekeeper.gates.transfer.preview import preview as preview_transfer
from gatekeeper.gates.transfer.state import show as show_transfer
from gatekeeper.mcp import gateway as repo_gateway
from gatekeeper.repo.git import git, open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit
from gatekeeper.text import sanitize
from policy import POLICY_FILE, LoadedPolicy, PolicyError

MAX_RESULT_BYTES = 7600  # of the JSON text the SDK sends (indent=2), under 8 KiB
POLICY_CACHE_SIZE = 16  # policy blobs remembered, parsed or refused
P = ParamSpec("P")
R = TypeVar("R")

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)  # fmt: skip
# Writes only to oms' own append-only evidence store; touches neither the repo nor the world.
RECORDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                          open_world_hint=False)  # fmt: skip


class Result(BaseModel):
    """Every tool's structured output: a compact JSON document as `data`."""

    ok: bool
    truncated: bool
    data: dict[str, Any]


def _hide_paths(text: str) -> str:
    """`$OMS_HOME` and `~` in place of their real paths: a client learns neither."""
    root = state_root()
    for secret_path, shown in (
        (os.path.realpath(root), "$OMS_HOME"),
        (str(root), "$OMS_HOME"),
        (os.path.expanduser("~"), "~"),
    ):
        if len(secret_path) > 1:
            text = text.replace(secret_path, shown)
    return text


def _hide_paths_in(value: Any) -> Any:
    if isinstance(value, str):
        return _hide_paths(value)
    if isinstance(value, dict):
        return {k: _hide_paths_in(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hide_paths_in(v) for v in value]
    return value


def _clean_error(exc: BaseException) -> str:
    known = classify(exc)
    kind = known[1] if known else "internal"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return sanitize(f"{kind}: {_hide_paths(text)}", limit=400)


def _sent_size(result: Result) -> int:
    """Bytes of the text content the SDK sends for a structured result (indent=2 JSON)."""
    return len(pydantic_core.to_json(result, indent=2))


def bounded(data: dict[str, Any]) -> Result:
    """The result, or, when it would exceed the bound, the result with its largest fields
    replaced by a note (tools that page keep their pages under the bound themselves)."""
    result = Result(ok=True, truncated=bool(data.get("truncated", False)), data=data)
    if _sent_size(result) <= MAX_RESULT_BYTES:
        return result
    cut = dict(data)
    for key in sorted(cut, key=lambda k: -len(json.dumps(cut[k], ensure_ascii=False))):
        cut[key] = "[cut: too long for one tool result; use the CLI or a paged tool]"
        result = Result(ok=True, truncated=True, data=cut)
        if _sent_size(result) <= MAX_RESULT_BYTES:
            break
    return result


def tool_errors(fn: Callable[P, Awaitable[Result]]) -> Callable[P, Awaitable[Result]]:
    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Result:
        try:
            return await fn(*args, **kwargs)
        except ToolError:
            raise
        except Exception as exc:  # every failure is one clean line (isError)
            raise ToolError(_clean_error(exc)) from None

    return wrapper


async def _thread(fn: Callable[..., R], *args: Any) -> R:
    return await anyio.to_thread.run_sync(functools.partial(fn, *args))


class PolicyCache:
    """The policy at a commit, parsed once per policy blob id.

    The server lives long and the blob is untrusted text: parsing it again on every
    tool call would repeat whatever cost it imposes. A refusal is remembered too.
    """

    def __init__(self, repo_top: Path) -> None:
        self._top = repo_top
        self._parsed: OrderedDict[str, LoadedPolicy | PolicyError] = OrderedDict()
        self._lock = threading.Lock()  # tools run in worker threads

    def at(self, sha: str) -> LoadedPolicy:
        blob = self._blob_id(sha)
        if blob is None:  # absent (the defaults) or not a regular file (refused): no parse
            return read_policy_at(self._top, sha)
        with self._lock:
            hit = self._parsed.get(blob)
            if hit is None:
                hit = self._parse(sha)
                self._parsed[blob] = hit
                while len(self._parsed) > POLICY_CACHE_SIZE:
                    self._parsed.popitem(last=False)
        if isinstance(hit, PolicyError):
            raise PolicyError(str(hit))
        return dataclasses.replace(hit, origin=f"{sha[:12]}:{POLICY_FILE}")

    def _parse(self, sha: str) -> LoadedPolicy | PolicyError:
        try:
            return read_policy_at(self._top, sha)
        except PolicyError as exc:
            return exc

    def _blob_id(self, sha: str) -> str | None:
        listing = git(self._top, "ls-tree", "-z", "--full-tree", sha, "--", POLICY_FILE)
        fields = listing.partition(b"\t")[0].decode("ascii", "replace").split()
        if len(fields) == 3 and fields[0] in ("100644", "100755") and fields[1] == "blob":
            return fields[2]
        return None


def build_server(repo_dir: Path) -> MCPServer[Any]:
    repo = open_repo(repo_dir)
    server: MCPServer[Any] = MCPServer(
        name="oms",
        instructions="oms gates repository context and agent results. It can preview "
        "transfers and run the result gate; it cannot approve or release anything.",
    )

    def store() -> EvidenceStore:
        return EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)

    policies = PolicyCache(repo.top)

    def policy() -> LoadedPolicy:
        return policies.at(resolve_commit(repo.top, "HEAD"))

    @server.tool(description="Readiness of oms on this machine: sandbox probe, scanners, "
                 "signing key, evidence chain, AppArmor. Contacts no provider.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_doctor() -> Result:
        report, ready = await _thread(doctor_mod.doctor, repo.top)
        report["mcp_tools_digest"] = (await tools_digest(repo.top))[0]
        return bounded(_hide_paths_in({**report, "ready": ready}))

    @server.tool(
        description="The effective policy of this repository (at HEAD) and, for "
        "transfers, the default branch's, with their digests.",
        annotations=READ_ONLY,
    )
    @tool_errors
    async def oms_policy() -> Result:
        here = policy()
        trusted = trusted_policy(repo)
        return bounded({"head": {"origin": here.origin, "digest": here.digest,
                                 "policy": here.policy.model_dump(mode="json")},
                        "transfer_policy_digest": trusted.digest})  # fmt: skip

    async def _preview(to: str, purpose: str, context: str, paths: list[str] | None,
                       base: str | None, redact: bool) -> dict[str, Any]:  # fmt: skip
        data = (await _thread(preview_transfer, repo.top, to, purpose, context,
                              paths or [], base, redact)).to_json()  # fmt: skip
        m = data["manifest"]
        return {"digest": data["digest"], "status": data["status"],
                "visibility": m["visibility"], "totals": m["totals"],
                "excluded": m["excluded"][:50], "approval_packet": data["approval_packet"],
                "evidence_seq": data["evidence_seq"]}  # fmt: skip

    @server.tool(description="Preflight before consulting a model: destination, repository "
                 "visibility, what would leave and an approval packet for a human. Records a "
                 "signed manifest; sends nothing.", annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_model_access(to: str, purpose: str, context: str = "none",
                               paths: list[str] | None = None, base: str | None = None,
                               redact: bool = False) -> Result:  # fmt: skip
        data = await _preview(to, purpose, context, paths, base, redact)
        data["ready_to_send"] = False
        data["next_step"] = ("a human runs the copyable_text_block command at a terminal; "
                             "this server cannot approve or release")  # fmt: skip
        return bounded(data)

    @server.tool(description="Build and record a transfer manifest (as `oms transfer "
                 "preview`). Sends nothing.", annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_transfer_preview(to: str, purpose: str, context: str = "none",
                                   paths: list[str] | None = None, base: str | None = None,
                                   redact: bool = False) -> Result:  # fmt: skip
        return bounded(await _preview(to, purpose, context, paths, base, redact))

    @server.tool(description="State of one transfer manifest (previewed, approved, released, "
                 "expired, blocked).", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_transfer_status(digest: str) -> Result:
        data = (await _thread(show_transfer, repo.top, digest)).to_json()
        return bounded({"digest": digest, "status": data["status"],
                        "summary": data["approval_packet"]["summary"],
                        "approvals": len(data["approvals"]),
                        "releases": len(data["releases"])})  # fmt: skip

    # No base: the caller (an agent) never chooses what the candidate is compared with.
    @server.tool(description="Run the result gate on a commit: the default branch's plan in the "
                 "sandbox, both secret scanners, signed evidence. Ends at READY_FOR_HUMAN at best; "
                 "never merges or pushes.", annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_process_result(candidate: str, ctx: Context, ticket: str | None = None,
                                 attempt: int | None = None) -> Result:  # fmt: skip
        await ctx.report_progress(0, 3, "resolving and scanning")
        try:
            v = await _thread(result_gate.process_result, repo.top, candidate, None, ticket,
                              attempt)  # fmt: skip
        except Unavailable as exc:
            await ctx.report_progress(3, 3, "unavailable")
            raise ToolError(_clean_error(exc)) from None
        await ctx.report_progress(3, 3, v.decision)
        out = v.to_json()
        for c in out["checks"]:
            c["stdout_tail"] = c["stdout_tail"][-600:]
            c["stderr_tail"] = c["stderr_tail"][-600:]
        return bounded(out)

    def _recent(kinds: tuple[str, ...], limit: int) -> list[dict[str, Any]]:
        rows = []
        for line in reversed(store().lines()):
            e = json.loads(line)
            if e["kind"] in kinds:
                d = e["data"]
                rows.append(
                    {
                        "seq": e["seq"],
                        "kind": e["kind"],
                        "time": e["time"],
                        **{
                            k: d.get(k)
                            for k in ("decision", "candidate", "digest", "destination", "bytes")
                            if k in d
                        },
                    }
                )
                if len(rows) >= limit:
                    break
        return rows  # fmt: skip

    @server.tool(description="Recent result-gate verdicts and transfers, newest first.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_runs(limit: int = 20) -> Result:
        limit = max(1, min(limit, 50))
        return bounded(
            {
                "runs": await _thread(
                    _recent, ("result", "transfer.preview", "transfer.release"), limit
                )
            }
        )

    @server.tool(description="Compact status: HEAD, evidence entries, the last verdict.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_status() -> Result:
        head = resolve_commit(repo.top, "HEAD")
        last = await _thread(_recent, ("result",), 1)
        return bounded({"head": head, "evidence_entries": store().head(),
                        "last_verdict": last[0] if last else None})  # fmt: skip

    @server.tool(
        description="Read part of an evidence blob that an entry references (by the "
        "entry's seq and the blob digest), and nothing else.",
        annotations=READ_ONLY,
    )
    @tool_errors
    async def oms_read_artifact(seq: int, digest: str, offset: int = 0,
                                limit: int = 6000) -> Result:  # fmt: skip
        s = store()
        entry = s.entry(seq)
        if digest not in entry.blobs:
            raise ToolError("not_found: that entry does not reference that blob")
        data = s.blobs.get(digest)
        text = data.decode("utf-8", "replace")
        offset = max(0, offset)
        budget = min(max(1, limit), repo_gateway.PAGE_BYTES)
        return bounded({"seq": seq, "digest": digest,
                        **repo_gateway.page(text, offset, "text", budget)})  # fmt: skip

    @server.tool(description="Audit the evidence log offline (chain, Merkle root, checkpoint, "
                 "witness, blobs).", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_evidence_audit() -> Result:
        # Opened without the binding check: a log of another repository is a report.
        s = EvidenceStore.open(
            state_root(), repo.repo_id, common_dir=repo.common_dir, check_binding=False
        )
        report = await _thread(audit, s)
        return bounded(_hide_paths_in(report.to_json()))

    @server.tool(description="List files of the repository (tracked and untracked, not "
                 "ignored; secret-looking and dependency paths skipped), paged.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_repo_tree(path: str = "", offset: int = 0, limit: int = 500) -> Result:
        return bounded(await _thread(repo_gateway.tree, repo, path, max(0, offset),
                                     max(1, min(limit, 500))))  # fmt: skip

    @server.tool(description="Search the repository's text files (literal by default; "
                 "regex=true runs under a time bound). Lines with findings are never matched.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_repo_search(query: str, regex: bool = False, path: str = "",
                              limit: int = 50) -> Result:  # fmt: skip
        data = await _thread(repo_gateway.search, repo, query, regex, path,
                             max(1, min(limit, 200)), policy())  # fmt: skip
        return bounded(data)

    @server.tool(description="Read a text file inside the repository, paged; lines with "
                 "secret findings are redacted.", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_repo_read_file(path: str, offset: int = 0) -> Result:
        return bounded(await _thread(repo_gateway.read_file, repo, path, max(0, offset),
                                     policy()))  # fmt: skip

    @server.tool(description="Worktree status of the repository (porcelain v1 letters), "
                 "computed by oms from the index and file bytes, bounded.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_git_status() -> Result:
        text = "\n".join(await _thread(repo_gateway.status, repo))
        return bounded({"status": sanitize_lines(text[:4000]), "truncated": len(text) > 4000})

    @server.tool(description="Diff of the worktree against the index (or `base`), computed by "
                 "oms, paged; lines with secret findings are redacted.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_git_diff(base: str | None = None, path: str = "", offset: int = 0) -> Result:
        return bounded(await _thread(repo_gateway.diff, repo, base, path, max(0, offset),
                                     policy()))  # fmt: skip

    return server


def sanitize_lines(text: str) -> list[str]:
    return [sanitize(line, limit=300) for line in text.splitlines()]


async def tools_digest(repo_dir: Path) -> tuple[str, list[str]]:
    """SHA-256 of the canonical `tools/list` result, so a host can pin the definitions."""
    server = build_server(repo_dir)
    tools = await server.list_tools()
    docs = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    docs.sort(key=lambda d: d["name"])
    digest = "sha256:" + hashlib.sha256(rfc8785.dumps(docs)).hexdigest()
    return digest, [d["name"] for d in docs]


def digest_for_doctor(repo_dir: Path) -> str:
    """The tools digest for `oms doctor`: informational, never a reason to be "ready"."""
    try:
        return anyio.run(tools_digest, repo_dir)[0]
    except Exception as exc:  # reported as unavailable, never raised
        return f"unavailable: {type(exc).__name__}"


def serve(repo_dir: Path) -> None:
    build_server(repo_dir).run("stdio")
