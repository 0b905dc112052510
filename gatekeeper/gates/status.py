"""The repository's state as the gates see it: what bare `oms` and `oms hud` show first.

The base's policy (present? its digest, how many checks in the plan), the newest verdicts
and the transfers still waiting for a human, from the signed log; the log's health; and the
next steps that follow from these. It only reads, and a part it cannot read is said, not
raised: the overview is the one place a user goes when something is wrong.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from typing import Any

from evidence import EvidenceError, EvidenceStore, NotInitialised, state_root
from evidence.audit import audit
from gatekeeper.errors import OmsError
from gatekeeper.gates.mark import base_policy
from gatekeeper.gates.result.payloads import ResultRecord
from gatekeeper.gates.transfer.state import TransferRow, list_transfers
from gatekeeper.repo.git import Repo
from gatekeeper.repo.refs import default_branch_ref
from policy import PolicyError, default_policy

PENDING = ("previewed", "approved")  # waiting for a human's approval, or for the release
SHOWN_VERDICTS = 5


@dataclass(frozen=True)
class PolicyState:
    """The base's policy: `present` False means the built-in strict defaults (no plan)."""

    present: bool
    commit: str | None = None
    digest: str | None = None
    checks: int = 0
    conductor_role: bool = False  # the role `[conductor] role` names is defined
    problem: str | None = None  # no default branch yet, or a policy oms refuses
    tip_ahead: bool = False  # the default branch has commits after the trusted mark

    def to_json(self) -> dict[str, Any]:
        return {"present": self.present, "commit": self.commit, "digest": self.digest,
                "checks": self.checks, "problem": self.problem,
                "tip_ahead": self.tip_ahead}  # fmt: skip


@dataclass(frozen=True)
class VerdictRow:
    seq: int
    decision: str
    commit: str
    time: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RepoStatus:
    top: str
    initialised: bool
    policy: PolicyState
    evidence: str  # intact | tampered … | not initialised | unverified: …
    verdicts: tuple[VerdictRow, ...]
    pending_transfers: tuple[TransferRow, ...]
    next_steps: tuple[NextStep, ...]

    def to_json(self) -> dict[str, Any]:
        return {"repo": self.top, "initialised": self.initialised,
                "policy": self.policy.to_json(), "evidence": self.evidence,
                "verdicts": [v.to_json() for v in self.verdicts],
                "pending_transfers": [t.to_json() for t in self.pending_transfers],
                "next_steps": [n.to_json() for n in self.next_steps]}  # fmt: skip


def policy_state(repo: Repo) -> PolicyState:
    try:
        commit, loaded = base_policy(repo)
        _, tip = default_branch_ref(repo)
    except (OmsError, PolicyError, EvidenceError) as exc:
        return PolicyState(present=False, problem=str(exc))
    pol = loaded.policy
    return PolicyState(present=loaded.origin != default_policy().origin, commit=commit,
                       digest=loaded.digest, checks=len(pol.checks),
                       conductor_role=pol.conductor.role in pol.roles,
                       tip_ahead=commit != tip)  # fmt: skip


def _store(repo: Repo) -> EvidenceStore | None:
    try:
        return EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir,
                                  check_binding=False)  # fmt: skip
    except NotInitialised:
        return None


def _health(store: EvidenceStore) -> str:
    try:
        rep = audit(store)
    except EvidenceError as exc:
        return f"unverified: {exc}"
    return "intact" if rep.intact else f"tampered at seq {rep.first_bad_seq}: {rep.reason}"


def _verdicts(store: EvidenceStore, limit: int) -> tuple[VerdictRow, ...]:
    newest = store.entries(("result",))[::-1][:limit]
    rows = []
    for e in newest:
        rec = ResultRecord.of(e)
        rows.append(VerdictRow(e.seq, rec.decision, rec.candidate[:12], e.time))
    return tuple(rows)


def _pending(repo: Repo) -> tuple[TransferRow, ...]:
    return tuple(r for r in list_transfers(repo.top).transfers if r.status in PENDING)


@dataclass(frozen=True)
class NextStep:
    command: str
    why: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _next_steps(top: str, initialised: bool, pol: PolicyState, pending: bool) -> list[NextStep]:
    repo = shlex.quote(top)
    steps = []
    if not initialised:
        steps.append(NextStep(f"oms init --repo {repo}", "create the signing key and the log"))
    if pol.tip_ahead:
        steps.append(NextStep(f"oms policy trust --repo {repo}", "the default branch has "
                              "commits after the trusted mark: read the policy's diff, then "
                              "trust it (at a terminal)"))  # fmt: skip
    elif not pol.present or pol.checks == 0:
        why = "a starter oms.toml with a verification plan; commit it on the default branch"
        steps.append(NextStep(f"oms policy init --repo {repo}", why))
    if pending:
        steps.append(NextStep(f"oms transfer list --repo {repo}",
                              "a transfer waits for your approval or release"))  # fmt: skip
    steps.append(NextStep(f"oms process-result --repo {repo} --candidate BRANCH",
                          "judge an agent's branch: the result gate"))  # fmt: skip
    steps.append(NextStep("oms install claude-code", "hooks and the MCP server for your agent"))
    return steps


def repo_status(repo: Repo, verdicts: int = SHOWN_VERDICTS) -> RepoStatus:
    """The repository's state from its base policy and its signed log (read only)."""
    pol = policy_state(repo)
    store = _store(repo)
    health = "not initialised"
    rows: tuple[VerdictRow, ...] = ()
    pending: tuple[TransferRow, ...] = ()
    if store is not None:
        health = _health(store)
        if health == "intact":  # rows read from a log that fails its audit would mislead
            rows, pending = _verdicts(store, verdicts), _pending(repo)
    steps = _next_steps(str(repo.top), store is not None, pol, bool(pending))
    return RepoStatus(str(repo.top), store is not None, pol, health, rows, pending, tuple(steps))
