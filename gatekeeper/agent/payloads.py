"""Evidence of `oms agent run`: its start, its end, each brokered request and tunnel.

The run id is each entry's subject (`{"name": "agent-run:<id>", "digest": {"sha256": ...}}`
of the run id), so that `oms evidence show` names the run. No secret value is ever a field:
findings are rule and fingerprint, bodies are their SHA-256 and size.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from evidence import Payload

RUN_ID_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}")
RunId = Annotated[str, Field(pattern=f"^{RUN_ID_RE.pattern}$")]
Sha = Annotated[str, Field(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")]
Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
AgentKind = Literal["claude-code", "codex", "command"]
EgressMode = Literal["none", "api", "tunnel"]


class _Frozen(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)


class EgressTotals(_Frozen):
    requests: int = 0
    forwarded: int = 0
    redacted: int = 0
    blocked: int = 0
    no_key: int = 0  # refused: oms holds no key for the request's provider
    bytes_up: int = 0
    bytes_down: int = 0


class StopFact(_Frozen):
    """Why the broker stopped a run's model traffic (`gatekeeper.agent.budget.Parked`)."""

    event: Literal["budget", "login"]
    provider: Literal["anthropic", "openai"] | None
    status: int
    scope: Literal["ticket", "goal"] | None = None
    measure: Literal["requests", "tokens"] | None = None
    spent: int | None = None
    limit: int | None = None
    reason: str


class RunSpend(_Frozen):
    """What a run's model traffic spent as its broker counted it: model requests forwarded,
    provider-reported tokens (input + output), and the stop, if there was one."""

    requests: int = 0
    tokens: int = 0
    stopped: StopFact | None = None


class Diffstat(_Frozen):
    files: int
    insertions: int
    deletions: int


SpecialKind = Literal["fifo", "socket", "char-device", "block-device", "other"]
# How a run left oms: its result collected (a candidate or nothing changed), a read-only run
# (never collected), oms refused after the start, collect ran past its deadline, or oms was
# interrupted (a signal, Ctrl-C).
EndReason = Literal["collected", "read_only", "refused", "collect_timeout", "interrupted"]


class SpecialFile(_Frozen):
    """A FIFO, socket or device the agent left in its workspace: never opened, by oms or a
    git it runs, and never committed. The path as bytes decoded (undecodable bytes escaped)."""

    path: Annotated[str, Field(max_length=1024)]
    kind: SpecialKind


class AgentRunStart(Payload):
    KIND: ClassVar[str] = "agent.run.start"
    run_id: RunId
    agent: AgentKind
    cli_version: str | None
    argv_digest: Digest
    profile_digest: Digest
    mountinfo_digest: Digest
    namespaces_digest: Digest
    probe: Literal["passed"]
    base: Sha
    base_ref: str
    workspace: str
    egress: EgressMode
    canary_digest: Digest
    # Flags oms passed to the agent CLI that weaken its own sandbox (oms' is the boundary).
    agent_flags: tuple[str, ...] = ()


class AgentRunEnd(Payload):
    KIND: ClassVar[str] = "agent.run.end"
    run_id: RunId
    exit_code: int | None
    signal: int | None
    duration_s: float
    egress: EgressTotals
    base: Sha
    candidate: Sha | None
    candidate_ref: str | None
    diffstat: Diffstat | None
    refused: str | None = None  # why oms refused after the start (nothing collected then)
    # Entries written before these fields have none of them (reason None, nothing special).
    reason: EndReason | None = None
    special_files: tuple[SpecialFile, ...] = ()  # the first MAX_SPECIAL_NAMED, by path
    special_total: int = 0
    spend: RunSpend | None = None  # an `api` run's (entries before it have none)


class EgressFinding(_Frozen):
    rule: str
    fingerprint: str
    scanner: str


class EgressRequest(Payload):
    """One request the agent sent to the broker, as the broker saw and handled it."""

    KIND: ClassVar[str] = "agent.egress"
    run_id: RunId
    method: str
    path: str  # as forwarded: with its allow-listed, scanned and redacted query
    provider: Literal["anthropic", "openai"] | None
    bytes_in: int  # the body as the agent sent it
    bytes_sent: int  # the body as forwarded (after redaction); 0 when not forwarded
    sha256_sent: str | None  # hex SHA-256 of the body as forwarded
    # Hex SHA-256 of the canonical form of everything forwarded (egress_http.sent_digest):
    # method, path, query, headers less the injected key, body. None when not forwarded.
    sha256_request: str | None = None
    # Headers and query parameters the agent sent that were not forwarded: how many, and
    # a SHA-256 over them (never their text: a secret may be in a name).
    dropped: int = 0
    sha256_dropped: str | None = None
    findings: tuple[EgressFinding, ...] = ()
    canary: bool = False
    action: Literal["forwarded", "redacted", "blocked", "refused"]
    reason: str | None = None
    # The broker's own answer when it refused or blocked; None when forwarded: the record
    # is written before the body leaves (fail closed), so no upstream status exists yet.
    status: int | None = None


class TunnelConnection(Payload):
    """One CONNECT through `--egress tunnel`: opaque, so only where and how much."""

    KIND: ClassVar[str] = "agent.tunnel"
    run_id: RunId
    host: str
    port: int
    action: Literal["connected", "refused"]
    reason: str | None = None
    bytes_up: int = 0
    bytes_down: int = 0


class HookEvent(Payload):
    """One hook call of a worker's CLI (or its `oms worker result`), relayed by `oms hook`
    inside to the run's broker: what the run reported, under the run's own identity (the
    worker and role come from the run's binding, never from the agent). `commit`: the
    workspace's HEAD when it is beyond the base at a Stop or a result, else None."""

    KIND: ClassVar[str] = "agent.hook"
    run_id: RunId
    worker: str
    role: str | None = None
    client: Literal["claude-code", "codex", "oms"]
    event: str = Field(max_length=64)
    tool: str = Field(default="", max_length=128)
    input_sha256: str | None = None
    decision: str = Field(max_length=16)  # allow, deny, block, silent, error, result
    commit: str | None = None


def run_subject(run_id: str) -> list[dict[str, Any]]:
    return [
        {
            "name": f"agent-run:{run_id}",
            "digest": {"sha256": hashlib.sha256(run_id.encode()).hexdigest()},
        }
    ]
