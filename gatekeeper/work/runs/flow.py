"""`continue`, `loop` and `abort`: how a run is moved on, stopped, or told no.

The issue's one departure from the seed: MCP and a CLI without a terminal can `reject`,
`revise` (with a message) or say `none`; they can never say yes. `approve` comes only from
`oms run continue RUN --approve` at a controlling terminal (`via="terminal"`, which asks
there: `gates.approve_at_terminal`) or from an autopilot rule of the default branch's
policy. Anything else that asks to approve is refused (ApprovalRefused, exit 3) with the
command the human must run, and nothing changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gatekeeper.errors import UsageError
from gatekeeper.work.fence import Work
from gatekeeper.work.runs import actions, engine, gates
from gatekeeper.work.runs.api import Out, checked_text, exit_of, opened_runs, shown
from gatekeeper.work.runs.gates import ApprovalRefused
from gatekeeper.work.runs.model import MAX_MESSAGE_CHARS, Gate, Run
from gatekeeper.work.runs.store import NewArtifact, RunFinished, Runs, checked_run_id

APPROVALS = ("approve", "reject", "revise", "none")
VIA = ("terminal", "cli", "mcp")
SHOWN_CYCLES = 8
PLAN_LINES = 2000  # the whole plan, paged at the terminal (its tty bounds still hold)
REASON_CHARS = 500


def _checked(approval: str, message: str | None, via: str) -> None:
    if approval not in APPROVALS:
        raise UsageError(f"approval is one of {', '.join(APPROVALS)}, not {str(approval)[:40]!r}")
    if via not in VIA:
        raise UsageError(f"via is one of {', '.join(VIA)}, not {str(via)[:40]!r}")
    if message is not None:
        checked_text(message, "message", MAX_MESSAGE_CHARS)


def _open_gate(run: Run) -> Gate:
    if run.state != "awaiting_approval" or run.gate is None:
        raise UsageError(f"run {run.id} has no open gate")
    return run.gate


def refused_here(run: Run, why: str) -> ApprovalRefused:
    """The refusal of an approval asked for where no human can give it, naming what the
    human runs at their own terminal instead."""
    told = [actions.approve_command(run.id).to_json()]
    return ApprovalRefused(f"{why}: a human approves run {run.id} at a controlling terminal "
                           f"with `oms run continue {run.id} --approve`",
                           data={"next_actions": told})  # fmt: skip


def plan_lines(runs: Runs, run: Run, gate: Gate) -> list[str]:
    """What the human reads before approving a plan: the plan artifact's summary, then the
    plan itself (paged at the terminal; past PLAN_LINES a line names the artifact)."""
    if gate.artifact is None:
        return ["(no plan artifact)"]
    a = runs.artifact(run.id, gate.artifact)
    text = runs.content(a).decode("utf-8", "replace").splitlines()
    head = text[:PLAN_LINES]
    more = [f"... {len(text) - PLAN_LINES} more lines in {a.ref}"] if len(text) > PLAN_LINES else []
    return [f"goal: {run.objective[:300]}", f"plan {a.ref}: {a.summary}", "", *head, *more]


def _approve(work: Work, runs: Runs, run: Run, gate: Gate) -> Run:
    """A human's yes at the controlling terminal, recorded as `approval_granted` in the step
    that clears a plan gate; a transfer gate stays open until its step runs under the now
    approved manifest (clearing it would send the step to a fresh, unapproved one)."""
    if gate.kind == "transfer":
        assert gate.transfer is not None
        if gates.readiness(work, gate.transfer) != "previewed":
            # approved already (`oms transfer approve` as copied), or spent (expired): the
            # step goes on under it, or previews a fresh manifest and stops there again
            return run
    lines = plan_lines(runs, run, gate) if gate.kind == "plan" else []
    try:
        who = gates.approve_at_terminal(work, run, lines)
    except ApprovalRefused as exc:
        raise refused_here(run, exc.message) from None
    granted = ("approval_granted", {"gate": gate.kind, "who": who, "transfer": gate.transfer,
                                    "artifact": gate.artifact})  # fmt: skip
    if gate.kind == "plan":
        return runs.step(run, state="implementing", step=gate.step, gate=None,
                         events=[granted]).run  # fmt: skip
    return runs.step(run, events=[granted]).run


def _reject(runs: Runs, run: Run, gate: Gate, message: str | None, via: str) -> Run:
    why = f"rejected at the {gate.kind} gate" + (f": {message}" if message else "")
    return runs.step(run, state="failed", gate=None, stop_reason=why[:REASON_CHARS],
                     events=[("approval_rejected", {"gate": gate.kind, "via": via,
                                                    "message": message})]).run  # fmt: skip


def _revise(runs: Runs, run: Run, gate: Gate, message: str | None, via: str) -> Run:
    if gate.kind != "plan":
        raise UsageError(f"run {run.id} waits at a transfer gate: it takes approve or reject, "
                         "not revise")  # fmt: skip
    if message is None:
        raise UsageError("revise needs a message: what the planner should change")
    packet = NewArtifact(kind="revision_packet", data=message.encode(),
                         summary=" ".join(message.split())[:300], role="human")  # fmt: skip
    ref = runs.next_ref(run.id, "revision_packet")
    return runs.step(run, state="planning", step="plan", gate=None, artifacts=[packet],
                     events=[("revision_requested", {"via": via, "packet": ref,
                                                     "plan": gate.artifact})]).run  # fmt: skip


def _answered(work: Work, runs: Runs, run: Run, approval: str, message: str | None,
              via: str) -> Run:  # fmt: skip
    """The run after the answer to its open gate (UsageError when none is open)."""
    gate = _open_gate(run)
    if approval == "approve":
        if via != "terminal":
            raise refused_here(run, f"approve is refused over {via}")
        return _approve(work, runs, run, gate)
    if approval == "reject":
        return _reject(runs, run, gate, message, via)
    return _revise(runs, run, gate, message, via)


def continue_run(repo_dir: Path, run_id: str, approval: str = "none", message: str | None = None,
                 *, via: str = "mcp") -> Out:  # fmt: skip
    """`oms run continue` / `oms_continue`. `via` is "terminal" only for the CLI's
    `--approve` (which asks at the controlling terminal); "cli" or "mcp" otherwise. After
    the answer, the run advances one cycle (to its next gate or its end); a finished run
    is shown as it is, whatever the answer."""
    checked_run_id(run_id)
    _checked(approval, message, via)
    with opened_runs(repo_dir) as (work, runs):
        run = runs.get(run_id)
        if approval != "none" and not run.terminal:
            run = _answered(work, runs, run, approval, message, via)
        looped = engine.loop(work, runs, run, 1, work.loaded.policy.runs.max_steps_per_cycle)
        out = shown(work, runs, looped.run, looped.responses, stop=looped.stop)
        return out, exit_of(looped.run)


def loop_run(repo_dir: Path, run_id: str, max_cycles: int | None = None,
             max_steps: int | None = None) -> Out:  # fmt: skip
    """`oms run loop` / `oms_loop`: advance until a terminal state, a gate no autopilot rule
    passes, no progress, or the cycle cap (the policy's `[runs]` bounds by default). It
    never approves anything."""
    checked_run_id(run_id)
    with opened_runs(repo_dir) as (work, runs):
        bounds = work.loaded.policy.runs
        cycles = bounds.max_cycles if max_cycles is None else max_cycles
        steps = bounds.max_steps_per_cycle if max_steps is None else max_steps
        run = runs.get(run_id)
        looped = engine.loop(work, runs, run, cycles, steps)
        extra: dict[str, Any] = {"stop": looped.stop, "cycles": looped.cycles[-SHOWN_CYCLES:],
                                 "cycle_count": len(looped.cycles)}  # fmt: skip
        return shown(work, runs, looped.run, looped.responses, **extra), exit_of(looped.run)


def abort(repo_dir: Path, run_id: str, reason: str) -> Out:
    """`oms run abort` / `oms_abort`: a run that is not finished -> `aborted`, its gate
    closed. An implement run's ticket is the core's: a live lease is left to expire (or to
    finish) under the core's own rules, never moved here by a transition the core did not
    make; the event names the ticket so a human can see where it stands."""
    checked_run_id(run_id)
    checked_text(reason, "reason", MAX_MESSAGE_CHARS)
    with opened_runs(repo_dir) as (work, runs):
        run = runs.get(run_id)
        if run.terminal:
            raise RunFinished(f"run {run.id} is {run.state}; it cannot be aborted")
        ticket_state = work.ticket(run.ticket).state if run.ticket else None
        got = runs.step(run, state="aborted", gate=None, stop_reason=reason[:REASON_CHARS],
                        events=[("aborted", {"reason": reason[:REASON_CHARS],
                                             "ticket": run.ticket,
                                             "ticket_state": ticket_state})]).run  # fmt: skip
        return shown(work, runs, got), 0
