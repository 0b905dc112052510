"""The read-only steps: plan, research, review, consult (and where a run starts).

Each asks one role (`ask.ask`) and attaches its answer: a `plan` artifact for planning, a
`report` for research, review and a consult. A plan run, a research or review run and a
consult complete with their answer; an implement run's plan stops at the `plan` gate
(`gates`), which only a human at a terminal (or `[runs] autopilot = ["plan"]`) passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.work.fence import Work
from gatekeeper.work.runs import ask as a
from gatekeeper.work.runs import engine
from gatekeeper.work.runs.engine import Progress, step
from gatekeeper.work.runs.gates import TransferBlocked
from gatekeeper.work.runs.model import ArtifactKind, Gate, Run
from gatekeeper.work.runs.store import Runs

# mode -> (run role, kind of answer, artifact kind)
ASKED: dict[str, tuple[str, str, ArtifactKind]] = {
    "plan": ("planner", "plan", "plan"),
    "research": ("researcher", "research", "report"),
    "review": ("critic", "review", "report"),
}


@step("start")
def start(work: Work, runs: Runs, run: Run) -> Progress:
    """Where a run goes first: its mode's question, or for an implement run the plan when a
    planner plays in it, else straight to the implementer."""
    if run.mode == "implement":
        first = "plan" if "planner" in run.roles else "implement"
        state = "planning" if first == "plan" else "implementing"
    else:
        first, state = run.mode, "planning"
    return engine.move(runs, run, state, first, events=[("run_started", {"step": first})])  # type: ignore[arg-type]


def revision_evidence(runs: Runs, run: Run) -> list[dict[str, Any]]:
    """The latest revision packet of the run (a human's `revise` message), as evidence."""
    packets = [x for x in runs.artifacts(run.id) if x.kind == "revision_packet"]
    if not packets:
        return []
    last = packets[-1]
    return [{"ref": last.ref, "kind": last.kind,
             "text": runs.content(last).decode("utf-8", "replace")}]  # fmt: skip


def answered(work: Work, runs: Runs, run: Run, b: a.Brief, kind: ArtifactKind,
             done: Any) -> Progress:  # fmt: skip
    """Ask, then: stop at the transfer gate, fail on a blocked transfer or a failed call,
    or `done(answer)` -> Progress."""
    try:
        got = a.ask(work, run, b, kind)
    except TransferBlocked as exc:
        return engine.fail(runs, run, exc.message)
    if isinstance(got, Gate):
        return engine.stop_at(runs, run, got)
    events: list[tuple[str, Mapping[str, Any]]] = [
        ("provider_invoked", got.summary()),
        *got.cleared.events(),
    ]
    if not got.ok:
        p = engine.fail(runs, run, f"{b.run_role}: {got.problem}", artifacts=[got.artifact],
                        events=events)  # fmt: skip
    else:
        p = done(got, events)
    p.responses.append(got.summary())
    return p


def _mode_step(work: Work, runs: Runs, run: Run) -> Progress:
    run_role, kind, artifact = ASKED[engine.step_name(run)]
    b = a.Brief(run_role=run_role, kind=kind, step=run.step, text=run.objective,
                evidence=revision_evidence(runs, run))  # fmt: skip

    def done(got: a.Answer, events: list[tuple[str, Mapping[str, Any]]]) -> Progress:
        if run.mode == "implement":
            # the ref the plan gets: the version fence makes the count read here exact
            ref = runs.next_ref(run.id, got.artifact.kind)
            plan_gate = Gate(kind="plan", step="implement", role="planner",
                             policy_role=got.role.name, artifact=ref,
                             reason="approve the plan before the implementer writes")  # fmt: skip
            return engine.stop_at(runs, run, plan_gate, artifacts=[got.artifact], events=events)
        return engine.move(runs, run, "completed", run.step, artifacts=[got.artifact],
                           events=events, stop_reason=f"{run_role} answered")  # fmt: skip

    return answered(work, runs, run, b, artifact, done)


step("plan")(_mode_step)
step("research")(_mode_step)
step("review")(_mode_step)


@step("consult")
def consult(work: Work, runs: Runs, run: Run) -> Progress:
    """A consult run: `consult:<run role>`; its answer completes the run."""
    run_role = engine.step_arg(run)
    kind: ArtifactKind = "plan" if run_role in ("planner", "orchestrator") else "report"
    b = a.Brief(run_role=run_role, kind="consult", step=run.step, text=run.objective)

    def done(got: a.Answer, events: list[tuple[str, Mapping[str, Any]]]) -> Progress:
        return engine.move(runs, run, "completed", run.step, artifacts=[got.artifact],
                           events=events, stop_reason=f"{run_role} answered")  # fmt: skip

    return answered(work, runs, run, b, kind, done)
