"""The autopilot rules as small checks: each one alone, composed, and as a policy rule."""

from __future__ import annotations

from typing import Any

import pytest
from support.manifests import HEX, manifest

from gatekeeper.gates.transfer.autopilot import (
    GUARDS,
    AllOf,
    AtMostBytes,
    CleanPushed,
    NoFindingLeaves,
    NotBlocked,
    OfContext,
    ToDestination,
    approving_rule,
    rule_check,
)
from policy import AutopilotRule, TransferPolicy

FINDING = {"scanner": "gitleaks", "rule": "aws", "file": "a.py", "line": 3, "fingerprint": HEX}


def totals(n: int) -> dict[str, int]:
    return {"items": 1, "bytes": n, "excluded": 0, "findings": 0, "redactions": 0}


def test_not_blocked_refuses_a_blocked_manifest() -> None:
    assert NotBlocked().refusal(manifest()) is None
    assert NotBlocked().refusal(manifest(blocked=True, block_reasons=["x"])) is not None


def test_no_finding_leaves_takes_findings_only_when_redacted() -> None:
    assert NoFindingLeaves().refusal(manifest()) is None
    assert NoFindingLeaves().refusal(manifest(findings=[FINDING])) is not None
    redacted = manifest(findings=[FINDING], redactions=[{"rule": "aws", "path": "a.py", "line": 3}])
    assert NoFindingLeaves().refusal(redacted) is None


def test_to_destination_matches_provider_and_model_exactly() -> None:
    check = ToDestination(frozenset({"anthropic:claude"}))
    assert check.refusal(manifest()) is None
    other = manifest(destination={"provider": "anthropic", "model": "claude-2"})
    assert check.refusal(other) == "anthropic:claude-2 is not a destination of the rule"


def test_at_most_bytes_takes_exactly_the_limit_and_not_one_byte_more() -> None:
    assert AtMostBytes(100).refusal(manifest(totals=totals(100))) is None
    assert AtMostBytes(100).refusal(manifest(totals=totals(101))) == (
        "101 bytes is over the rule's 100"
    )


def test_of_context_refuses_another_context() -> None:
    assert OfContext(frozenset({"none"})).refusal(manifest()) is None
    assert OfContext(frozenset({"none"})).refusal(manifest(context="repo")) is not None


@pytest.mark.parametrize("state", ["dirty", "unpushed"])
def test_clean_pushed_refuses_a_dirty_or_unpushed_repository(state: str) -> None:
    assert CleanPushed().refusal(manifest()) is None
    m = manifest(visibility={"state": state})
    assert CleanPushed().refusal(m) == f"the repository is {state}, not clean-pushed"


def test_all_of_gives_the_first_refusal_and_none_when_all_pass() -> None:
    m = manifest(totals=totals(500), context="repo")
    both = AllOf((AtMostBytes(100), OfContext(frozenset({"none"}))))
    assert both.refusal(m) == "500 bytes is over the rule's 100"
    assert AllOf(()).refusal(m) is None
    assert GUARDS.refusal(manifest()) is None


def _rule(**over: Any) -> AutopilotRule:
    fields: dict[str, Any] = {"name": "small", "destinations": ["anthropic:claude"],
                              "max_bytes": 100, "context": ["none"]}  # fmt: skip
    return AutopilotRule.model_validate({**fields, **over})


def test_rule_check_requires_clean_pushed_only_when_the_rule_says_so() -> None:
    dirty = manifest(visibility={"state": "dirty"})
    assert rule_check(_rule()).refusal(dirty) is not None
    assert rule_check(_rule(require_clean_pushed=False)).refusal(dirty) is None


def test_approving_rule_names_the_first_rule_that_applies() -> None:
    tp = TransferPolicy(autopilot=[_rule(name="tiny", max_bytes=10), _rule(name="small")])
    assert approving_rule(tp, manifest()) == "small"
    assert approving_rule(tp, manifest(totals=totals(101))) is None
    assert approving_rule(TransferPolicy(), manifest()) is None


def test_approving_rule_never_takes_a_blocked_manifest_or_one_whose_findings_leave() -> None:
    tp = TransferPolicy(autopilot=[_rule()])
    assert approving_rule(tp, manifest(blocked=True, block_reasons=["x"])) is None
    assert approving_rule(tp, manifest(findings=[FINDING])) is None
