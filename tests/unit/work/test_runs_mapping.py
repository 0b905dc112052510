"""Which policy role plays each run role: a mapping only chooses among the policy's roles,
the persisted assignments are read as oms wrote them (never through a symlink), and a
one-call override leaves the run's mapping alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gatekeeper.errors import UsageError
from gatekeeper.work.providers.base import RoleUnavailable
from gatekeeper.work.runs import mapping
from policy import LoadedPolicy
from policy.load import parse_policy

ROLE = """[roles.{name}]
provider = "command:{provider}"
model = "{model}"
auth = "none"
billing = "none"
transport = "exec"
unattended = true
"""
PROVIDER = """[providers.{provider}]
cmd = ["/bin/true"]
"""
REPO_ID = "r" * 16


def loaded(*roles: tuple[str, str, str]) -> LoadedPolicy:
    providers = sorted({p for _, p, _ in roles})
    text = "\n".join(["version = 1", *(ROLE.format(name=n, provider=p, model=m)
                                        for n, p, m in roles),
                       *(PROVIDER.format(provider=p) for p in providers)])  # fmt: skip
    return parse_policy(text.encode(), "test")


POLICY = loaded(("planner", "plan", "a"), ("critic", "crit", "b"), ("critic2", "crit", "b"),
                ("other", "other", "c"))  # fmt: skip


def test_a_value_is_a_role_name_or_exactly_a_roles_provider_and_model(oms_home: Path) -> None:
    assert mapping.policy_role(POLICY, "other") == "other"
    assert mapping.policy_role(POLICY, "command:plan:a") == "planner"
    assert mapping.policy_role(POLICY, "command:crit:b") == "critic"  # the first by name
    for value in ("command:plan", "command:plan:z", "codex-cli:gpt-5", "nobody", ""):
        with pytest.raises(RoleUnavailable):
            mapping.policy_role(POLICY, value)


def test_a_run_mapping_names_only_policy_roles_with_the_planner_fallback(oms_home: Path) -> None:
    got = mapping.run_mapping(POLICY, REPO_ID, {"qa": "other"})
    assert got == {"planner": "planner", "orchestrator": "planner", "critic": "critic",
                   "qa": "other"}  # fmt: skip
    with pytest.raises(UsageError, match="not a run role"):
        mapping.run_mapping(POLICY, REPO_ID, {"admin": "other"})
    with pytest.raises(RoleUnavailable):
        mapping.run_mapping(POLICY, REPO_ID, {"qa": "command:nope:x"})


def _write(oms_home: Path, doc: object) -> Path:
    path = mapping.assignments_path(REPO_ID)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_assignments_win_over_names_but_only_while_the_policy_defines_them(
    oms_home: Path,
) -> None:
    _write(oms_home, {"version": 1, "roles": {"critic": "other", "qa": "gone", "x": "other"}})
    got = mapping.run_mapping(POLICY, REPO_ID)
    assert got["critic"] == "other"
    assert "qa" not in got  # an assignment to a role the policy no longer has is no mapping


def test_an_assignment_file_that_is_not_ours_is_refused_not_ignored(oms_home: Path) -> None:
    for doc in (
        {"version": 2, "roles": {}},
        {"roles": []},
        ["x"],
        {"version": 1, "roles": {"qa": 3}},
    ):
        _write(oms_home, doc)
        with pytest.raises(UsageError, match="not a role assignment file"):
            mapping.assigned(REPO_ID)


def test_an_assignment_file_is_never_read_through_a_symlink(oms_home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"version": 1, "roles": {"critic": "other"}}))
    path = mapping.assignments_path(REPO_ID)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, path)
    with pytest.raises(UsageError, match="cannot read the role assignments"):
        mapping.assigned(REPO_ID)


def test_a_one_call_override_resolves_without_changing_the_mapping(oms_home: Path) -> None:
    run_roles = {"critic": "critic"}
    assert mapping.role_of(POLICY, run_roles, "critic", agent="other").name == "other"
    assert run_roles == {"critic": "critic"}
    with pytest.raises(RoleUnavailable, match="no role plays qa"):
        mapping.role_of(POLICY, run_roles, "qa")
