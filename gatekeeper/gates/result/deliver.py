"""Delivery of a READY_FOR_HUMAN commit, only when asked: a local branch, a push, a draft PR.

With a push, the commit's provenance attestation (made by the caller's `attest`: it lives
in a layer above the gates) is added to its note in `refs/notes/oms` and that ref pushed
beside the branch, merged with the remote's notes (`gatekeeper.repo.notes.push_notes`);
the draft PR's body says how to verify it.

Never forces, never merges, tags or releases. The options are checked before the gate
runs (`plan_delivery`): a bad branch name, a branch checked out in any worktree (whose
files would silently fall out of step), a branch the candidate does not contain, a
remote whose URL oms does not push to, or `--draft-pr` without a GitHub push and `gh`
are refused with nothing run and nothing recorded. The branch is written by oms itself
and the push runs from oms' own repository with oms' transport rules: no hook or config
of the user's repository runs.

Asked again for the same commit (the same `oms process-result` command), a delivery
resumes: the branch is unchanged, a remote branch already at the commit takes no push, and
the branch's open draft PR is found (`gh pr list`), not opened twice; a PR whose head is
another commit is refused. `gh`'s failures on a 5xx from GitHub are asked again within
`gatekeeper.retry`'s bound, never a 4xx.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gatekeeper.errors import Blocked, Unavailable, UsageError
from gatekeeper.gates.result.verdict import (
    BranchDelivery,
    Delivery,
    ProvenanceDelivery,
    PushDelivery,
)
from gatekeeper.repo.git import Repo, git_env, is_ancestor
from gatekeeper.repo.notes import NOTES_REF, add_note, push_notes, verify_hint
from gatekeeper.repo.refs import checked_out_branches, read_ref, valid_refname, write_ref
from gatekeeper.repo.remote import push, remote_url
from gatekeeper.retry import RETRY, Retry, retried

_GH_5XX = re.compile(r"\bHTTP 5[0-9][0-9]\b")
MAX_URL = 300


class GhTransient(Unavailable):
    """`gh` failed on a 5xx answer from GitHub: asking again may succeed."""


# The note line attesting a READY commit (gatekeeper.work.provenance.attested_line).
Attest = Callable[[Path, str], bytes]


@dataclass(frozen=True)
class DeliveryRequest:
    """What the caller asked to be done with a READY_FOR_HUMAN commit."""

    branch: str | None = None
    remote: str | None = None
    draft_pr: bool = False
    attest: Attest | None = None  # with a push: the note pushed beside the branch

    @property
    def wanted(self) -> bool:
        return bool(self.branch or self.remote or self.draft_pr)


@dataclass(frozen=True)
class DeliveryPlan:
    """A request checked against the repository: every part of it can be carried out."""

    branch: str
    ref: str
    remote: str | None = None
    gh: str | None = None  # the `gh` binary, for a draft PR
    github_repo: str | None = None  # OWNER/NAME of the pushed-to remote
    retry: Retry = RETRY  # for `gh`'s 5xx failures
    attest: Attest | None = None


def _branch_ref(name: str) -> str:
    ref = f"refs/heads/{name}"
    if not name or name.startswith("-") or not valid_refname(ref) or name == "HEAD":
        raise UsageError(f"not a valid branch name: {name[:80]!r}")
    return ref


def _movable(repo: Repo, ref: str, name: str, sha: str) -> str | None:
    """The branch's commit now; Blocked when oms may not move it to `sha`."""
    if ref in checked_out_branches(repo):
        raise Blocked(f"branch {name} is checked out in a worktree; oms will not move it "
                      "under that worktree")  # fmt: skip
    old = read_ref(repo, ref)
    if old and old != sha and not is_ancestor(repo, old, sha):
        raise Blocked(f"branch {name} points at {old[:12]}, which {sha[:12]} does not contain; "
                      "oms never forces a branch")  # fmt: skip
    return old


def plan_delivery(repo: Repo, request: DeliveryRequest, candidate: str) -> DeliveryPlan:
    """`request` checked before the gate runs, so that a delivery fails before it starts."""
    if not request.branch:
        raise UsageError("--push and --draft-pr need --deliver-branch NAME")
    gh = shutil.which("gh") if request.draft_pr else None
    if request.draft_pr and gh is None:
        raise Unavailable("--draft-pr needs the GitHub CLI `gh`, which is not installed")
    if request.draft_pr and not request.remote:
        raise UsageError("--draft-pr needs --push REMOTE (the branch must be on GitHub)")
    ref = _branch_ref(request.branch)
    url = remote_url(repo, request.remote, push=True) if request.remote else None
    github = _github_repo(url) if gh is not None and url is not None else None
    _movable(repo, ref, request.branch, candidate)
    return DeliveryPlan(request.branch, ref, request.remote, gh, github, attest=request.attest)


