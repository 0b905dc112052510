"""`reconcile`: what is left of a completed run, asked of the planner from a progress packet.

A reconcile is a run of its own (kind `reconcile`, mode `research`, parent = the completed
run; at most one open per parent). Its one step, `reconcile:<run role>`, builds the
`progress` packet from the parent (objective, state, stop reason, artifacts' refs and
summaries, ticket state; bounded markdown) and asks the planner (or the orchestrator) with
the packet as the brief: it is the transfer manifest's purpose, so it is scanned and it is
what leaves, and an external role stops the run at `awaiting_approval` before anything is
sent. The answer must be JSON matching `SCHEMA` (given as `$OMS_SCHEMA_FILE`); it becomes
the `reconciliation` artifact. A malformed answer fails the run with the reason, the raw
answer kept as a `log` artifact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gatekeeper.errors import UsageError
from gatekeeper.work import roles
from gatekeeper.work.fence import Work
from gatekeeper.work.runs import ask as a
from gatekeeper.work.runs import engine, mapping
from gatekeeper.work.runs.api import Out, opened_runs, shown
from gatekeeper.work.runs.engine import Progress, step
from gatekeeper.work.runs.gates import TransferBlocked
from gatekeeper.work.runs.model import MAX_GOAL_CHARS, MAX_MESSAGE_CHARS, TERMINAL, Gate, Run
from gatekeeper.work.runs.store import NewArtifact, Runs, checked_run_id

RECONCILERS: tuple[str, ...] = ("planner", "orchestrator")
APPROVALS: tuple[str, ...] = ("approve", "reject", "revise", "none")
PROGRESS_CHARS = 15_000  # with the objective (4096) it stays under the purpose bound (20,000)
ARTIFACT_LINE_CHARS = 300
MAX_LISTED = 40  # artifacts named in a progress packet
MAX_ITEMS = 50  # of `remaining` and `next`
ITEM_CHARS = 1000
MARKDOWN_CHARS = 64_000
SHOWN_MARKDOWN = 2000  # of the answer's markdown inline; the whole is the artifact
SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["status", "remaining", "next", "markdown"],
    "properties": {
        "status": {"enum": ["done", "partial", "blocked"]},
        "remaining": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_ITEMS},
        "next": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_ITEMS},
        "markdown": {"type": "string", "maxLength": MARKDOWN_CHARS},
    },
}


class Malformed(ValueError):
    """A reconciliation answer that does not match `SCHEMA`."""


# -- the progress packet ------------------------------------------------------------------------


def progress_packet(work: Work, runs: Runs, parent: Run) -> str:
    """The parent run as markdown, bounded: what the reconciler sees (and what leaves)."""
    lines = [f"# Progress of run {parent.id}", "",
             f"- objective: {parent.objective}", f"- kind: {parent.kind}, mode: {parent.mode}",
             f"- state: {parent.state}",
             f"- stop reason: {parent.stop_reason or 'none'}"]  # fmt: skip
    if parent.constraints:
        lines.append("- constraints: " + "; ".join(parent.constraints))
    if parent.ticket is not None:
        t = work.ticket(parent.ticket)
        lines.append(f"- ticket: {t.id} {t.state} (attempts {t.attempts}/{t.max_attempts}, "
                     f"human hold: {'yes' if t.human_hold else 'no'})")  # fmt: skip
    arts = runs.artifacts(parent.id)
    lines += ["", f"## Artifacts ({len(arts)})", ""]
    for x in arts[-MAX_LISTED:]:
        line = f"- {x.ref} ({x.kind}, {x.bytes} bytes, {x.role or 'oms'}): {x.summary}"
        lines.append(line[:ARTIFACT_LINE_CHARS])
    return "\n".join(lines)[:PROGRESS_CHARS] + "\n"


def _progress(work: Work, runs: Runs, run: Run) -> tuple[str, NewArtifact | None]:
    """The run's progress packet: the one it recorded (so an approved manifest still holds
    what is sent), else a fresh one to attach."""
    found = [x for x in runs.artifacts(run.id) if x.kind == "progress"]
    if found:
        return runs.content(found[-1]).decode("utf-8", "replace"), None
    assert run.parent is not None
    text = progress_packet(work, runs, runs.get(run.parent))
    return text, NewArtifact(kind="progress", data=text.encode(),
                             summary=a.summarise(text, 200))  # fmt: skip


# -- the answer ---------------------------------------------------------------------------------


def _strings(doc: Mapping[str, Any], key: str) -> list[str]:
    got = doc[key]
    if not isinstance(got, list) or not all(isinstance(s, str) for s in got):
        raise Malformed(f"{key} is not a list of strings")
    if len(got) > MAX_ITEMS or any(len(s) > ITEM_CHARS for s in got):
        raise Malformed(f"{key} has more than {MAX_ITEMS} items or an item over {ITEM_CHARS}")
    return got


def parsed(text: str) -> dict[str, Any]:
    """The answer as `SCHEMA` says (a ```json fence around it is allowed); Malformed else."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[-1].rsplit("```", 1)[0]
    try:
        doc = json.loads(body)
    except ValueError:
        raise Malformed("the answer is not JSON") from None
    if not isinstance(doc, dict):
        raise Malformed("the answer is not a JSON object")
    keys = set(SCHEMA["required"])
    if set(doc) != keys:
        raise Malformed(f"the answer's keys are not {', '.join(sorted(keys))}")
    if doc["status"] not in ("done", "partial", "blocked"):
        raise Malformed("status is not done, partial or blocked")
    if not isinstance(doc["markdown"], str) or len(doc["markdown"]) > MARKDOWN_CHARS:
        raise Malformed(f"markdown is not a string of at most {MARKDOWN_CHARS} characters")
    return {"status": doc["status"], "remaining": _strings(doc, "remaining"),
            "next": _strings(doc, "next"), "markdown": doc["markdown"]}  # fmt: skip


def _reconciliation(doc: Mapping[str, Any], role: str) -> NewArtifact:
    left = len(doc["remaining"])
    return NewArtifact(kind="reconciliation", data=json.dumps(doc, sort_keys=True).encode(),
                       summary=a.summarise(f"{doc['status']}, {left} remaining: "
                                           + "; ".join(doc["remaining"]), 300),
                       media_type="application/json", role=role)  # fmt: skip


# -- the step -----------------------------------------------------------------------------------


@step("reconcile")
def reconcile_step(work: Work, runs: Runs, run: Run) -> Progress:
    """Attach the progress packet, pass the transfer gate, ask, check the answer."""
    run_role = engine.step_arg(run) or "planner"
    text, packet = _progress(work, runs, run)
    attach = [packet] if packet is not None else []
    b = a.Brief(run_role=run_role, kind="reconcile", step=run.step, text=text,
                schema=SCHEMA)  # fmt: skip
    try:
        got = a.ask(work, run, b, "log")
    except TransferBlocked as exc:
        return engine.fail(runs, run, exc.message, artifacts=attach)
    if isinstance(got, Gate):
        return engine.stop_at(runs, run, got, artifacts=attach)
    events: list[tuple[str, Mapping[str, Any]]] = [
        ("provider_invoked", got.summary()),
        *got.cleared.events(),
    ]
    if not got.ok:
        p = engine.fail(runs, run, f"{run_role}: {got.problem}", artifacts=[*attach, got.artifact],
                        events=events)  # fmt: skip
    else:
        try:
            doc = parsed(got.receipt.output)
        except Malformed as exc:
            p = engine.fail(runs, run, f"{run_role}: malformed reconciliation: {exc}",
                            artifacts=[*attach, got.artifact], events=events)  # fmt: skip
        else:
            p = engine.move(runs, run, "completed", run.step,
                            artifacts=[*attach, _reconciliation(doc, run_role)],
                            events=[*events, ("reconciled", {"status": doc["status"]})],
                            stop_reason=f"{run_role} reconciled: {doc['status']}")  # fmt: skip
    p.responses.append(got.summary())
    return p


# -- the command --------------------------------------------------------------------------------


def open_reconcile(work: Work, parent: str) -> str | None:
    """The parent's one open (not terminal) reconcile run, if there is one."""
    rows = work.db.read("SELECT id FROM runs WHERE parent = ? AND kind = 'reconcile' AND state "
                        "NOT IN (?, ?, ?) ORDER BY created DESC, id LIMIT 1", parent,
                        *sorted(TERMINAL))  # fmt: skip
    return str(rows[0]["id"]) if rows else None


def _parent(runs: Runs, run_id: str) -> Run:
    parent = runs.get(run_id)
    if parent.kind == "reconcile":
        raise UsageError(f"run {run_id} is itself a reconcile run; reconcile its parent "
                         f"{parent.parent}")  # fmt: skip
    if parent.state != "completed":
        raise UsageError(f"run {run_id} is {parent.state}; only a completed run is reconciled")
    return parent


def _checked(run_id: str, role: str | None, approval: str, message: str | None) -> str:
    checked_run_id(run_id)
    role = role or "planner"
    if role not in RECONCILERS:
        raise UsageError(f"a reconcile asks the planner or the orchestrator, not {role[:40]!r}")
    if approval not in APPROVALS:
        raise UsageError(f"approval is one of {', '.join(APPROVALS)}, not {approval[:40]!r}")
    if message is not None and len(message) > MAX_MESSAGE_CHARS:
        raise UsageError(f"the message is longer than {MAX_MESSAGE_CHARS} characters")
    return role


def _extra(runs: Runs, run: Run) -> dict[str, Any]:
    arts = runs.artifacts(run.id)
    progress = [x.ref for x in arts if x.kind == "progress"]
    out: dict[str, Any] = {"parent_run": run.parent,
                           "progress_ref": progress[-1] if progress else None}  # fmt: skip
    done = [x for x in arts if x.kind == "reconciliation"]
    if done:
        doc = json.loads(runs.content(done[-1]))
        out["reconciliation"] = {
            "ref": done[-1].ref, "status": doc["status"],
            "remaining": [s[:200] for s in doc["remaining"][:10]],
            "next": [s[:200] for s in doc["next"][:10]],
            "markdown": doc["markdown"][:SHOWN_MARKDOWN],
            "truncated": len(doc["markdown"]) > SHOWN_MARKDOWN or
            len(doc["remaining"]) > 10 or len(doc["next"]) > 10,
        }  # fmt: skip
    return out


def reconcile(repo_dir: Path, run_id: str, role: str | None = None, approval: str = "none",
              message: str | None = None, *, via: str = "mcp",
              requested_by: Sequence[Mapping[str, Any]] = ()) -> Out:  # fmt: skip
    """`oms run reconcile` / `oms_reconcile` on a completed run: create (or find) its
    reconcile run and advance it to its gate or its end; with an `approval` other than
    `none`, that is `continue` of the open reconcile run (approve only at a terminal)."""
    run_role = _checked(run_id, role, approval, message)
    with opened_runs(repo_dir) as (work, runs):
        parent = _parent(runs, run_id)
        found = open_reconcile(work, parent.id)
        if approval != "none":
            if found is None:
                raise UsageError(f"run {run_id} has no open reconcile run to {approval}")
        elif found is None:
            roles_map = mapping.run_mapping(work.loaded, work.repo.repo_id, {})
            roles.require(mapping.role_of(work.loaded, roles_map, run_role), unattended=True)
            objective = f"Reconcile run {parent.id}: {parent.objective}"[:MAX_GOAL_CHARS]
            run = runs.create("reconcile", "research", objective, (), roles_map,
                              step=f"reconcile:{run_role}", parent=parent.id,
                              requested_by=requested_by)  # fmt: skip
            return _advanced(work, runs, run)
        else:
            return _advanced(work, runs, runs.get(found))
    from gatekeeper.work.runs import flow  # the continue of a reconcile run is flow's

    out, code = flow.continue_run(repo_dir, found, approval, message, via=via)
    with opened_runs(repo_dir) as (_, runs):
        out.update(_extra(runs, runs.get(found)))
    return out, code


def _advanced(work: Work, runs: Runs, run: Run) -> Out:
    looped = engine.loop(work, runs, run, 1, engine.DEFAULT_STEPS_PER_CYCLE)
    out = shown(work, runs, looped.run, looped.responses, stop=looped.stop,
                **_extra(runs, looped.run))  # fmt: skip
    return out, 1 if looped.run.state == "failed" else 0
