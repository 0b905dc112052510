"""The provider adapters' one interface: a resolved `Role`, a `ProviderRequest` in, a typed
`ProviderReceipt` out, and `adapter(role)`, the one entry point.

A receipt is where a provider's answer enters oms: `receipt` scans it with both scanners
under the request's policy (the repo gateway's scan and cache) and replaces every line a
finding covers before anything (work.db, an artifact blob, a tool's answer, a grade or a
reflection) can hold it; then bounds it.

Every adapter runs its CLI under `oms agent run` (`gatekeeper.agent.run.agent_run`): the
task document reaches the CLI on stdin and as the read-only file `$OMS_TASK_FILE`, never
as argv. An adapter decides nothing: the receipt is facts (exit, candidate, bounded
output, usage when the CLI reports it) for the fenced state machine and the result gate.
`gatekeeper.work.providers.adapter(role)` picks the adapter of a role's engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gatekeeper.agent.budget import Bound
from gatekeeper.errors import Unavailable
from policy import LoadedPolicy

if TYPE_CHECKING:  # the run module (aiohttp behind it) only where an adapter runs
    from gatekeeper.agent.run import AgentRunOutcome

Engine = str  # "claude-code" | "codex-cli" | "command:<name>": each command provider its own
Authority = Literal["read-only", "worktree-write"]
# What a receipt keeps of the CLI's stdout: the final answer of an exec CLI fits.
MAX_OUTPUT_BYTES = 64 << 10
ANSWER_ITEM = "<provider answer>"  # what a finding in an answer names as its file


class RoleUnavailable(Unavailable):
    """A role that cannot run (exit 4, before anything starts): unknown, its provider
    unknown or not installed, auth or billing undeclared, credits not enabled, not
    eligible for unattended use. The message names the role and every reason."""


@dataclass(frozen=True)
class Role:
    """A `[roles.<name>]` entry resolved (`gatekeeper.work.roles.resolve`): its engine, and
    for a `command:` provider the argv of its `[providers.<name>]`."""

    name: str
    provider: str
    engine: Engine
    model: str
    auth: str  # "subscription" | "api-key" | "none" | "undeclared"
    billing: str  # "subscription" | "usage" | "none" | "undeclared"
    unattended: bool
    transport: str  # "interactive" | "exec"
    authority: Authority
    external: bool  # sends repo context to an external model
    allow_usage_billing: bool = False
    timeout_s: int = 3600
    cmd: tuple[str, ...] = ()  # a command provider's argv; empty for the two CLIs
    output_schema: str | None = None  # a command provider's schema path (default branch)
    egress: str = "none"  # a command provider's network under `oms agent run`: none | api

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "provider": self.provider, "model": self.model,
                "engine": self.engine, "auth": self.auth, "billing": self.billing,
                "transport": self.transport, "authority": self.authority,
                "unattended": self.unattended, "external": self.external}  # fmt: skip


@dataclass(frozen=True)
class ProviderRequest:
    repo_dir: Path
    base: str  # the commit the workspace is cloned at
    role: Role
    run_id: str  # chosen by the caller BEFORE the run (recorded in the dispatch first)
    document: bytes  # the task or grading document: stdin and $OMS_TASK_FILE, never argv
    timeout_s: int | None = None  # None: the role's
    output_schema: Mapping[str, Any] | None = None  # a grader's JSON schema for its answer
    budget: tuple[Bound, ...] = ()  # the broker's bounds (`[conductor.budget]`, spent so far)
    loaded: LoadedPolicy = field(kw_only=True)  # the trusted policy the answer is scanned under


@dataclass(frozen=True)
class ProviderReceipt:
    engine: Engine
    run_id: str
    exit_code: int | None
    signal: int | None
    timed_out: bool
    base: str
    candidate: str | None  # from oms agent run; always None for a read-only role
    candidate_ref: str | None
    output: str  # the CLI's final answer (stdout for a command), redacted, bounded (64 KiB)
    usage: Mapping[str, int] | None  # when the CLI reports it
    evidence_seq: int  # the agent.run.end entry
    workspace: str
    redacted: int = 0  # findings in the answer, whose lines `output` shows as a marker
    spend: tuple[int, int] | None = None  # model requests, tokens: an `api` run's broker's
    stopped: str | None = None  # why its broker stopped the run's model traffic, if it did

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "run_id": self.run_id, "exit_code": self.exit_code,
                "signal": self.signal, "timed_out": self.timed_out, "base": self.base,
                "candidate": self.candidate, "candidate_ref": self.candidate_ref,
                "output": self.output, "usage": dict(self.usage) if self.usage else None,
                "evidence_seq": self.evidence_seq, "workspace": self.workspace,
                "redacted": self.redacted}  # fmt: skip


Adapter = Callable[[ProviderRequest], ProviderReceipt]


def bounded(text: str, limit: int = MAX_OUTPUT_BYTES) -> str:
    """At most `limit` bytes of `text` (as UTF-8), a character cut in two left out."""
    return text.encode()[:limit].decode("utf-8", "ignore")


def stdout_of(out: AgentRunOutcome) -> bytes:
    """What the CLI printed, as kept by the capture (up to the agent profile's cap)."""
    if out.stdout_kept is not None:
        return out.stdout_kept
    return (out.stdout or "").encode()


def receipt(role: Role, loaded: LoadedPolicy, out: AgentRunOutcome, answer: bytes,
            usage: Mapping[str, int] | None) -> ProviderReceipt:  # fmt: skip
    """The receipt of a finished `oms agent run`: its whole `answer` redacted, then bounded
    (so the bound never cuts a secret into a piece the scanners no longer know); a read-only
    role never has a candidate. A scanner that cannot run raises (ScannerUnavailable):
    an answer no one scanned is never kept."""
    # The scanners where an answer arrives: `Role` alone (`oms run list`) needs none.
    from gatekeeper.scan import ScanItem
    from gatekeeper.scan.policy import redacted

    output, found = redacted(ScanItem.of_bytes(ANSWER_ITEM, answer, "replace"), loaded)
    writes = role.authority == "worktree-write"
    return ProviderReceipt(
        engine=role.engine, run_id=out.run_id, exit_code=out.exit_code, signal=out.signal,
        timed_out=out.timed_out, base=out.base,
        candidate=out.candidate if writes else None,
        candidate_ref=out.candidate_ref if writes else None,
        output=bounded(output), usage=usage, evidence_seq=out.evidence_seq,
        workspace=out.workspace, redacted=found,
        spend=(out.egress.model_requests, out.egress.tokens) if out.egress_mode == "api" else None,
        stopped=out.egress.stopped.reason if out.egress.stopped is not None else None,
    )  # fmt: skip
