"""Delivery planning: every option is checked before the gate runs, against a real repo."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.repos import git

from gatekeeper.errors import Blocked, OmsError, Unavailable, UsageError
from gatekeeper.gates.result.deliver import DeliveryPlan, DeliveryRequest, plan_delivery
from gatekeeper.repo.git import open_repo


def _head(repo: Path, env: dict[str, str]) -> str:
    return str(git(repo, "rev-parse", "HEAD", env=env)).strip()


def test_a_branch_only_request_plans_the_branch(git_repo: Path, oms_env: dict[str, str]) -> None:
    repo = open_repo(git_repo)
    plan = plan_delivery(repo, DeliveryRequest(branch="verified"), _head(git_repo, oms_env))
    assert plan == DeliveryPlan(branch="verified", ref="refs/heads/verified")


@pytest.mark.parametrize(
    ("request_", "error", "why"),
    [
        (DeliveryRequest(remote="origin"), UsageError, "need --deliver-branch"),
        (DeliveryRequest(branch="HEAD"), UsageError, "not a valid branch name"),
        (DeliveryRequest(branch="a b"), UsageError, "not a valid branch name"),
        (DeliveryRequest(branch="main"), Blocked, "checked out"),
        (DeliveryRequest(branch="v", remote="--upload-pack=x"), UsageError, "not a valid remote"),
        (DeliveryRequest(branch="v", remote="fd::3"), Blocked, "refused"),
    ],
)
def test_a_request_that_cannot_complete_is_refused_at_planning(
    git_repo: Path,
    oms_env: dict[str, str],
    request_: DeliveryRequest,
    error: type[OmsError],
    why: str,
) -> None:
    with pytest.raises(error, match=why):
        plan_delivery(open_repo(git_repo), request_, _head(git_repo, oms_env))


def test_a_branch_the_candidate_does_not_contain_is_refused_at_planning(
    git_repo: Path, oms_env: dict[str, str]
) -> None:
    first = _head(git_repo, oms_env)
    git(git_repo, "commit", "-q", "--allow-empty", "-m", "later", env=oms_env)
    git(git_repo, "branch", "ahead", env=oms_env)
    with pytest.raises(Blocked, match="never forces"):
        plan_delivery(open_repo(git_repo), DeliveryRequest(branch="ahead"), first)


def test_draft_pr_needs_gh_and_a_github_remote(
    git_repo: Path, oms_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha = _head(git_repo, oms_env)
    git(git_repo, "remote", "add", "gh", "git@github.com:owner/name.git", env=oms_env)
    git(git_repo, "remote", "add", "local", str(tmp_path / "bare.git"), env=oms_env)
    repo = open_repo(git_repo)
    git_bin = shutil.which("git")
    assert git_bin is not None
    for d in ("git-only", "bin"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "git").symlink_to(git_bin)
    monkeypatch.setenv("PATH", str(tmp_path / "git-only"))
    with pytest.raises(Unavailable, match="gh"):
        plan_delivery(repo, DeliveryRequest("v", "gh", draft_pr=True), sha)
    fake = tmp_path / "bin" / "gh"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    with pytest.raises(UsageError, match="needs --push"):
        plan_delivery(repo, DeliveryRequest("v", draft_pr=True), sha)
    with pytest.raises(UsageError, match="GitHub remote"):
        plan_delivery(repo, DeliveryRequest("v", "local", draft_pr=True), sha)
    plan = plan_delivery(repo, DeliveryRequest("v", "gh", draft_pr=True), sha)
    assert plan.gh == str(fake) and plan.github_repo == "owner/name"
