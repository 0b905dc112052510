"""`summon` and `fanout`: read-only, advisory roles brought onto an existing run.

A summon asks one guest role (thehood's SUMMON_ROLES) about a run in any state, completed
ones included, and records ONE step: the `directive` sent (the canonical brief document),
the answer (`plan` for a plan, else `report`) and an `agent_summoned` event carrying the
typed handoff. It never changes the run's state, step or gate, and a one-call `agent`
override never rewrites the run's role mapping.

An external role passes a transfer gate of its own beside the run's (the run's gate is
never touched): the first call previews a manifest, records it as a `transfer_manifest`
artifact keyed by the summon's arguments, and answers `awaiting_approval`; the same call
again, once a human approved that manifest, spends the approval and runs. Autopilot rules
of the default branch's policy approve at once.

A fan-out is up to 8 summons in a row (policy can lower the cap, never raise it). Its
evidence is sidecar-only: it never moves the run, never passes its gate and satisfies no
verifier, QA or completion gate; a QA agent's opinion is not runtime-captured evidence.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785

from gatekeeper.agent.workspace import new_run_id as new_agent_run_id
from gatekeeper.errors import NotFound, UsageError
from gatekeeper.repo.refs import default_branch_ref
from gatekeeper.work.fence import Work
from gatekeeper.work.providers import adapter
from gatekeeper.work.providers.base import ProviderRequest, Role
from gatekeeper.work.runs import actions, ask, gates
from gatekeeper.work.runs.api import (
    Out,
    checked_constraints,
    checked_text,
    opened_runs,
    shown,
)
from gatekeeper.work.runs.model import (
    FANOUT_HARD_CAP,
    MAX_GOAL_CHARS,
    SUMMON_ROLES,
    ArtifactKind,
    Gate,
    Run,
)
from gatekeeper.work.runs.store import NewArtifact, Runs, checked_run_id

KINDS: tuple[str, ...] = ("review", "qa", "critique", "research", "plan")
DEFAULT_KIND: Mapping[str, str] = {"qa": "qa", "critic": "critique", "researcher": "research",
                                   "planner": "plan", "orchestrator": "plan",
                                   "verifier": "review"}  # fmt: skip
MAX_PERSONA_CHARS = 500
MAX_AGENT_CHARS = 200
MAX_EVIDENCE_REFS = 8
EVIDENCE_CHARS = 8000  # of each evidence artifact's text, in the brief document
MAX_FANOUT_INPUT = 4 * FANOUT_HARD_CAP  # items past this are a usage error, not "skipped"
ITEM_SUMMARY_CHARS = 200
ITEM_KEYS = frozenset({"role", "brief", "agent", "kind", "persona", "constraints",
                       "evidence_refs"})  # fmt: skip


@dataclass(frozen=True)
class Call:
    """One summon's arguments, checked; `key` names it across calls (its side gate)."""

    role: str
    kind: str
    brief: str
    agent: str | None = None
    persona: str | None = None
    constraints: tuple[str, ...] = ()
    evidence_refs: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        doc = {"role": self.role, "kind": self.kind, "brief": self.brief, "agent": self.agent,
               "persona": self.persona, "constraints": list(self.constraints),
               "evidence_refs": list(self.evidence_refs)}  # fmt: skip
        return hashlib.sha256(rfc8785.dumps(doc)).hexdigest()

    def arguments(self, run_id: str) -> dict[str, Any]:
        """The same call again, as `oms_summon`'s arguments."""
        out: dict[str, Any] = {"run_id": run_id, "role": self.role, "brief": self.brief,
                               "kind": self.kind}  # fmt: skip
        for name in ("agent", "persona"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.constraints:
            out["constraints"] = list(self.constraints)
        if self.evidence_refs:
            out["evidence_refs"] = list(self.evidence_refs)
        return out


def checked_call(role: Any, brief: Any, agent: Any = None, kind: Any = None,
                 persona: Any = None, constraints: Any = None,
                 evidence_refs: Any = None) -> Call:  # fmt: skip
    """A summon's arguments, or a one-line UsageError for the first bad one."""
    if role not in SUMMON_ROLES:
        raise UsageError(f"a summoned role is one of {', '.join(SUMMON_ROLES)}, not "
                         f"{str(role)[:40]!r}")  # fmt: skip
    kind = DEFAULT_KIND[role] if kind is None else kind
    if kind not in KINDS:
        raise UsageError(f"a summon's kind is one of {', '.join(KINDS)}, not {str(kind)[:40]!r}")
    checked_text(brief, "brief", MAX_GOAL_CHARS)
    if agent is not None:
        checked_text(agent, "agent", MAX_AGENT_CHARS)
    if persona is not None:
        checked_text(persona, "persona", MAX_PERSONA_CHARS)
    if constraints is not None and not isinstance(constraints, list | tuple):
        raise UsageError("constraints are a list of strings")
    refs = evidence_refs or ()
    if not isinstance(refs, list | tuple) or not all(isinstance(r, str) for r in refs):
        raise UsageError("evidence_refs are a list of artifact refs")
    if len(refs) > MAX_EVIDENCE_REFS:
        raise UsageError(f"at most {MAX_EVIDENCE_REFS} evidence_refs")
    return Call(role, kind, brief, agent, persona, checked_constraints(constraints),
                tuple(dict.fromkeys(refs)))  # fmt: skip


def evidence_of(runs: Runs, run: Run, refs: Sequence[str]) -> list[dict[str, Any]]:
    """The artifacts named, recorded on THIS run (NotFound otherwise), their text bounded."""
    out = []
    for ref in refs:
        try:
            a = runs.artifact(run.id, ref)
        except NotFound:
            raise NotFound(f"run {run.id} has no artifact {ref[:40]!r}; evidence_refs name "
                           "artifacts of the run summoned onto") from None  # fmt: skip
        text = runs.content(a)[:EVIDENCE_CHARS].decode("utf-8", "replace")
        out.append({"ref": a.ref, "kind": a.kind, "text": text})
    return out


def brief_of(runs: Runs, run: Run, c: Call) -> ask.Brief:
    return ask.Brief(run_role=c.role, kind=c.kind, text=c.brief, step=f"summon:{c.role}",
                     agent=c.agent, persona=c.persona, constraints=c.constraints,
                     evidence=evidence_of(runs, run, c.evidence_refs))  # fmt: skip


@dataclass
class Summoned:
    """What one summon did: completed | failed | awaiting_approval (| blocked: a manifest
    that must not leave; fan-out only, a lone summon raises TransferBlocked)."""

    call: Call
    role: Role
    status: str
    stop_reason: str
    run: Run
    directive_ref: str | None = None
    response_ref: str | None = None
    transfer: str | None = None
    response: dict[str, Any] | None = None
    next_actions: list[dict[str, Any]] = field(default_factory=list)

    def item(self) -> dict[str, Any]:
        """The compact line a fan-out shows and records."""
        summary = (self.response or {}).get("summary") or ""
        return {"role": self.call.role, "kind": self.call.kind, "status": self.status,
                "stop_reason": self.stop_reason[:ITEM_SUMMARY_CHARS], "agent": self.role.name,
                "directive_ref": self.directive_ref, "response_ref": self.response_ref,
                "transfer": self.transfer, "summary": summary[:ITEM_SUMMARY_CHARS]}  # fmt: skip


# -- the side gate ------------------------------------------------------------------------------


def _manifests(runs: Runs, run: Run, key: str) -> str | None:
    """The digest of the latest `transfer_manifest` artifact recorded for summon `key`."""
    found = None
    for a in runs.artifacts(run.id):
        if a.kind != "transfer_manifest":
            continue
        try:
            doc = json.loads(runs.content(a))
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("summon_key") == key:
            found = doc.get("transfer")
    return found if isinstance(found, str) else None


def _manifest_artifact(c: Call, role: Role, digest: str) -> NewArtifact:
    doc: dict[str, Any] = {"v": 1, "transfer": digest, "destination": gates.destination(role),
           "summon_key": c.key, "role": c.role, "policy_role": role.name}  # fmt: skip
    return NewArtifact(kind="transfer_manifest", data=bytes(rfc8785.dumps(doc)),
                       summary=f"transfer to {gates.destination(role)} for a {c.role} summon",
                       media_type="application/json", role=c.role)  # fmt: skip


def _side_gate(work: Work, runs: Runs, run: Run, c: Call, b: ask.Brief,
               role: Role) -> tuple[gates.Cleared | str, NewArtifact | None]:  # fmt: skip
    """Cleared, or the digest that waits for a human; and a manifest artifact to record
    (a fresh preview). TransferBlocked when the manifest must not leave."""
    if not role.external:
        return gates.Cleared(), None
    known = _manifests(runs, run, c.key)
    if known is not None and gates.still_holds(work, known):
        got = gates.readiness(work, known)
        if isinstance(got, gates.Cleared):
            return got, None
        if got == "previewed":
            return known, None
        # spent (expired, released, blocked) or stale (HEAD moved): preview anew
    digest = gates.previewed(work, run, role, ask.purpose(run, b))
    got = gates.readiness(work, digest)
    return (got if isinstance(got, gates.Cleared) else digest), _manifest_artifact(c, role, digest)


def _awaiting(work: Work, run: Run, c: Call, role: Role, digest: str) -> list[dict[str, Any]]:
    """A human approves the manifest at their terminal; then the agent calls again."""
    gate = Gate(kind="transfer", step=f"summon:{c.role}", role=c.role, policy_role=role.name,
                transfer=digest, reason=f"{c.role} ({gates.destination(role)}) would receive "
                "repository context: a human approves the transfer manifest first")  # fmt: skip
    out = []
    line = gates.approval_line(work, gate)
    if line is not None:
        words = shlex.split(line)[1:]
        out.append(actions.human("approve_transfer", "Approve the transfer at your terminal",
                                 gate.reason + "; then summon again.",
                                 *words).to_json())  # fmt: skip
    out.append(actions.agent("summon_again", "Summon again once approved",
                             "The same summon, with the same arguments, runs once a human "
                             "has approved its manifest.", "oms_summon", c.arguments(run.id),
                             blocking=True, required=True).to_json())  # fmt: skip
    return out


# -- one summon ---------------------------------------------------------------------------------


def _call(work: Work, doc: bytes, b: ask.Brief, role: Role, cleared: gates.Cleared,
          kind: ArtifactKind) -> ask.Answer:  # fmt: skip
    """The provider call itself (as `ask.ask` makes it, past a gate of our own)."""
    _, base = default_branch_ref(work.repo)
    call = adapter(role)
    gates.use_up(work, cleared)  # spent as the context leaves
    got = call(ProviderRequest(work.repo.top, base, role, new_agent_run_id(), doc,
                               output_schema=b.schema))  # fmt: skip
    artifact = NewArtifact(kind=kind, data=got.output.encode(), summary=ask.summarise(got.output),
                           role=b.run_role)  # fmt: skip
    return ask.Answer(role, got, cleared, artifact)


def summon_one(work: Work, runs: Runs, run: Run, c: Call) -> Summoned:
    """One summon onto `run`: the side gate, the call, ONE step; the run's state, step and
    gate stay as they are. Refusals (a role that cannot run, a blocked manifest, evidence
    of another run) raise before anything is recorded."""
    b = brief_of(runs, run, c)
    role = ask.resolve(work, run, b)
    cleared, manifest = _side_gate(work, runs, run, c, b, role)
    if not isinstance(cleared, gates.Cleared):
        if manifest is not None:
            asked = ("approval_requested", {"gate": "transfer", "side": "summon", "role": c.role,
                                            "transfer": cleared, "summon_key": c.key})  # fmt: skip
            run = runs.step(runs.get(run.id), artifacts=[manifest], events=[asked]).run
        return Summoned(c, role, "awaiting_approval", "awaiting approval of the transfer "
                        f"manifest {cleared[:19]}…", run, transfer=cleared,
                        next_actions=_awaiting(work, run, c, role, cleared))  # fmt: skip
    kind: ArtifactKind = "plan" if c.kind == "plan" else "report"
    sent = ask.document(run, b, role)
    got = _call(work, sent, b, role, cleared, kind)
    run = runs.get(run.id)  # a summon moves nothing, so it goes on top of whatever is there
    directive_ref, response_ref = runs.next_ref(run.id, "directive"), runs.next_ref(run.id, kind)
    directive = NewArtifact(kind="directive", data=sent,
                            summary=f"the brief sent to {c.role} ({c.kind})",
                            media_type="application/json", role=c.role)  # fmt: skip
    status = "completed" if got.ok else "failed"
    handoff = {"role": c.role, "policy_role": role.name, "kind": c.kind, "agent": c.agent,
               "persona": c.persona, "evidence_refs": list(c.evidence_refs),
               "directive_ref": directive_ref, "response_ref": response_ref,
               "status": status, "summon_key": c.key}  # fmt: skip
    events = [("provider_invoked", got.summary()), *got.cleared.events(),
              ("agent_summoned", handoff)]  # fmt: skip
    arts = [directive, got.artifact, *([manifest] if manifest is not None else [])]
    run = runs.step(run, artifacts=arts, events=events).run
    why = f"{c.role} answered" if got.ok else f"{c.role}: {got.problem}"
    return Summoned(c, role, status, why, run, directive_ref, response_ref, cleared.transfer,
                    got.summary())  # fmt: skip


def summon(repo_dir: Path, run_id: str, role: str, brief: str, agent: str | None = None,
           kind: str | None = None, persona: str | None = None,
           constraints: Sequence[str] | None = None,
           evidence_refs: Sequence[str] | None = None) -> Out:  # fmt: skip
    """`oms run summon` / `oms_summon`: exit 0 when it answered or waits for approval, 1 when
    the provider call failed."""
    checked_run_id(run_id)
    c = checked_call(role, brief, agent, kind, persona, constraints, evidence_refs)
    with opened_runs(repo_dir) as (work, runs):
        s = summon_one(work, runs, runs.get(run_id), c)
        responses = [s.response] if s.response is not None else []
        out = shown(work, runs, s.run, responses, summoned_role=c.role,
                    summoned_agent=s.role.name, summon_kind=c.kind, summon_status=s.status,
                    stop_reason=s.stop_reason, directive_ref=s.directive_ref,
                    response_ref=s.response_ref, transfer=s.transfer)  # fmt: skip
        out["next_actions"] = [*s.next_actions, *out["next_actions"]]
        return out, 1 if s.status == "failed" else 0


# -- fan-out ------------------------------------------------------------------------------------


def checked_items(items: Any) -> list[Call]:
    """Every item checked before any runs: a bad one is a UsageError naming it."""
    if not isinstance(items, list | tuple) or not items:
        raise UsageError("a fan-out needs a non-empty list of items")
    if len(items) > MAX_FANOUT_INPUT:
        raise UsageError(f"a fan-out takes at most {MAX_FANOUT_INPUT} items "
                         f"({FANOUT_HARD_CAP} run)")  # fmt: skip
    out = []
    for i, item in enumerate(items, 1):
        if not isinstance(item, Mapping):
            raise UsageError(f"fan-out item {i} is not an object")
        extra = sorted(set(item) - ITEM_KEYS)
        if extra:
            raise UsageError(f"fan-out item {i}: unknown key {str(extra[0])[:40]!r}")
        try:
            got = checked_call(item.get("role"), item.get("brief"), item.get("agent"),
                               item.get("kind"), item.get("persona"), item.get("constraints"),
                               item.get("evidence_refs"))  # fmt: skip
        except UsageError as exc:
            raise UsageError(f"fan-out item {i}: {exc.message}") from None
        out.append(got)
    return out


def cap_of(work: Work, max_items: int | None) -> int:
    if max_items is not None and (isinstance(max_items, bool) or not isinstance(max_items, int)
                                  or not 1 <= max_items <= FANOUT_HARD_CAP):  # fmt: skip
        raise UsageError(f"max_items is 1 to {FANOUT_HARD_CAP}")
    return min(max_items or FANOUT_HARD_CAP, work.loaded.policy.runs.fanout_max_items,
               FANOUT_HARD_CAP)  # fmt: skip


def _group_status(items: Sequence[Mapping[str, Any]]) -> str:
    states = [i["status"] for i in items]
    if "blocked" in states or "awaiting_approval" in states:
        return "blocked"
    if "completed" not in states:
        return "failed"
    return "completed" if all(s == "completed" for s in states) else "partial"


def fanout(repo_dir: Path, run_id: str, items: Sequence[Mapping[str, Any]],
           max_items: int | None = None) -> Out:  # fmt: skip
    """`oms run fanout` / `oms_fanout`: up to the cap of summons in order, then ONE `fanout`
    artifact. Sidecar-only: the run's state, step and gate never change, and nothing here
    satisfies a verifier, QA or completion gate. A side gate waiting for a human stops the
    group (later items `not_attempted`); a failed answer marks its item and goes on. Exit 1
    only when every attempted item failed."""
    checked_run_id(run_id)
    calls = checked_items(items)
    with opened_runs(repo_dir) as (work, runs):
        run = runs.get(run_id)
        cap = cap_of(work, max_items)
        for c in calls[:cap]:  # every item's refs and role hold before anything runs
            ask.resolve(work, run, brief_of(runs, run, c))
        rows, stop = _fan(work, runs, run, calls[:cap])
        rows += [_unrun(c, "skipped", f"over the cap of {cap}") for c in calls[cap:]]
        status = _group_status(rows)
        tried = sum(r["status"] not in ("not_attempted", "skipped") for r in rows)
        bounds = {"requested": len(calls), "cap": cap, "attempted": tried}
        doc = {"v": 1, "status": status, "bounds": bounds, "items": rows,
               "sidecar_only": True}  # fmt: skip
        ref = runs.next_ref(run_id, "fanout")
        art = NewArtifact(kind="fanout", data=json.dumps(doc, sort_keys=True).encode(),
                          summary=f"fan-out of {len(calls)}: {status}",
                          media_type="application/json")  # fmt: skip
        run = runs.step(runs.get(run_id), artifacts=[art],
                        events=[("fanout_recorded", {"status": status, "ref": ref, **bounds})]
                        ).run  # fmt: skip
        out = shown(work, runs, run, fanout_status=status, bounds=bounds, fanout_ref=ref,
                    items=rows)  # fmt: skip
        out["next_actions"] = [*stop, *out["next_actions"]]
        return out, 1 if status == "failed" else 0


def _unrun(c: Call, status: str, why: str) -> dict[str, Any]:
    return {"role": c.role, "kind": c.kind, "status": status, "stop_reason": why,
            "agent": c.agent, "directive_ref": None, "response_ref": None, "transfer": None,
            "summary": ""}  # fmt: skip


def _fan(work: Work, runs: Runs, run: Run,
         calls: Sequence[Call]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:  # fmt: skip
    """The items in order; and the next actions of the side gate that stopped the group."""
    rows: list[dict[str, Any]] = []
    for i, c in enumerate(calls):
        try:
            s = summon_one(work, runs, run, c)
        except gates.TransferBlocked as exc:
            rows.append(_unrun(c, "blocked", exc.message))
            stop: list[dict[str, Any]] = []
        else:
            rows.append(s.item())
            if s.status != "awaiting_approval":
                continue
            stop = [a for a in s.next_actions if a.get("tool") != "oms_summon"]
            stop.append(actions.agent("fanout_again", "Fan out again once approved",
                                      "The same fan-out runs on from this item once a human "
                                      "has approved its manifest.", "oms_fanout",
                                      {"run_id": run.id}, blocking=True,
                                      required=True).to_json())  # fmt: skip
        why = f"not attempted: item {i + 1} is blocked"
        rows += [_unrun(later, "not_attempted", why) for later in calls[i + 1 :]]
        return rows, stop
    return rows, []
