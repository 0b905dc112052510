"""Stop and SubagentStop: the result gate on the session's HEAD before the agent may stop.

HEAD is judged against its merge-base with the default branch's trusted mark, the gate's
own default base: an agent committing on the default branch itself is judged for every
commit after the mark; HEAD at (or before) the mark has nothing to judge. Any verdict but
READY_FOR_HUMAN, or a gate that cannot run, keeps the agent working with the reasons (a
FAILED one with the failing check's output tail, redacted). Two cases are the human's, not
the agent's, and let the agent stop: a repository never `oms init`ed (quiet: a user-scope
install stays out of it), and a base policy with no verification plan (a note naming the
remedy: only the human may write oms.toml).
Two bounds keep a session from looping (the clients' docs ask hooks to check
`stop_hook_active`): a stop that is already the continuation of a blocked one is
allowed, and at most MAX_BLOCKS blocks per session, counted under the state root by
a hash of the session id. Inside an oms agent sandbox the gate cannot run (no state, no
keys): the stop is allowed, and the gate runs outside when `oms agent run` ends.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from evidence import state_root
from evidence.state import atomic_write, ensure_private_dir
from gatekeeper.errors import OmsError, UsageError
from gatekeeper.gates.mark import policy_commit
from gatekeeper.gates.result.pipeline import process_result
from gatekeeper.gates.result.stages import NO_PLAN
from gatekeeper.gates.result.verdict import CheckResult, Decision
from gatekeeper.integrations.hooks.checks import Session, load_policy, set_up
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.refs import default_base, resolve_commit
from gatekeeper.scan.interface import ScanItem
from gatekeeper.scan.policy import redacted

MAX_BLOCKS = 3
STOPS_DIR = ("hooks", "stops")
_REASONS_SHOWN = 6
INSIDE_NOTE = (
    "oms: the result gate does not run inside the agent sandbox; it judges this run's "
    "result outside when `oms agent run` ends"
)
NO_PLAN_NOTE = (
    "oms: the result gate cannot judge {head}: the default branch's oms.toml has no "
    "verification plan ([[checks]]). Only you can add one: run `oms init` (or `oms policy "
    "init`) in this repository and commit oms.toml on the default branch"
)
# A failing check's output shown to the agent: its last lines, bounded.
TAIL_LINES = 40
TAIL_BYTES = 4096


class StopCount(BaseModel):
    """How often oms blocked one session's stop (persisted: versioned, strict)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")
    version: Literal[1] = 1
    blocks: int = 0


@dataclass(frozen=True)
class StopOutcome:
    """Block the stop with `reason` (for the model), or allow it with an optional `note`
    for the user."""

    block: bool
    reason: str = ""
    note: str | None = None
    output: str = ""  # the failing check's output tail, redacted, for the model


def count_path(session_id: str) -> Path:
    key = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return state_root().joinpath(*STOPS_DIR, f"{key}.json")


def read_count(session_id: str) -> StopCount:
    """The session's count; a missing file is zero, an unreadable one counts as spent (the
    bound must hold even if the file is damaged)."""
    try:
        return StopCount.model_validate_json(count_path(session_id).read_bytes())
    except FileNotFoundError:
        return StopCount()
    except (OSError, ValidationError, ValueError):
        return StopCount(blocks=MAX_BLOCKS)


def _count_block(session_id: str, count: StopCount) -> None:
    path = count_path(session_id)
    ensure_private_dir(path.parent, state_root())
    data = json.dumps(StopCount(blocks=count.blocks + 1).model_dump()).encode()
    atomic_write(path, data, durable=False)


def _gate_reasons(
    top: str, head: str
) -> tuple[Decision | None, tuple[str, ...], tuple[CheckResult, ...]]:
    """(decision, reasons, checks) of the result gate on `head`; (None, why, ()) when it
    cannot run."""
    try:
        verdict = process_result(Path(top), head)
    except OmsError as exc:
        shown: Any = (exc.data or {}).get("reasons")
        reasons = tuple(str(r) for r in shown) if isinstance(shown, list) and shown else ()
        return None, reasons or (exc.message,), ()
    return verdict.decision, verdict.reasons, verdict.checks


def failing_output(session: Session, checks: tuple[CheckResult, ...]) -> str:
    """The first failing check's output tail (last TAIL_LINES lines, TAIL_BYTES), with every
    line a scanner flags redacted: what a check prints is the candidate's text."""
    failed = next((c for c in checks if not c.passed), None)
    if failed is None:
        return ""
    text = "\n".join(t.rstrip("\n") for t in (failed.stdout_tail, failed.stderr_tail) if t.strip())
    tail = "\n".join(text.split("\n")[-TAIL_LINES:])
    tail = tail.encode()[-TAIL_BYTES:].decode("utf-8", "ignore")
    shown, _ = redacted(ScanItem.whole(f"check {failed.name} output", tail), load_policy(session))
    return f"check {failed.name} output (last lines):\n{shown}"


def _head_and_base(top: str) -> tuple[str, str] | None:
    """(HEAD, its default base), or None when nothing is committed to judge."""
    repo = open_repo(Path(top))
    try:
        head = resolve_commit(repo.top, "HEAD")
    except UsageError:
        return None  # no commit yet
    base = default_base(repo, head, policy_commit(repo))
    return None if base == head else (head, base)


def stop_decision(session: Session, session_id: str, stop_hook_active: bool) -> StopOutcome:
    """Whether this stop is blocked (module docstring)."""
    if session.in_sandbox:
        return StopOutcome(False, note=INSIDE_NOTE)
    if session.top is None or not set_up(session):
        return StopOutcome(False)  # not a repository, or not set up: no result to judge
    try:
        pair = _head_and_base(session.top)
    except OmsError as exc:
        return StopOutcome(True, f"oms cannot run the result gate here: {exc.message}")
    if pair is None:
        return StopOutcome(False)
    head = pair[0]
    if stop_hook_active:
        see = f"run `oms process-result --candidate {head[:12]}` to see the verdict"
        return StopOutcome(False, note=f"oms: not blocking again in a row; {see}")
    count = read_count(session_id)
    if count.blocks >= MAX_BLOCKS:
        return StopOutcome(False, note=f"oms: blocked this session's stop {MAX_BLOCKS} times; "
                           f"the result gate still needs `oms process-result --candidate "
                           f"{head[:12]}`")  # fmt: skip
    decision, reasons, checks = _gate_reasons(session.top, head)
    if decision == Decision.READY:
        return StopOutcome(False, note=f"oms: {head[:12]} is READY_FOR_HUMAN")
    if decision == Decision.BLOCKED and NO_PLAN in reasons:
        return StopOutcome(False, note=NO_PLAN_NOTE.format(head=head[:12]))
    _count_block(session_id, count)
    said = "could not judge" if decision is None else f"says {decision.value} for"
    listed = "; ".join(reasons[:_REASONS_SHOWN]) or "no reason given"
    output = failing_output(session, checks) if decision == Decision.FAILED else ""
    return StopOutcome(True, f"oms' result gate {said} commit {head[:12]}: {listed}. Fix this "
                       "and commit the fix before stopping.", output=output)  # fmt: skip
