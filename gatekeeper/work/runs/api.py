"""The run commands as functions (one per command and MCP tool; the CLI and MCP render them).

Each opens the repository's `Work` and `Runs`, validates its input before anything is
created, does its work through the engine, and returns (the JSON it prints, its exit code):
0 for a run that advanced as asked (completed, or stopped at a gate), 1 for a failed run; a
refusal raises its typed error (mapped to its exit code in one place, `gatekeeper.errors`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gatekeeper.errors import UsageError
from gatekeeper.work.api import opened
from gatekeeper.work.fence import Work
from gatekeeper.work.runs import actions, mapping
from gatekeeper.work.runs.listing import list_runs as list_runs  # `oms run list`, `oms_runs`
from gatekeeper.work.runs.model import (
    GUEST_ROLES,
    MAX_CONSTRAINT_CHARS,
    MAX_CONSTRAINTS,
    MAX_GOAL_CHARS,
    Artifact,
    Mode,
    Run,
)
from gatekeeper.work.runs.store import ForeignRun, Runs, checked_run_id

MODES: tuple[str, ...] = ("plan", "research", "implement", "review")
FIRST_ROLE: Mapping[str, str] = {"plan": "planner", "research": "researcher",
                                 "implement": "implementer", "review": "critic"}  # fmt: skip
RECENT_EVENTS = 8
SHOWN_ARTIFACTS = 8
SHOWN_SUMMARY = 160  # per artifact or response in a run's answer; the artifact has it all
Out = tuple[dict[str, Any], int]


@contextmanager
def opened_runs(repo_dir: Path) -> Iterator[tuple[Work, Runs]]:
    with opened(repo_dir) as work:
        yield work, Runs(work)


# -- input ------------------------------------------------------------------------------------


def checked_text(text: str, what: str, limit: int) -> str:
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"the {what} is empty")
    if len(text) > limit:
        raise UsageError(f"the {what} is longer than {limit} characters")
    if "\x00" in text:
        raise UsageError(f"the {what} contains NUL")
    return text


def checked_constraints(constraints: Sequence[str] | None) -> tuple[str, ...]:
    got = tuple(constraints or ())
    if len(got) > MAX_CONSTRAINTS:
        raise UsageError(f"at most {MAX_CONSTRAINTS} constraints")
    return tuple(checked_text(c, "constraint", MAX_CONSTRAINT_CHARS) for c in got)


def checked_mode(mode: str) -> Mode:
    if mode not in MODES:
        raise UsageError(f"mode is one of {', '.join(MODES)}, not {mode[:40]!r}")
    return mode  # type: ignore[return-value]


def loop_bounds(auto_loop: bool, max_cycles: int | None, max_steps: int | None) -> tuple[int, int]:
    """How far a command that creates a run advances it: to its first gate or end (one
    cycle), or with `auto_loop` as `oms run loop` does."""
    if not auto_loop and (max_cycles is not None or max_steps is not None):
        raise UsageError("max_cycles and max_steps_per_cycle go with auto_loop")
    from gatekeeper.work.runs import engine  # as in `advanced`

    cycles = max_cycles if max_cycles is not None else (engine.DEFAULT_CYCLES if auto_loop else 1)
    steps = max_steps if max_steps is not None else engine.DEFAULT_STEPS_PER_CYCLE
    return cycles, steps


# -- output -----------------------------------------------------------------------------------


def artifact_row(x: Artifact, summary: int = SHOWN_SUMMARY) -> dict[str, Any]:
    return {"ref": x.ref, "kind": x.kind, "bytes": x.bytes, "role": x.role,
            "summary": x.summary[:summary]}  # fmt: skip


def response_row(r: Mapping[str, Any]) -> dict[str, Any]:
    """A provider response as a run's answer lists it: its summary cut (the artifact and
    `oms_read_artifact` have the whole answer)."""
    out = dict(r)
    if isinstance(out.get("summary"), str):
        out["summary"] = out["summary"][:SHOWN_SUMMARY]
    return out


def exit_of(run: Run) -> int:
    return 1 if run.state == "failed" else 0


def shown(work: Work, runs: Runs, run: Run, responses: Sequence[Mapping[str, Any]] = (),
          **extra: Any) -> dict[str, Any]:  # fmt: skip
    """A run as every run command returns it: compact, bounded, with `next_actions`."""
    arts = runs.artifacts(run.id)
    g = run.gate
    out: dict[str, Any] = {
        "run_id": run.id, "kind": run.kind, "mode": run.mode, "status": run.state,
        "step": run.step, "version": run.version, "roles": run.roles,
        "stop_reason": run.stop_reason,
        "approval_required": run.state == "awaiting_approval",
        "approval_reason": g.reason if g is not None else None,
        "gate": g.to_json() if g is not None else None,
        "goal": run.goal, "ticket": run.ticket,
        "artifacts": [artifact_row(x) for x in arts[-SHOWN_ARTIFACTS:]],
        "artifact_count": len(arts),
        "provider_response_count": len(responses),
        "responses": [response_row(r) for r in responses[-SHOWN_ARTIFACTS:]],
        "next_actions": [a.to_json() for a in actions.derive(work, run, arts)],
    }  # fmt: skip
    out.update(extra)
    return out


def advanced(work: Work, runs: Runs, run: Run, cycles: int, steps: int, **extra: Any) -> Out:
    # The engine (providers, the transfer gate) is imported where a run advances: reading
    # runs (`oms run list`, `status`) must not load it.
    from gatekeeper.work.runs import engine

    looped = engine.loop(work, runs, run, cycles, steps)
    out = shown(work, runs, looped.run, looped.responses, stop=looped.stop, **extra)
    return out, exit_of(looped.run)


# -- the commands that create runs --------------------------------------------------------------


def _needs(work: Work, roles_map: Mapping[str, str], run_role: str,
           agent: str | None = None) -> None:  # fmt: skip
    """Refuse (RoleUnavailable, exit 4) before creating a run whose first role cannot run."""
    from gatekeeper.work import roles  # as the engine in `advanced`

    roles.require(mapping.role_of(work.loaded, roles_map, run_role, agent), unattended=True)


def plan(repo_dir: Path, goal: str, orchestrator: str | None = None,
         constraints: Sequence[str] | None = None, auto_loop: bool = False,
         max_cycles: int | None = None, max_steps: int | None = None, *,
         requested_by: Sequence[Mapping[str, Any]] = ()) -> Out:  # fmt: skip
    """`oms run plan` / `oms_plan`: a read-only plan run."""
    checked_text(goal, "goal", MAX_GOAL_CHARS)
    cons = checked_constraints(constraints)
    cycles, steps = loop_bounds(auto_loop, max_cycles, max_steps)
    given = {"orchestrator": orchestrator, "planner": orchestrator} if orchestrator else {}
    with opened_runs(repo_dir) as (work, runs):
        roles_map = mapping.run_mapping(work.loaded, work.repo.repo_id, given)
        _needs(work, roles_map, "planner")
        run = runs.create("plan", "plan", goal, cons, roles_map, step="start",
                          requested_by=requested_by)  # fmt: skip
        out, code = advanced(work, runs, run, cycles, steps)
        plans = [a for a in out["artifacts"] if a["kind"] == "plan"]
        out["plan"] = plans[-1]["summary"] if plans else None
        return out, code


def orchestrate(repo_dir: Path, goal: str, mode: str = "implement",
                role_mapping: Mapping[str, str] | None = None,
                constraints: Sequence[str] | None = None, auto_loop: bool = False,
                max_cycles: int | None = None, max_steps: int | None = None, *,
                requested_by: Sequence[Mapping[str, Any]] = ()) -> Out:  # fmt: skip
    """`oms run orchestrate` / `oms_orchestrate`: a full run in `mode`."""
    checked_text(goal, "goal", MAX_GOAL_CHARS)
    m = checked_mode(mode)
    cons = checked_constraints(constraints)
    cycles, steps = loop_bounds(auto_loop, max_cycles, max_steps)
    with opened_runs(repo_dir) as (work, runs):
        roles_map = mapping.run_mapping(work.loaded, work.repo.repo_id, role_mapping)
        _needs(work, roles_map, FIRST_ROLE[m])
        run = runs.create("orchestrate", m, goal, cons, roles_map, step="start",
                          requested_by=requested_by)  # fmt: skip
        return advanced(work, runs, run, cycles, steps)


def consult(repo_dir: Path, goal: str, role: str, agent: str | None = None,
            constraints: Sequence[str] | None = None, *,
            requested_by: Sequence[Mapping[str, Any]] = ()) -> Out:  # fmt: skip
    """`oms run consult` / `oms_consult`: one read-only guest role, now, as a run of its own."""
    from gatekeeper.work.runs import engine  # as in `advanced`

    checked_text(goal, "goal", MAX_GOAL_CHARS)
    if role not in GUEST_ROLES:
        raise UsageError(f"a consult's role is one of {', '.join(GUEST_ROLES)}, not {role[:40]!r}")
    cons = checked_constraints(constraints)
    with opened_runs(repo_dir) as (work, runs):
        given = {role: agent} if agent is not None else {}
        roles_map = mapping.run_mapping(work.loaded, work.repo.repo_id, given)
        _needs(work, roles_map, role)
        run = runs.create("consult", "research", goal, cons, roles_map, step=f"consult:{role}",
                          requested_by=requested_by)  # fmt: skip
        out, code = advanced(work, runs, run, 1, engine.DEFAULT_STEPS_PER_CYCLE,
                             consulted_role=role,
                             consulted_agent=roles_map.get(role))  # fmt: skip
        return out, code


# -- reads ------------------------------------------------------------------------------------


def require_started_by(repo_dir: Path, run_id: str, requester: str) -> None:
    """ForeignRun unless run `run_id` was started at the request of `requester` (an agent
    run's subject name): an agent inside acts only on its own runs. A run that does not
    exist is refused alike, so the answer tells nothing about other runs."""
    checked_run_id(run_id)
    with opened_runs(repo_dir) as (_, runs):
        if requester not in runs.started_by(run_id):
            raise ForeignRun(f"run {run_id} was not started by this agent run: an agent acts "
                             "only on the runs it started")  # fmt: skip


def status(repo_dir: Path, run_id: str, detail: str = "summary") -> Out:
    """`oms run status` / `oms_status` with a run: compact, or `full` on request."""
    checked_run_id(run_id)
    if detail not in ("summary", "full"):
        raise UsageError("detail is summary or full")
    with opened_runs(repo_dir) as (work, runs):
        run = runs.get(run_id)
        last = None if detail == "full" else RECENT_EVENTS
        events = [e.to_json() for e in runs.events(run_id, last)]
        extra: dict[str, Any] = {"counts": runs.counts(run_id), "recent_events": events,
                                 "objective": run.objective, "cycles": run.cycles}  # fmt: skip
        if detail == "full":
            extra["all_artifacts"] = [artifact_row(x) for x in runs.artifacts(run_id)]
            extra["constraints"] = list(run.constraints)
        return shown(work, runs, run, **extra), 0


def read_artifact(repo_dir: Path, run_id: str, ref: str, offset: int = 0,
                  max_bytes: int = 20_000) -> Out:  # fmt: skip
    """`oms run artifact` / `oms_read_artifact` with a run: a bounded part of an artifact
    recorded on that run, and of nothing else."""
    checked_run_id(run_id)
    if offset < 0 or max_bytes < 1:
        raise UsageError("offset is 0 or more and max_bytes 1 or more")
    with opened_runs(repo_dir) as (_, runs):
        a = runs.artifact(run_id, ref)
        data = runs.content(a)
        part = data[offset : offset + max_bytes]
        end = offset + len(part)
        return {"run_id": run_id, "ref": a.ref, "kind": a.kind, "bytes": a.bytes,
                "media_type": a.media_type, "offset": offset,
                "text": part.decode("utf-8", "replace"),
                "next_offset": end if end < len(data) else None}, 0  # fmt: skip
