"""`oms role list|check`: the roster from the default branch's committed policy, never the
worktree; exit 4 with every reason for a role that cannot run; display only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.oms import run_oms
from support.repos import make_repo

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
KEYS = {"name", "provider", "model", "engine", "auth", "billing", "transport", "authority",
        "unattended", "eligible", "reasons"}  # fmt: skip
POLICY = """version = 1

[roles.impl]
provider = "command:impl"
model = "scripted"
auth = "none"
billing = "none"
transport = "exec"
authority = "worktree-write"

[roles.advisor]
provider = "command:ghost"
model = "m"
transport = "interactive"

[providers.impl]
cmd = ["/usr/bin/python3", "impl.py"]
"""


def test_role_list_shows_every_role_sorted_with_its_eligibility(
    oms_json: OmsJson, tmp_path: Path, oms_env: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    code, out = oms_json(["role", "list", "--repo", str(repo)])
    assert code == 0, out
    roles = out["roles"]
    assert [r["name"] for r in roles] == ["advisor", "impl"]
    assert all(KEYS <= set(r) for r in roles)
    advisor, impl = roles
    assert impl["eligible"] is True and impl["reasons"] == []
    assert (impl["engine"], impl["authority"]) == ("command:impl", "worktree-write")
    assert advisor["eligible"] is False
    assert advisor["auth"] == "undeclared" and len(advisor["reasons"]) == 3


def test_role_check_is_exit_0_for_an_eligible_role(
    oms_json: OmsJson, tmp_path: Path, oms_env: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    code, out = oms_json(["role", "check", "impl", "--repo", str(repo)])
    assert code == 0 and out["role"]["eligible"] is True, out


def test_role_check_is_exit_4_with_every_reason(
    oms_json: OmsJson, tmp_path: Path, oms_env: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    code, out = oms_json(["role", "check", "impl", "--unattended", "--repo", str(repo)])
    assert code == 4 and out["error"]["kind"] == "unavailable", out
    assert out["role"]["reasons"] == ["the role is not marked unattended = true"]
    code, out = oms_json(["role", "check", "advisor", "--repo", str(repo)])
    assert code == 4 and "names no [providers.ghost]" in out["error"]["message"]


def test_an_unknown_role_is_exit_4(
    oms_json: OmsJson, tmp_path: Path, oms_env: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    code, out = oms_json(["role", "check", "nobody", "--repo", str(repo)])
    assert code == 4 and "nobody" in out["error"]["message"], out


def test_roles_come_from_the_default_branch_never_the_worktree(
    oms_json: OmsJson, tmp_path: Path, oms_env: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    (repo / "oms.toml").write_text(POLICY.replace("[roles.impl]", "[roles.sneaky]"))
    code, out = oms_json(["role", "list", "--repo", str(repo)])
    assert code == 0 and [r["name"] for r in out["roles"]] == ["advisor", "impl"], out


def test_role_list_of_a_policy_without_roles_is_empty(
    oms_json: OmsJson, tmp_path: Path, oms_env: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "repo", env=oms_env)
    code, out = oms_json(["role", "list", "--repo", str(repo)])
    assert code == 0 and out["roles"] == [], out
    proc = run_oms(["role", "list", "--repo", repo], env=oms_env)
    assert proc.returncode == 0 and proc.stdout.startswith("no roles: "), proc.stdout
    assert "[roles.<name>]" in proc.stdout and proc.stdout.count("\n") == 1
