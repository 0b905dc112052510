"""oms_roles, oms_assign_roles, oms_agent_board, oms_recommend_loop, oms_pro_access:
display and configuration, no authority.

Everything here is read from the default branch's policy and oms' own state. Nothing grants a
tool, schedules an agent, satisfies a gate or approves: `assign_roles` only chooses which
`[roles.<name>]` plays a run role (`mapping.policy_role`: among what policy defines, so a
mapping never widens it), and the chosen role still needs its own eligibility and, when it
is external, a transfer approved for every call. `recommend_loop` and `pro_access` have no
side effects and send nothing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from evidence import Draft, EvidenceStore, Payload, state_root
from evidence.state import atomic_write, ensure_private_dir
from gatekeeper.errors import UsageError
from gatekeeper.gates.result.protected import BUILTIN
from gatekeeper.integrations import oms_command
from gatekeeper.outfile import check_output
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.scan.interface import ScanItem, ScannerUnavailable
from gatekeeper.scan.policy import scan_with_policy
from gatekeeper.text import sanitize
from gatekeeper.work import roles
from gatekeeper.work.payloads import subject
from gatekeeper.work.providers.base import Role, RoleUnavailable
from gatekeeper.work.runs import actions, mapping
from gatekeeper.work.runs.api import (
    Out,
    checked_constraints,
    checked_text,
    opened_runs,
)
from gatekeeper.work.runs.model import MAX_GOAL_CHARS, RUN_ROLES, Artifact, Run, RunEvent
from gatekeeper.work.runs.store import Runs, checked_run_id
from policy import LoadedPolicy

PURPOSE: Mapping[str, str] = {
    "orchestrator": "drives a run: decides the next step and who takes it (read-only)",
    "planner": "writes the plan an implement run follows, before anything is edited",
    "researcher": "reads the repository and answers a question (read-only)",
    "implementer": "edits its own workspace (a clone) and commits one candidate",
    "qa": "checks behaviour against the acceptance criteria; advisory, never a gate",
    "verifier": "reviews a verified candidate beside the result gate; advisory",
    "critic": "critiques a plan, a change or an answer (read-only)",
}
AUTHORITY_NOTE = ("display only: this grants nothing. Every role still needs its own "
                  "eligibility, an external one a transfer approved for every call, and the "
                  "result gate decides every candidate.")  # fmt: skip
NEVER_WIDENS = ("a mapping chooses among the roles the policy defines and never widens it: "
                "an assigned role still needs its own eligibility and transfers")  # fmt: skip
REASONS_SHOWN = 4
REASON_CHARS = 200
ROSTER_SHOWN = 24
REFS_SHOWN = 6
ROWS_SHOWN = 24
MAX_ITEMS = 20
MAX_ITEM_CHARS = 500


# -- roles --------------------------------------------------------------------------------------


def provider_model(role: Role) -> str:
    return f"{role.provider}:{role.model}"


def authority(role: Role) -> dict[str, Any]:
    """What a role can touch when it runs (DESIGN.md "Orchestration"): display only."""
    return {"read": True, "edit": role.authority == "worktree-write",
            "edit_scope": "its own workspace (a clone), never the repository"
            if role.authority == "worktree-write" else None,
            "shell": "sandboxed (oms agent run, bwrap)",
            "network": "api (through oms' egress broker)" if role.provider in roles.CLI
            else "none", "external": role.external}  # fmt: skip


def _reasons(found: roles.Eligibility) -> list[str]:
    return [sanitize(r, limit=REASON_CHARS) for r in found.reasons[:REASONS_SHOWN]]


def _source(run_role: str, name: str, saved: Mapping[str, str]) -> str:
    if saved.get(run_role) == name:
        return "assigned"
    return "policy" if run_role == name else "fallback"


@dataclass(frozen=True)
class _Policy:
    loaded: LoadedPolicy
    repo: Repo

    @property
    def repo_id(self) -> str:
        return self.repo.repo_id


def _trusted(repo_dir: Path) -> _Policy:
    return _Policy(roles.trusted_policy(repo_dir), open_repo(repo_dir))


def run_role_rows(p: _Policy) -> list[dict[str, Any]]:
    """Every run role: the policy role that plays it, where that came from, its readiness
    for an unattended run and its authority."""
    saved = mapping.assigned(p.repo_id)
    played = mapping.run_mapping(p.loaded, p.repo_id)
    rows = []
    for run_role in RUN_ROLES:
        row: dict[str, Any] = {"run_role": run_role, "purpose": PURPOSE[run_role]}
        name = played.get(run_role)
        if name is None:
            row.update(policy_role=None, provider_model=None, source=None, eligible=False,
                       reasons=[f"no role plays it: add [roles.{run_role}] or assign one"],
                       authority=None)  # fmt: skip
        else:
            role = roles.resolve(p.loaded, name)
            found = roles.check(role, unattended=True)
            row.update(policy_role=name, provider_model=provider_model(role),
                       source=_source(run_role, name, saved), eligible=found.eligible,
                       reasons=_reasons(found), authority=authority(role))  # fmt: skip
        rows.append(row)
    return rows


def roster_rows(p: _Policy, played: Mapping[str, str | None]) -> list[dict[str, Any]]:
    out = []
    for role in roles.roster(p.loaded)[:ROSTER_SHOWN]:
        found = roles.check(role, unattended=True)
        out.append({"name": role.name, "provider_model": provider_model(role),
                    "authority": role.authority, "external": role.external,
                    "eligible": found.eligible, "reasons": _reasons(found),
                    "plays": [r for r, n in played.items() if n == role.name]})  # fmt: skip
    return out


def _view(p: _Policy) -> dict[str, Any]:
    rows = run_role_rows(p)
    played = {r["run_role"]: r["policy_role"] for r in rows}
    return {"run_roles": rows, "roster": roster_rows(p, played),
            "roster_count": len(p.loaded.policy.roles),
            "authority_note": AUTHORITY_NOTE}  # fmt: skip


def roles_view(repo_dir: Path) -> Out:
    """`oms_roles`: who plays each run role, ready or not, with what authority."""
    return _view(_trusted(repo_dir)), 0


# -- assignments --------------------------------------------------------------------------------


class RolesAssigned(Payload):
    """`oms role assign` / `oms_assign_roles`: which policy role now plays each run role
    named. A config change that steers which engine gets repo context, so it is recorded."""

    KIND: ClassVar[str] = "work.roles.assign"
    roles: dict[str, str]  # run role -> [roles.<name>]


def _checked_assignment(loaded: LoadedPolicy, role_mapping: Mapping[str, str]) -> dict[str, str]:
    """run role -> policy role for every entry, or UsageError for the first bad one."""
    if not isinstance(role_mapping, Mapping) or not role_mapping:
        raise UsageError("name at least one run role to assign (RUN_ROLE=ROLE)")
    out: dict[str, str] = {}
    for run_role, value in role_mapping.items():
        if run_role not in RUN_ROLES:
            raise UsageError(f"not a run role: {str(run_role)[:40]!r} "
                             f"(roles: {', '.join(RUN_ROLES)})")  # fmt: skip
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"the role for {run_role} is empty")
        try:
            out[run_role] = mapping.policy_role(loaded, value)
        except RoleUnavailable as exc:
            raise UsageError(f"cannot assign {run_role}: {exc}") from None
    return out


def _saved(path: Path, repo_id: str) -> dict[str, str]:
    """The assignments to merge with; a regular file that is not one is replaced."""
    try:
        return mapping.assigned(repo_id)
    except UsageError:
        if path.is_symlink() or not path.is_file():
            raise
        return {}


def assign_roles(repo_dir: Path, role_mapping: Mapping[str, str]) -> Out:
    """`oms role assign` / `oms_assign_roles`: persist run role -> policy role in the private
    state dir, merged with what is there. Every value is checked first and the path is
    refused when it is a symlink, a directory or a device: on a refusal nothing is written
    or recorded. The evidence entry comes before the file, so no change goes unrecorded."""
    p = _trusted(repo_dir)
    new = _checked_assignment(p.loaded, role_mapping)
    root = state_root()
    path = mapping.assignments_path(p.repo_id, root)
    ensure_private_dir(path.parent, root)
    check_output(path)
    merged = dict(sorted({**_saved(path, p.repo_id), **new}.items()))
    store = EvidenceStore.open(root, p.repo_id, common_dir=p.repo.common_dir)
    entry = store.append(Draft.of(RolesAssigned(roles=new), subject=subject(f"oms-roles:"
                                  f"{p.repo_id}"), policy=p.loaded.digest))  # fmt: skip
    check_output(path)
    atomic_write(path, json.dumps({"version": 1, "roles": merged}, indent=2).encode(),
                 mode=0o600)  # fmt: skip
    return {"assigned": new, "roles": merged, "evidence_seq": entry.seq,
            "run_roles": run_role_rows(p), "note": NEVER_WIDENS}, 0  # fmt: skip


# -- the agent board ----------------------------------------------------------------------------

ACTED = ("provider_invoked", "agent_summoned")


@dataclass(frozen=True)
class RunFacts:
    """What a run's lanes are read from, fetched once: its events, its artifacts, and the
    items of its latest fan-out (the guests' `fanout` artifact, sidecar only)."""

    run: Run
    events: Sequence[RunEvent]
    artifacts: Sequence[Artifact]
    fanout_ref: str | None
    fanout_items: Sequence[Mapping[str, Any]]

    @classmethod
    def of(cls, runs: Runs, run: Run) -> RunFacts:
        arts = runs.artifacts(run.id)
        fans = [a for a in arts if a.kind == "fanout"]
        items: list[Mapping[str, Any]] = []
        if fans:
            try:
                doc = json.loads(runs.content(fans[-1]))
                items = [i for i in doc.get("items", []) if isinstance(i, dict)]
            except (ValueError, AttributeError):
                items = []  # an unreadable record shows no sidecar, and grants nothing anyway
        return cls(run, runs.events(run.id), arts, fans[-1].ref if fans else None, items)

    def roles_of(self, e: RunEvent) -> set[str]:
        """The run roles an event is about: a summon names its run role; a provider call is
        the role whose answer the same step attached (its entry's seq)."""
        if e.kind != "provider_invoked":
            role = e.data.get("role")
            return {role} if isinstance(role, str) else set()
        return {a.role for a in self.artifacts if a.seq == e.seq and a.role is not None}


def _waiting(facts: RunFacts, run_role: str) -> bool:
    """A summon of `run_role` stopped at its side gate and has not answered since."""
    asked = [e.n for e in facts.events if e.kind == "approval_requested"
             and e.data.get("side") and e.data.get("role") == run_role]  # fmt: skip
    done = [e.n for e in facts.events if e.kind == "agent_summoned"
            and e.data.get("role") == run_role]  # fmt: skip
    return bool(asked) and max(asked) > max(done, default=-1)


def lane(facts: RunFacts, run_role: str) -> dict[str, Any]:
    """One run role's lane: acted or not, blocked at the run's gate or waiting at a side
    gate, its fan-out items, bounded refs."""
    run, g = facts.run, facts.run.gate
    mine = [e for e in facts.events if e.kind in ACTED and run_role in facts.roles_of(e)]
    arts = [a for a in facts.artifacts if a.role == run_role]
    blocked = g is not None and g.role == run_role and run.state == "awaiting_approval"
    waiting = _waiting(facts, run_role)
    state = "blocked" if blocked else "waiting" if waiting else "acted" if mine else "idle"
    side = [{"ref": facts.fanout_ref, "status": i.get("status"), "kind": i.get("kind")}
            for i in facts.fanout_items if i.get("role") == run_role]  # fmt: skip
    blocking = None
    if blocked and g is not None:
        blocking = {"gate": g.kind, "reason": g.reason}
    elif waiting:
        blocking = {"gate": "transfer", "reason": "a summon waits for its transfer approval"}
    return {"state": state, "blocking": blocking,
            "acted": [e.kind for e in mine][-REFS_SHOWN:],
            "sidecar": side[-REFS_SHOWN:],
            "artifact_refs": [a.ref for a in arts][-REFS_SHOWN:],
            "event_refs": [f"event-{e.n}" for e in mine][-REFS_SHOWN:]}  # fmt: skip


def card(row: Mapping[str, Any]) -> dict[str, Any]:
    a = row["authority"] or {}
    return {"id": row["run_role"], "title": row["run_role"], "purpose": row["purpose"],
            "agent": row["policy_role"], "provider_model": row["provider_model"],
            "source": row["source"], "ready": row["eligible"], "reasons": row["reasons"],
            "edit": a.get("edit", False), "network": a.get("network"),
            "external": a.get("external", False)}  # fmt: skip


def dashboard(surface: str, columns: Sequence[str],
              rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """`artifact`: a bounded table a host can render when it does not read `card(s)`."""
    shown = [{c: r.get(c) for c in columns} for r in rows[:ROWS_SHOWN]]
    return {"surface": surface,
            "manifest": {"version": 1, "kind": "table", "columns": list(columns),
                         "rows": len(shown), "truncated": len(rows) > len(shown)},
            "snapshot": {"rows": shown}}  # fmt: skip


BOARD_COLUMNS = ("id", "agent", "provider_model", "ready", "state", "edit", "network")


def agent_board(repo_dir: Path, run_id: str | None = None, include_artifact: bool = False) -> Out:
    """`oms_agent_board`: a card per run role (derived from `roles_view`), and for a run its
    lanes, open gate and `next_actions`. Display only: it schedules nothing."""
    if run_id is None:
        p = _trusted(repo_dir)
        cards = [card(r) for r in run_role_rows(p)]
        out: dict[str, Any] = {"scope": "repository", "cards": cards}
    else:
        checked_run_id(run_id)
        with opened_runs(repo_dir) as (work, runs):
            run = runs.get(run_id)
            rows = run_role_rows(_Policy(work.loaded, work.repo))
            rows = [{**r, **_run_mapped(work.loaded, run, r)} for r in rows]
            facts = RunFacts.of(runs, run)
            cards = [{**card(r), **lane(facts, r["run_role"])} for r in rows]
            arts = list(facts.artifacts)
            out = {"scope": "run", "run_id": run.id, "status": run.state, "step": run.step,
                   "gate": run.gate.to_json() if run.gate else None, "cards": cards,
                   "sidecar": {"fanout_ref": facts.fanout_ref, "items": len(facts.fanout_items),
                               "note": "advisory only: satisfies no verifier, QA or "
                               "completion gate"},
                   "next_actions": [a.to_json()
                                    for a in actions.derive(work, run, arts)]}  # fmt: skip
    out["authority_note"] = AUTHORITY_NOTE
    if include_artifact:
        out["artifact"] = dashboard("agent_board", BOARD_COLUMNS,
                                    [{**c, "state": c.get("state", "configured")}
                                     for c in out["cards"]])  # fmt: skip
    return out, 0


def _run_mapped(loaded: LoadedPolicy, run: Run, row: Mapping[str, Any]) -> dict[str, Any]:
    """A run plays the roles it recorded when it was created, not today's assignment."""
    name = run.roles.get(row["run_role"])
    if name is None or name == row["policy_role"]:
        return {}
    try:
        role = roles.resolve(loaded, name)
    except RoleUnavailable:
        return {"policy_role": name, "provider_model": None, "source": "run",
                "eligible": False, "reasons": ["the policy no longer defines it"]}  # fmt: skip
    found = roles.check(role, unattended=True)
    return {"policy_role": name, "provider_model": provider_model(role), "source": "run",
            "eligible": found.eligible, "reasons": _reasons(found),
            "authority": authority(role)}  # fmt: skip


# -- loop recommendation ------------------------------------------------------------------------

RECIPES = ("plan-only", "research", "review", "implement-verify", "plan-implement-verify")
WORDS: Mapping[str, frozenset[str]] = {
    "review": frozenset({"review", "audit", "critique", "assess", "inspect", "evaluate"}),
    "research": frozenset({"research", "investigate", "why", "explain", "understand", "find",
                           "how", "what", "where", "compare", "explore"}),
    "plan-only": frozenset({"plan", "design", "propose", "outline", "roadmap", "strategy",
                            "sketch"}),
    "implement": frozenset({"add", "fix", "implement", "refactor", "change", "build", "write",
                            "remove", "update", "rename", "support", "make", "create",
                            "migrate", "replace", "delete", "port", "rewrite"}),
}  # fmt: skip
LARGE = frozenset({"refactor", "migrate", "redesign", "rewrite", "architecture", "port",
                   "feature", "system", "across", "every", "all"})  # fmt: skip
RECIPE_ROLES: Mapping[str, tuple[str, ...]] = {
    "plan-only": ("planner",), "research": ("researcher",), "review": ("critic",),
    "implement-verify": ("implementer", "verifier", "qa"),
    "plan-implement-verify": ("planner", "implementer", "verifier", "qa", "critic"),
}  # fmt: skip
RECIPE_MODE: Mapping[str, str] = {"research": "research", "review": "review",
                                  "implement-verify": "implement",
                                  "plan-implement-verify": "implement"}  # fmt: skip
WHY: Mapping[str, str] = {
    "plan-only": "a plan, read-only: nothing is edited",
    "research": "a question about the repository: one read-only researcher answers",
    "review": "a review: one read-only critic answers",
    "implement-verify": "a small change: the implementer's candidate goes through the "
    "result gate (trusted checks in the sandbox), after the plan gate",
    "plan-implement-verify": "a larger change: a plan approved by a human first, then the "
    "implementer's candidate through the result gate",
}


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def classify(goal: str) -> tuple[str, float, dict[str, int]]:
    """The recipe the goal's words point to, a confidence 0..1 and the hit counts. Pure and
    deterministic: the same goal gives the same answer."""
    words = _tokens(goal)
    hits = {k: sum(w in ws for w in words) for k, ws in WORDS.items()}
    if hits["implement"] and hits["implement"] >= max(hits["review"], hits["research"]):
        large = len(words) > 40 or any(w in LARGE for w in words) or hits["plan-only"] > 0
        recipe = "plan-implement-verify" if large else "implement-verify"
        top = hits["implement"]
    else:
        ranked = sorted(("review", "research", "plan-only"), key=lambda k: -hits[k])
        recipe, top = ranked[0], hits[ranked[0]]
        if top == 0:
            return "plan-only", 0.35, hits
    rest = sum(hits.values()) - top
    return recipe, round(max(0.1, min(0.9, 0.5 + 0.15 * top - 0.1 * rest)), 2), hits


def _fits(recipe: str, played: Mapping[str, str]) -> bool:
    """A recipe fits when the policy has a role for what it cannot do without."""
    needs = {"plan-only": "planner", "research": "researcher", "review": "critic"}
    return needs.get(recipe, "implementer") in played


def _items(values: Sequence[str] | None, what: str) -> list[str]:
    got = list(values or ())
    if len(got) > MAX_ITEMS:
        raise UsageError(f"at most {MAX_ITEMS} {what}")
    return [sanitize(checked_text(v, what, MAX_ITEM_CHARS), limit=MAX_ITEM_CHARS) for v in got]


def contract(loaded: LoadedPolicy, goal: str, given: Mapping[str, list[str]],
             max_iterations: int | None) -> dict[str, Any]:  # fmt: skip
    """The completion contract's draft. The trusted checks are the policy's; a caller's
    commands are shown as proposed, never run; protected paths are always forbidden."""
    pol = loaded.policy
    checks = [c.name for c in pol.checks]
    criteria = given["acceptance_criteria"] or [
        *(f"the trusted check {n!r} passes in the sandbox" for n in checks),
        "no protected path is changed and no secret is added (the result gate)",
        "a human reviews the verified commit (it stays on hold)"]  # fmt: skip
    forbidden = [*given["forbidden_changes"], *(f"protected path {x}" for x in pol.protected.paths),
                 f"oms' {len(BUILTIN)} built-in protected paths (oms.toml, CI, hooks, agent "
                 "configuration such as .claude/, AGENTS.md, .mcp.json)"]  # fmt: skip
    return {"goal": sanitize(goal, limit=MAX_GOAL_CHARS), "acceptance_criteria": criteria,
            "validation_commands": {"trusted": checks,
                                    "proposed_not_trusted": given["validation_commands"],
                                    "note": "only the policy's checks run (in the sandbox); "
                                    "proposed commands are never run"},
            "allowed_paths": given["allowed_paths"], "forbidden_changes": forbidden,
            "max_iterations": max_iterations or pol.work.max_attempts}  # fmt: skip


def run_action(recipe: str, goal: str, constraints: Sequence[str],
               stack: Mapping[str, str], iterations: int) -> dict[str, Any]:  # fmt: skip
    """The tool call that starts the recommended run (the runtime path; it still stops at
    every gate)."""
    if recipe == "plan-only":
        args: dict[str, Any] = {"goal": goal, "constraints": list(constraints)}
        if "planner" in stack:
            args["orchestrator"] = stack["planner"]
        return {"tool": "oms_plan", "arguments": args}
    args = {"goal": goal, "mode": RECIPE_MODE[recipe], "constraints": list(constraints),
            "role_mapping": dict(stack)}  # fmt: skip
    if recipe == "implement-verify":
        args.update(auto_loop=True, max_cycles=iterations)
    return {"tool": "oms_orchestrate", "arguments": args}


def recommend_loop(repo_dir: Path, goal: str, constraints: Sequence[str] | None = None,
                   acceptance_criteria: Sequence[str] | None = None,
                   validation_commands: Sequence[str] | None = None,
                   allowed_paths: Sequence[str] | None = None,
                   forbidden_changes: Sequence[str] | None = None,
                   max_iterations: int | None = None) -> Out:  # fmt: skip
    """`oms_recommend_loop`: a recipe, a completion contract draft and the call that would
    start it. No side effects: no provider, no run, no file, nothing sent."""
    checked_text(goal, "goal", MAX_GOAL_CHARS)
    cons = checked_constraints(constraints)
    if max_iterations is not None and not 1 <= max_iterations <= 20:
        raise UsageError("max_iterations is 1 to 20")
    given = {"acceptance_criteria": _items(acceptance_criteria, "acceptance criteria"),
             "validation_commands": _items(validation_commands, "validation commands"),
             "allowed_paths": _items(allowed_paths, "allowed paths"),
             "forbidden_changes": _items(forbidden_changes, "forbidden changes")}  # fmt: skip
    p = _trusted(repo_dir)
    played = mapping.run_mapping(p.loaded, p.repo_id)
    recipe, confidence, hits = classify(goal)
    reason = WHY[recipe]
    if not _fits(recipe, played):
        reason = f"{recipe} needs a role the policy lacks; {WHY['plan-only']}"
        recipe, confidence = "plan-only", round(min(confidence, 0.3), 2)
    if recipe in RECIPE_MODE and RECIPE_MODE[recipe] == "implement" and not p.loaded.policy.checks:
        confidence = round(confidence * 0.6, 2)
        reason += "; the policy has no checks, so the result gate proves little"
    stack = {r: played[r] for r in RECIPE_ROLES[recipe] if r in played}
    doc = contract(p.loaded, goal, given, max_iterations)
    action = run_action(recipe, goal, cons, stack, doc["max_iterations"])
    alternatives = [{"recipe": r, "why": WHY[r]} for r in RECIPES if r != recipe
                    and _fits(r, played) and hits.get(_hit_key(r), 0)][:3]  # fmt: skip
    out = {"recipe": recipe, "confidence": confidence, "reason": reason,
           "recommended_stack": stack, "alternatives": alternatives,
           "completion_contract": doc, "runAction": action,
           "card": _loop_card(recipe, confidence, reason, stack, action),
           "artifact": dashboard("loop_plan", ("field", "value"), _contract_rows(doc, stack)),
           "side_effects": "none: no provider called, no run started, nothing sent"}  # fmt: skip
    return out, 0


def _hit_key(recipe: str) -> str:
    return "implement" if recipe in ("implement-verify", "plan-implement-verify") else recipe


def _loop_card(recipe: str, confidence: float, reason: str, stack: Mapping[str, str],
               action: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    return {"title": f"Loop plan: {recipe}", "subtitle": reason, "confidence": confidence,
            "sections": [{"label": "stack",
                          "items": [f"{r}: {n}" for r, n in stack.items()]}],
            "actions": [{"label": "Start this run", "tool": action["tool"],
                         "arguments": action["arguments"]},
                        {"label": "Edit the contract and ask again",
                         "tool": "oms_recommend_loop"}]}  # fmt: skip


def _contract_rows(doc: Mapping[str, Any], stack: Mapping[str, str]) -> list[dict[str, Any]]:
    rows = [{"field": f"role {r}", "value": n} for r, n in stack.items()]
    rows += [{"field": "acceptance", "value": c} for c in doc["acceptance_criteria"]]
    rows += [{"field": "check", "value": c} for c in doc["validation_commands"]["trusted"]]
    rows.append({"field": "max_iterations", "value": doc["max_iterations"]})
    return rows


# -- ChatGPT Pro access -------------------------------------------------------------------------

PROFILE = "oms-local"
TUNNEL_ID = "<tunnel-id>"
HOST_NOTE = ("the host's own external-disclosure policy (ChatGPT, Codex, a workspace or tenant "
             "admin) is outside oms' control: oms decides only what oms itself sends")  # fmt: skip


def _shell_escaped(text: str) -> str:
    return re.sub(r'([\\"$`])', r"\\\1", text)


def mcp_command_word(top: Path) -> str:
    """`--mcp-command`'s value as one shell word. A path under the home directory is
    written `$HOME/...` inside double quotes: tool results never show the home directory,
    and the line must still work as copied (the shell expands it before tunnel-client
    reads it)."""
    mcp = shlex.join([*oms_command(), "mcp", "--repo", str(top)])
    home = os.path.expanduser("~").rstrip("/")
    if not home or home not in mcp:
        return shlex.quote(mcp)
    at_home = re.escape(_shell_escaped(home)) + r"(?=/|\s|'|$)"
    return '"' + re.sub(at_home, lambda _: "$HOME", _shell_escaped(mcp)) + '"'


def tunnel_commands(top: Path) -> list[str]:
    """OpenAI's Secure MCP Tunnel pointed at this installation's `oms mcp` for this repo."""
    tc = ["tunnel-client"]
    init = shlex.join([*tc, "init", "--sample", "sample_mcp_stdio_local", "--profile", PROFILE,
                       "--tunnel-id", TUNNEL_ID, "--mcp-command"])  # fmt: skip
    return [f"{init} {mcp_command_word(top)}",
            shlex.join([*tc, "doctor", "--profile", PROFILE, "--explain"]),
            shlex.join([*tc, "run", "--profile", PROFILE])]  # fmt: skip


def secret_rules(loaded: LoadedPolicy, texts: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Findings (rule and item, never the value) the policy's scanners block in `texts`."""
    items = [ScanItem.whole(name, text) for name, text in texts]
    found = scan_with_policy(items, loaded).blocking if items else ()
    return [{"item": f.file, "rule": f.rule, "line": f.line} for f in found][:10]


def _scanned(loaded: LoadedPolicy,
             texts: Sequence[tuple[str, str]]) -> tuple[list[Any], str | None]:  # fmt: skip
    """The findings and why the prompt is withheld (None: it is not). A scanner that cannot
    run never means "no secret" (fail closed); the other paths are still shown."""
    try:
        found = secret_rules(loaded, texts)
    except ScannerUnavailable as exc:
        return [], f"withheld: the scanners cannot run ({sanitize(str(exc), limit=200)})"
    if found:
        return found, "withheld: the goal or a constraint holds a secret; remove it first"
    return [], None


def _prompt(goal: str, cons: Sequence[str]) -> str:
    lines = ["No repository context is attached; answer from the goal alone.", "",
             f"Goal: {goal}"]  # fmt: skip
    lines += ["", "Constraints:", *(f"- {c}" for c in cons)] if cons else []
    return "\n".join(lines)


def pro_access(repo_dir: Path, goal: str | None = None,
               constraints: Sequence[str] | None = None) -> Out:  # fmt: skip
    """`oms_pro_access`: the ChatGPT Pro paths, with no call made and no context sent. The
    no-repo-context prompt holds only the goal and constraints, scanned first: a secret in
    them withholds it."""
    if goal is not None:
        checked_text(goal, "goal", MAX_GOAL_CHARS)
    cons = checked_constraints(constraints)
    p = _trusted(repo_dir)
    texts = [("<goal>", goal)] if goal is not None else []
    texts += [(f"<constraint {i + 1}>", c) for i, c in enumerate(cons)]
    found, withheld = _scanned(p.loaded, texts)
    prompt: dict[str, Any] = {"mode": "no_repo_context_prompt", "prompt": None,
                              "secret_found": bool(found), "findings": found}  # fmt: skip
    if goal is None:
        prompt["note"] = "pass a goal (and constraints) for a prompt to paste into ChatGPT Pro"
    elif withheld is not None:
        prompt["note"] = withheld
    else:
        prompt["prompt"] = _prompt(goal, cons)
    rules = [r.name for r in p.loaded.policy.transfer.autopilot]
    out = {"calls_made": 0, "context_sent": "none",
           "approval_policy": {"transfer_autopilot": rules,
                               "runs_autopilot": list(p.loaded.policy.runs.autopilot),
                               "note": "only a human at a terminal or these rules approve; "
                               "MCP never approves"},
           "paths": [_connector(p.repo.top), prompt, _transfer()],
           "host_policy_note": HOST_NOTE}  # fmt: skip
    return out, 0


def _connector(top: Path) -> dict[str, Any]:
    return {"mode": "mcp_connector",
            "description": "ChatGPT as the MCP host: OpenAI's Secure MCP Tunnel runs this "
            "repository's `oms mcp` locally, and ChatGPT calls oms' bounded tools (which "
            "cannot approve) instead of receiving a summary",
            "commands": tunnel_commands(top),
            "then": "create a ChatGPT connector with the tunnel connection and enable it in a "
            "new conversation; check it with oms_doctor, oms_repo_tree, oms_pro_access",
            "note": "what the tools return reaches ChatGPT: the gateway serves no secret-named "
            "or git-internal file, and redacts what the scanners find"}  # fmt: skip


def _transfer() -> dict[str, Any]:
    return {"mode": "transfer",
            "description": "send repository context to an external model only through a "
            "transfer manifest: preview it, a human approves it at their terminal (or an "
            "autopilot rule of the policy), then it is released once",
            "first": {"tool": "oms_model_access",
                      "arguments": {"to": "openai:<model>", "purpose": "…",
                                    "context": "none"}}}  # fmt: skip
