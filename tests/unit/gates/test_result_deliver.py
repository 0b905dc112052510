"""Delivery planning: every option is checked before the gate runs, against a real repo."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support.repos import git

from gatekeeper.errors import Blocked, OmsError, Unavailable, UsageError
from gatekeeper.gates.result.deliver import DeliveryPlan, DeliveryRequest, deliver, plan_delivery
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.notes import NOTES_REF, note_line, verify_hint
from gatekeeper.retry import Retry


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


FAKE_GH = '''#!/usr/bin/python3
"""A stand-in for the GitHub CLI (GitHub itself is not reachable here): `pr list` and
`pr create` over a JSON file of pull requests; `create` first fails with GitHub's 5xx
(or 4xx) as many times as the file says."""
import json, sys
STATE = {state!r}
s = json.load(open(STATE))
args = sys.argv[1:]
s["calls"].append(args[:2])
head = args[args.index("--head") + 1]
if args[:2] == ["pr", "list"]:
    print(json.dumps([p for p in s["pulls"] if p["headRefName"] == head]))
elif args[:2] == ["pr", "create"]:
    if s["fail"] > 0:
        s["fail"] -= 1
        json.dump(s, open(STATE, "w"))
        sys.stderr.write(s["error"] + "\\n")
        sys.exit(1)
    s.setdefault("bodies", []).append(args[args.index("--body") + 1])
    n = len(s["pulls"]) + 1
    s["pulls"].append({{"url": "https://github.com/owner/name/pull/%d" % n,
                       "headRefOid": s["sha"], "headRefName": head}})
json.dump(s, open(STATE, "w"))
'''


def _gh_world(tmp: Path, repo_dir: Path, env: dict[str, str], fail: int,
              error: str = "HTTP 502: Bad Gateway (https://api.github.com/graphql)",
              ) -> tuple[Path, DeliveryPlan, list[float], str]:  # fmt: skip
    """A bare remote on disk, the fake `gh`, and a plan for a draft PR; sleeps recorded."""
    sha = _head(repo_dir, env)
    bare = tmp / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], env=env, check=True)
    git(repo_dir, "remote", "add", "origin", str(bare), env=env)
    state = tmp / "gh-state.json"
    state.write_text(json.dumps({"pulls": [], "calls": [], "fail": fail, "error": error,
                                 "sha": sha}))  # fmt: skip
    fake = tmp / "gh"
    fake.write_text(FAKE_GH.format(state=str(state)))
    fake.chmod(0o755)
    slept: list[float] = []
    plan = DeliveryPlan("v", "refs/heads/v", "origin", str(fake), "owner/name",
                        Retry(sleep=slept.append))  # fmt: skip
    return state, plan, slept, sha


def test_gh_5xx_is_retried_and_a_second_delivery_finds_the_pr_not_a_second_one(
    git_repo: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    state, plan, slept, sha = _gh_world(tmp_path, git_repo, oms_env, fail=1)
    repo = open_repo(git_repo)
    first = deliver(repo, sha, plan)
    assert first.draft_pr == "https://github.com/owner/name/pull/1" and slept == [1.0]
    again = deliver(repo, sha, plan)  # the same command again: resumes, changes nothing
    assert again.draft_pr == first.draft_pr and again.branch.action == "unchanged"
    s = json.loads(state.read_text())
    assert len(s["pulls"]) == 1
    assert s["calls"] == [["pr", "list"], ["pr", "create"], ["pr", "list"], ["pr", "create"],
                          ["pr", "list"], ["pr", "list"]]  # fmt: skip


def test_gh_5xx_past_the_bound_says_how_to_resume_and_a_4xx_is_not_retried(
    git_repo: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    state, plan, slept, sha = _gh_world(tmp_path, git_repo, oms_env, fail=3)
    repo = open_repo(git_repo)
    with pytest.raises(Unavailable, match="resume with: oms process-result --candidate") as exc:
        deliver(repo, sha, plan)
    assert f"--candidate {sha} --deliver-branch v --push origin --draft-pr" in exc.value.message
    assert slept == [1.0, 3.0] and json.loads(state.read_text())["pulls"] == []
    assert deliver(repo, sha, plan).draft_pr == "https://github.com/owner/name/pull/1"


def test_a_gh_4xx_failure_is_not_retried(
    git_repo: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    state, plan, slept, sha = _gh_world(tmp_path, git_repo, oms_env, fail=1,
                                        error="HTTP 422: Validation Failed")  # fmt: skip
    with pytest.raises(Unavailable, match="HTTP 422"):
        deliver(open_repo(git_repo), sha, plan)
    assert slept == [] and json.loads(state.read_text())["calls"] == [["pr", "list"],
                                                                     ["pr", "create"]]  # fmt: skip


def test_an_open_pr_at_another_commit_is_refused_not_duplicated(
    git_repo: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    state, plan, _, sha = _gh_world(tmp_path, git_repo, oms_env, fail=0)
    s = json.loads(state.read_text())
    s["pulls"].append({"url": "https://github.com/owner/name/pull/7", "headRefOid": "f" * 40,
                       "headRefName": "v"})  # fmt: skip
    state.write_text(json.dumps(s))
    with pytest.raises(Blocked, match="opens no second one"):
        deliver(open_repo(git_repo), sha, plan)
    assert len(json.loads(state.read_text())["pulls"]) == 1


def test_a_push_carries_the_provenance_note_and_the_pr_body_says_how_to_verify_it(
    git_repo: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    """The attestation is the caller's (`work.provenance.attest`, a layer above); a stand-in
    envelope here, since this test is about where it goes."""
    state, plan, _, sha = _gh_world(tmp_path, git_repo, oms_env, fail=0)
    envelope = {"payload": "e30=", "payloadType": "application/vnd.in-toto+json",
                "signatures": []}  # fmt: skip
    asked: list[str] = []
    plan = dataclasses.replace(plan, attest=lambda top, c: asked.append(c) or note_line(envelope))
    repo = open_repo(git_repo)
    first = deliver(repo, sha, plan)
    assert first.to_json()["provenance"] == {"ref": NOTES_REF, "pushed": True} and asked == [sha]
    bare = tmp_path / "remote.git"
    shown = git(git_repo, "--git-dir", str(bare), "notes", "--ref=oms", "show", sha, env=oms_env)
    assert shown.encode() == note_line(envelope)
    [body] = json.loads(state.read_text())["bodies"]
    assert verify_hint(sha) in body
    assert f"git fetch origin {NOTES_REF}:{NOTES_REF} && oms evidence verify --commit {sha}" in body
    # Resumed after the note was pushed: nothing fails, nothing is added twice.
    again = deliver(repo, sha, plan)
    assert again.provenance == first.provenance and again.draft_pr == first.draft_pr
    assert git(git_repo, "--git-dir", str(bare), "notes", "--ref=oms", "show", sha,
               env=oms_env).encode() == note_line(envelope)  # fmt: skip
    # Without an attest (the MCP tool, which never pushes), no note and no such line.
    assert deliver(repo, sha, dataclasses.replace(plan, attest=None)).provenance is None
