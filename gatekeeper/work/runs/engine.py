"""How a run advances: one step at a time, each one fenced transition (or none).

A run's `step` names what it does next; `STEPS` maps that name (its part before `:`) to
the function that does it. A step function calls at most one provider or core operation,
records what happened as ONE `Runs.step` (state, next step, gate, artifacts, events), and
returns a `Progress`. A step that finds its gate still closed changes nothing (no
progress). A blocked transfer fails the run (its reason recorded); any other refusal (a
role that cannot run, an unusable sandbox or store, a stale version) propagates and
changes nothing, so the command exits with that refusal and the run can be continued.
`loop` repeats `advance` until a terminal state, a gate it cannot pass, no progress, or the
cycle cap; it never approves anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.errors import NotFound, UsageError
from gatekeeper.work.fence import Work
from gatekeeper.work.providers.base import Role
from gatekeeper.work.runs import gates
from gatekeeper.work.runs.gates import Cleared, TransferBlocked, transfer_gate
from gatekeeper.work.runs.model import Gate, Run, RunState
from gatekeeper.work.runs.store import NewArtifact, Runs

DEFAULT_CYCLES = 8
DEFAULT_STEPS_PER_CYCLE = 10
MAX_CYCLES = 50
MAX_STEPS_PER_CYCLE = 50


@dataclass
class Progress:
    """What advancing did: the run now, whether it moved, the provider answers it got."""

    run: Run
    moved: bool
    responses: list[dict[str, Any]] = field(default_factory=list)


Step = Callable[[Work, Runs, Run], Progress]
STEPS: dict[str, Step] = {}


def step(name: str) -> Callable[[Step], Step]:
    """Register a step function under `name` (the part of `Run.step` before any `:`)."""

    def register(fn: Step) -> Step:
        STEPS[name] = fn
        return fn

    return register


def step_name(run: Run) -> str:
    return run.step.split(":", 1)[0]


def step_arg(run: Run) -> str:
    return run.step.split(":", 1)[1] if ":" in run.step else ""


def _load_steps() -> None:
    # The step modules register themselves; imported here so that every caller of
    # `advance` sees all of them (and the modules may import this one).
    from gatekeeper.work.runs import implement, readonly, reconcile  # noqa: F401


def advance(work: Work, runs: Runs, run: Run) -> Progress:
    """One step of `run`, or none (a terminal run; a gate still closed)."""
    _load_steps()
    if run.terminal:
        return Progress(run, False)
    fn = STEPS.get(step_name(run))
    if fn is None:
        raise NotFound(f"run {run.id}: no step {run.step!r}")
    return fn(work, runs, run)


@dataclass
class Looped:
    run: Run
    stop: str  # terminal | gate | no_progress | cycle_cap
    cycles: list[dict[str, Any]]
    responses: list[dict[str, Any]]


def loop(work: Work, runs: Runs, run: Run, max_cycles: int = DEFAULT_CYCLES,
         max_steps: int = DEFAULT_STEPS_PER_CYCLE) -> Looped:  # fmt: skip
    """Advance until a terminal state, a gate, no progress, or `max_cycles` x `max_steps`."""
    if not 1 <= max_cycles <= MAX_CYCLES or not 1 <= max_steps <= MAX_STEPS_PER_CYCLE:
        raise UsageError(f"cycles are 1 to {MAX_CYCLES} and steps per cycle 1 to "
                         f"{MAX_STEPS_PER_CYCLE}")  # fmt: skip
    cycles: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    for c in range(1, max_cycles + 1):
        steps: list[dict[str, Any]] = []
        for _ in range(max_steps):
            before = run.state
            got = advance(work, runs, run)
            run = got.run
            responses.extend(got.responses)
            if not got.moved:
                cycles.append({"cycle": c, "steps": steps})
                stop = "terminal" if run.terminal else (
                    "gate" if run.state == "awaiting_approval" else "no_progress")  # fmt: skip
                return Looped(run, stop, cycles, responses)
            steps.append({"from": before, "to": run.state, "step": run.step})
            # a gate an autopilot rule passes is no stop: its step records the rule and goes on
            waits = run.state == "awaiting_approval" and not gates.auto_passes(work, run.gate)
            if run.terminal or waits:
                cycles.append({"cycle": c, "steps": steps})
                return Looped(run, "terminal" if run.terminal else "gate", cycles, responses)
        cycles.append({"cycle": c, "steps": steps})
    return Looped(run, "cycle_cap", cycles, responses)


# -- what steps share -------------------------------------------------------------------------


def stop_at(runs: Runs, run: Run, gate: Gate, artifacts: Sequence[NewArtifact] = (),
            events: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> Progress:  # fmt: skip
    """Stop at `gate` (no change when the run already waits there)."""
    if run.state == "awaiting_approval" and run.gate == gate and not artifacts:
        return Progress(run, False)
    asked = ("approval_requested",
             {"gate": gate.kind, "role": gate.role, "transfer": gate.transfer,
              "artifact": gate.artifact})  # fmt: skip
    got = runs.step(
        run,
        state="awaiting_approval",
        gate=gate,
        step=gate.step,
        artifacts=artifacts,
        events=[*events, asked],
    )
    return Progress(got.run, True)


def fail(runs: Runs, run: Run, reason: str, artifacts: Sequence[NewArtifact] = (),
         events: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> Progress:  # fmt: skip
    why = reason[:500]
    got = runs.step(
        run,
        state="failed",
        gate=None,
        stop_reason=why,
        artifacts=artifacts,
        events=[*events, ("run_failed", {"reason": why})],
    )
    return Progress(got.run, True)


def move(runs: Runs, run: Run, state: RunState, next_step: str, *,
         artifacts: Sequence[NewArtifact] = (),
         events: Sequence[tuple[str, Mapping[str, Any]]] = (),
         stop_reason: str | None = None, **cols: Any) -> Progress:  # fmt: skip
    """The run to `state`, its next step `next_step`, the gate closed."""
    got = runs.step(run, state=state, step=next_step, gate=None, artifacts=artifacts,
                    events=events, stop_reason=stop_reason, **cols)  # fmt: skip
    return Progress(got.run, True)


def through_transfer(work: Work, runs: Runs, run: Run, role: Role, run_role: str, step: str,
                     purpose: str) -> Cleared | Progress:  # fmt: skip
    """The step's transfer gate: Cleared to go on, or the Progress of stopping at the gate
    (or of failing the run when the manifest is blocked)."""
    try:
        cleared = transfer_gate(work, run, role, run_role, step, purpose)
    except TransferBlocked as exc:
        return fail(runs, run, exc.message)
    if isinstance(cleared, Gate):
        return stop_at(runs, run, cleared)
    return cleared