def deliver_branch(repo: Repo, sha: str, plan: DeliveryPlan) -> BranchDelivery:
    name = plan.branch
    old = _movable(repo, plan.ref, name, sha)  # again: the branch may have moved meanwhile
    if old == sha:
        return BranchDelivery(branch=name, action="unchanged", commit=sha)
    if old:
        write_ref(repo, plan.ref, sha, old, "oms: fast-forward to verified commit")
        return BranchDelivery(branch=name, action="fast-forwarded", commit=sha, previous=old)
    write_ref(repo, plan.ref, sha, None, "oms: verified commit")
    return BranchDelivery(branch=name, action="created", commit=sha)


def deliver(repo: Repo, sha: str, plan: DeliveryPlan) -> Delivery:
    """The planned delivery of the verified `sha`: branch, then push, then draft PR."""
    branch = deliver_branch(repo, sha, plan)
    if plan.remote is None:
        return Delivery(branch=branch)
    # No '+': a non-fast-forward is refused by the remote.
    push(repo, plan.remote, sha, plan.branch)
    pushed = PushDelivery(remote=plan.remote, branch=plan.branch)
    noted = _provenance(repo, sha, plan)
    if plan.gh is None or plan.github_repo is None:
        return Delivery(branch=branch, push=pushed, provenance=noted)
    return Delivery(branch=branch, push=pushed, provenance=noted,
                    draft_pr=_draft_pr(repo, sha, plan))  # fmt: skip


def _provenance(repo: Repo, sha: str, plan: DeliveryPlan) -> ProvenanceDelivery | None:
    """The attestation added to `sha`'s note and `refs/notes/oms` pushed to the same remote."""
    if plan.attest is None or plan.remote is None:
        return None
    add_note(repo, sha, plan.attest(repo.top, sha))
    push_notes(repo, plan.remote)
    return ProvenanceDelivery(ref=NOTES_REF, pushed=True)


def _draft_pr(repo: Repo, sha: str, plan: DeliveryPlan) -> str:
    """The branch's open PR (found, else opened as a draft), read back at `sha`."""

    def once() -> tuple[str, str | None]:
        found = _open_pr(repo, plan)
        if found is None:  # a lost answer to an earlier try may have opened it: look first
            _gh(repo, plan, "pr", "create", "--draft", "--head", plan.branch,
                "--title", f"oms: verified {sha[:12]}",
                "--body", _pr_body(sha, plan))  # fmt: skip
            found = _open_pr(repo, plan)
        if found is None:
            raise Unavailable(f"gh pr create succeeded but no open PR for {plan.branch} reads back")
        return found

    resume = (f"resume with: oms process-result --candidate {sha} --deliver-branch "
              f"{plan.branch} --push {plan.remote} --draft-pr")  # fmt: skip
    try:
        url, head = retried(plan.retry, once, GhTransient)
    except Unavailable as exc:
        raise Unavailable(f"{exc.message}; {resume}"[:400]) from None
    if head != sha:
        raise Blocked(f"the open pull request for {plan.branch} has head "
                      f"{str(head)[:12]}, not {sha[:12]}; oms opens no second one")  # fmt: skip
    return url


def _pr_body(sha: str, plan: DeliveryPlan) -> str:
    body = f"READY_FOR_HUMAN by oms for {sha}."
    return f"{body}\n\n{verify_hint(sha)}" if plan.attest is not None else body


def _open_pr(repo: Repo, plan: DeliveryPlan) -> tuple[str, str | None] | None:
    """(url, head commit) of the branch's open PR, read fresh; GitHub's answer is data."""
    out = _gh(repo, plan, "pr", "list", "--head", plan.branch, "--state", "open",
              "--json", "url,headRefOid,headRefName", "--limit", "5")  # fmt: skip
    try:
        rows: Any = json.loads(out)
    except ValueError:
        raise Unavailable("gh pr list answered with something that is not JSON") from None
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, dict) and row.get("headRefName") == plan.branch:
            url, head = row.get("url"), row.get("headRefOid")
            if not (isinstance(url, str) and url.startswith("https://") and url.isprintable()
                    and len(url) <= MAX_URL):  # fmt: skip
                raise Unavailable("gh pr list named a pull request with no usable URL")
            return url, head if isinstance(head, str) else None
    return None


def _gh(repo: Repo, plan: DeliveryPlan, *args: str) -> str:
    """One `gh` call on the plan's repository; GhTransient on GitHub's 5xx."""
    assert plan.gh is not None and plan.github_repo is not None
    # gh is told the repository, and runs outside the user's one: it must not run git
    # under that repository's configuration either.
    proc = subprocess.run([plan.gh, *args, "--repo", plan.github_repo], cwd=repo.mirror,
                          env=git_env(repo), capture_output=True, text=True,
                          check=False)  # fmt: skip
    if proc.returncode != 0:
        why = f"gh {args[0]} {args[1]} failed: {proc.stderr.strip()[:200]}"
        raise GhTransient(why) if _GH_5XX.search(proc.stderr) else Unavailable(why)
    return proc.stdout.strip()


def _github_repo(url: str) -> str:
    m = re.fullmatch(r"(?:https://github\.com/|ssh://git@github\.com/|git@github\.com:)"
                     r"([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?", url)  # fmt: skip
    if m is None:
        raise UsageError("--draft-pr needs a GitHub remote (github.com over https or ssh)")
    return m.group(1)
