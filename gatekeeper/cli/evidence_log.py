"""`oms evidence log`: recent entries of a verified log, each with a one-line summary.

The log is verified first (chain, checkpoint and witness roots, genesis binding: what
`oms evidence show` checks for one entry, here for the last one and so for all before
it); each summary is read through the entry kind's own payload model. It lives in the
CLI layer because the payload models live with the gates and `oms agent run` that write
them, and only this layer may import all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence import Entry, Note, TamperDetected
from evidence.export import verified_entry
from gatekeeper.agent.payloads import AgentRunEnd, AgentRunStart, EgressRequest, TunnelConnection
from gatekeeper.errors import UsageError
from gatekeeper.gates.records import open_store
from gatekeeper.gates.result.payloads import ResultRecord, ResultStart
from gatekeeper.gates.toolchain.payloads import ToolchainPrepared
from gatekeeper.gates.transfer.payloads import ApprovalRecord, PreviewRecord, ReleaseRecord


def _result(e: Entry) -> str:
    r = ResultRecord.of(e)
    return f"{r.decision.value} {r.candidate[:12]} (base {r.base[:12]})"


def _result_start(e: Entry) -> str:
    r = ResultStart.of(e)
    return f"judging {r.candidate[:12]} (base {r.base[:12]})"


def _preview(e: Entry) -> str:
    r = PreviewRecord.of(e)
    blocked = " BLOCKED" if r.blocked else ""
    return f"{r.digest}{blocked} to {r.destination}, {r.bytes} bytes"


def _approve(e: Entry) -> str:
    r = ApprovalRecord.of(e)
    return f"{r.digest} approved by {r.approver.name} until {r.expires}"


def _release(e: Entry) -> str:
    r = ReleaseRecord.of(e)
    return f"{r.digest} released, {r.bytes} bytes to {r.out}"


def _run_start(e: Entry) -> str:
    r = AgentRunStart.of(e)
    return f"run {r.run_id}: {r.agent}, egress {r.egress}, base {r.base[:12]}"


def _run_end(e: Entry) -> str:
    r = AgentRunEnd.of(e)
    got = f"candidate {r.candidate[:12]}" if r.candidate else "no candidate"
    if r.special_total:
        got += f", {r.special_total} special file{'s' * (r.special_total != 1)} left out"
    return f"run {r.run_id}: exit {r.exit_code}, {got}" + (f", refused: {r.refused}"
                                                          if r.refused else "")  # fmt: skip


def _egress(e: Entry) -> str:
    r = EgressRequest.of(e)
    return f"run {r.run_id}: {r.method} {r.path} {r.action}, {r.bytes_in} bytes"


def _tunnel(e: Entry) -> str:
    r = TunnelConnection.of(e)
    return f"run {r.run_id}: {r.host}:{r.port} {r.action}"


def _toolchain(e: Entry) -> str:
    b = ToolchainPrepared.of(e).build
    return f"{b.name} ({b.kind}) from {b.lock}: {b.tree_digest}"


def _note(e: Entry) -> str:
    n = Note.of(e)
    first = n.message.splitlines()[0] if n.message else ""
    return first[:120] + (f" [attachment {n.attachment.name}]" if n.attachment else "")


SUMMARIES: Mapping[str, Callable[[Entry], str]] = {
    ResultRecord.KIND: _result, ResultStart.KIND: _result_start,
    PreviewRecord.KIND: _preview, ApprovalRecord.KIND: _approve, ReleaseRecord.KIND: _release,
    AgentRunStart.KIND: _run_start, AgentRunEnd.KIND: _run_end,
    EgressRequest.KIND: _egress, TunnelConnection.KIND: _tunnel,
    ToolchainPrepared.KIND: _toolchain, Note.KIND: _note,
}  # fmt: skip


def summary(entry: Entry) -> str:
    """One line about an entry, from its payload model ("" for a kind without one)."""
    fn = SUMMARIES.get(entry.kind)
    if fn is None:
        return ""
    try:
        return fn(entry)
    except TamperDetected as exc:
        return f"(does not fit its model: {exc})"


@dataclass(frozen=True)
class LogRow:
    entry: Entry
    summary: str

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {"seq": e.seq, "time": e.time, "kind": e.kind, "summary": self.summary,
                "subject": [s.model_dump() for s in e.subject], "data": e.data}  # fmt: skip


# The families of entry kinds oms writes; `--kind` names one of them or a kind within one.
FAMILIES = ("agent", "genesis", "grade", "note", "policy", "repair", "result", "toolchain",
            "transfer", "work")  # fmt: skip


def known_kind(wanted: str) -> str:
    """`wanted`, when it is a family or a kind within one; else a one-line usage error."""
    if wanted.split(".", 1)[0] not in FAMILIES:
        families = ", ".join(FAMILIES)
        raise UsageError(f"no entry kind {wanted[:40]!r}: the kinds are {families} (a family "
                         "takes its kinds: transfer takes transfer.preview …)")  # fmt: skip
    return wanted


def matches(kind: str, wanted: str | None) -> bool:
    """`--kind transfer` takes every `transfer.*` kind; `--kind result` exactly `result`
    and `result.*`."""
    return wanted is None or kind == wanted or kind.startswith(wanted + ".")


def log_rows(repo_dir: Path, kind: str | None, limit: int) -> tuple[LogRow, ...]:
    """The last `limit` (at least 1) entries (of `kind`) of the verified log, oldest first."""
    if kind is not None:
        known_kind(kind)
    _, store = open_store(repo_dir)
    last = verified_entry(store, store.head() - 1)  # verifies every entry up to it
    entries = [e for e in store.entries()[: last.seq + 1] if matches(e.kind, kind)]
    return tuple(LogRow(e, summary(e)) for e in entries[-limit:])
