"""Ref names and revisions read as data (gatekeeper/repo/refs.py).

`valid_refname` is pinned against answers recorded from `git check-ref-format
--allow-onelevel` (git 2.39); one test asks the real git again so the table cannot drift.
`resolve_commit` takes `NAME` plus `~N`/`^N` suffixes and nothing else git would parse
(`@{…}`, `:path`, ranges, options): each form is tried on a real three-commit repository.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gatekeeper.errors import UsageError
from gatekeeper.repo.refs import resolve_commit, valid_refname

# (name, git check-ref-format --allow-onelevel accepts it)
REFNAMES: list[tuple[str, bool]] = [
    ("main", True), ("HEAD", True), ("refs/heads/main", True), ("refs/heads/feature/x", True),
    ("refs/tags/v1.0", True), ("a/b/c", True), ("refs/heads/@", True), ("a@b", True),
    ("refs/heads/-x", True), ("refs/heads/ünï", True), ("refs/heads/a.b", True),
    ("refs/heads/a.lockx", True), ("refs/heads/{x}", True), ("refs/heads/a@", True),
    ("refs/heads/a./b", True), ("refs/heads/a{1}", True), ("refs/heads/a/lock", True),
    ("refs/heads/a\u0085b", True), ("refs/heads/a\u202eb", True),
    ("", False), ("@", False), ("/refs/heads/x", False), ("refs/heads/x/", False),
    ("refs/heads/x.", False), ("refs/heads/a/b.", False), ("refs/heads/x.lock", False),
    ("refs/heads/x.lock/y", False), ("refs/heads/a/b.lock/c", False), ("x.lock", False),
    ("refs/heads/a.lock.lock", False), ("refs/heads/a/.lock", False),
    ("refs/heads/a@{1}", False), ("refs/heads/@{x", False), ("refs/heads/a@{", False),
    ("refs/heads/a..b", False), ("refs/heads/x..", False), ("refs/heads/..", False),
    ("refs/heads/.", False), ("refs/heads/a/.", False), ("refs/heads//x", False),
    ("refs/heads/.hidden", False), ("refs/heads/x/.y", False), (".x", False),
    ("refs/heads/a b", False), ("refs/heads/a~1", False), ("refs/heads/a^", False),
    ("refs/heads/a:b", False), ("refs/heads/a?", False), ("refs/heads/a*", False),
    ("refs/heads/a[b", False), ("refs/heads/a\\b", False), ("refs/heads/a\x7f", False),
    ("refs/heads/a\x01", False), ("refs/heads/a\tb", False),
]  # fmt: skip


@pytest.mark.parametrize(("name", "git_accepts"), REFNAMES, ids=repr)
def test_valid_refname_agrees_with_git_check_ref_format(name: str, git_accepts: bool) -> None:
    assert valid_refname(name) is git_accepts


def test_the_recorded_answers_are_what_git_says() -> None:
    for name, recorded in REFNAMES:
        proc = subprocess.run(["git", "check-ref-format", "--allow-onelevel", name],
                              capture_output=True, check=False)  # fmt: skip
        assert (proc.returncode == 0) is recorded, name


def _git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True,
                          text=True, check=True).stdout  # fmt: skip


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three commits on main and a tag v1 on the first; read only, so shared by the module."""
    top = tmp_path_factory.mktemp("refs")
    _git(top, "init", "-q", "-b", "main")
    for n in (1, 2, 3):
        (top / "README.md").write_text(f"version {n}\n")
        _git(top, "add", "README.md")
        _git(top, "commit", "-q", "-m", f"commit {n}")
    _git(top, "tag", "v1", "HEAD~2")
    return top


@pytest.fixture(scope="module")
def history(repo: Path) -> list[str]:
    return _git(repo, "rev-list", "--reverse", "HEAD").split()


# revision -> index into `history` of the commit it names
RESOLVED = {
    "HEAD": 2, "@": 2, "main": 2, "refs/heads/main": 2, "heads/main": 2, "v1": 0,
    "HEAD~": 1, "HEAD~1": 1, "HEAD^": 1, "HEAD^1": 1, "HEAD~2": 0, "HEAD^^": 0, "main~1^": 0,
    "HEAD~1~": 0, "main^{commit}": 2, "HEAD~1^{commit}": 1, "v1^{commit}": 0,
}  # fmt: skip


@pytest.mark.parametrize("rev", sorted(RESOLVED))
def test_a_name_and_its_suffixes_resolve_like_git(repo: Path, history: list[str], rev: str) -> None:
    assert resolve_commit(repo, rev) == history[RESOLVED[rev]]


def test_a_full_sha_or_a_prefix_in_any_case_resolves(repo: Path, history: list[str]) -> None:
    first = history[0]
    assert resolve_commit(repo, first) == first
    assert resolve_commit(repo, first[:8].upper()) == first
    assert resolve_commit(repo, first[:7] + "~0") == first


REFUSED = [
    "", "-x", "--all", "HEAD@{1}", "@{-1}", "HEAD:README.md", "main..HEAD", "main...HEAD",
    "HEAD^{tree}", "HEAD^{/commit}", "HEAD^!", "HEAD^@", "HEAD~x", "HEAD~1234567",
    "HEAD\x00", "HEAD^2", "HEAD~3", "no-such-branch", "abc", "x" * 1025, ":/commit 2",
]  # fmt: skip


@pytest.mark.parametrize("rev", REFUSED, ids=lambda r: repr(r[:20]))
def test_anything_but_a_name_with_plain_suffixes_is_refused(
    repo: Path, history: list[str], rev: str
) -> None:
    with pytest.raises(UsageError):
        resolve_commit(repo, rev)
