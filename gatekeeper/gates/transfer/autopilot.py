"""The trusted transfer policy and its autopilot rules, as small composable checks.

A check has one method, `refusal(manifest)`: the reason it does not approve, or None.
`AllOf` composes checks; an autopilot rule of the policy is the `AllOf` of the checks it
names, behind the two guards every rule shares: never a blocked manifest, and never one
whose findings would leave (findings qualify only when every one was redacted and the
re-scan was clean, which is what an unblocked manifest with redactions means).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gatekeeper.gates.mark import policy_commit
from gatekeeper.gates.transfer.manifest import Manifest
from gatekeeper.repo.git import Repo
from gatekeeper.repo.policy import read_policy_at
from policy import AutopilotRule, LoadedPolicy, TransferPolicy


def trusted_policy(repo: Repo) -> LoadedPolicy:
    """Transfer limits and autopilot rules come from the default branch's trusted mark, not
    the worktree, the current branch or commits no one judged, which an agent could write."""
    return read_policy_at(repo.top, policy_commit(repo))


class Check(Protocol):
    def refusal(self, m: Manifest) -> str | None:
        """Why this check does not approve `m` (None: it does)."""
        ...


@dataclass(frozen=True)
class AllOf:
    checks: Sequence[Check]

    def refusal(self, m: Manifest) -> str | None:
        for check in self.checks:
            if (why := check.refusal(m)) is not None:
                return why
        return None


@dataclass(frozen=True)
class NotBlocked:
    def refusal(self, m: Manifest) -> str | None:
        return "the manifest is blocked" if m.blocked else None


@dataclass(frozen=True)
class NoFindingLeaves:
    def refusal(self, m: Manifest) -> str | None:
        if m.findings and not m.redactions:
            return "the manifest has secret findings that were not redacted"
        return None


@dataclass(frozen=True)
class ToDestination:
    destinations: frozenset[str]

    def refusal(self, m: Manifest) -> str | None:
        dest = f"{m.destination.provider}:{m.destination.model}"
        return None if dest in self.destinations else f"{dest} is not a destination of the rule"


@dataclass(frozen=True)
class AtMostBytes:
    max_bytes: int

    def refusal(self, m: Manifest) -> str | None:
        if m.totals.bytes > self.max_bytes:
            return f"{m.totals.bytes} bytes is over the rule's {self.max_bytes}"
        return None


@dataclass(frozen=True)
class OfContext:
    contexts: frozenset[str]

    def refusal(self, m: Manifest) -> str | None:
        return None if m.context in self.contexts else f"context {m.context} is not the rule's"


@dataclass(frozen=True)
class CleanPushed:
    def refusal(self, m: Manifest) -> str | None:
        if m.visibility.state != "clean-pushed":
            return f"the repository is {m.visibility.state}, not clean-pushed"
        return None


GUARDS = AllOf((NotBlocked(), NoFindingLeaves()))


def rule_check(rule: AutopilotRule) -> AllOf:
    """The checks one policy rule stands for (the shared guards apart)."""
    checks: list[Check] = [
        ToDestination(frozenset(rule.destinations)),
        AtMostBytes(rule.max_bytes),
        OfContext(frozenset(rule.context)),
    ]
    if rule.require_clean_pushed:
        checks.append(CleanPushed())
    return AllOf(tuple(checks))


def approving_rule(tp: TransferPolicy, m: Manifest) -> str | None:
    """The name of the first rule that approves `m`, if any."""
    if GUARDS.refusal(m) is not None:
        return None
    for rule in tp.autopilot:
        if rule_check(rule).refusal(m) is None:
            return rule.name
    return None
