"""oms' own worktree reads: the fd-walking file helper and the worktree state.

Real git repositories in `tmp_path`; no `git status` or `git diff` is ever run by the
code under test, and a clean filter that would leave a marker proves it.
"""

from __future__ import annotations

import os
import random
import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gatekeeper.repo.fsread import (
    LinkRefused,
    Missing,
    NotRegular,
    RepoFiles,
    TooLarge,
    _read_to_end,
    parts_of,
)
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.worktree import blob_id, unified_diff, worktree_state


@pytest.fixture(autouse=True)
def _clean_git_env(oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for k in [k for k in os.environ if k.startswith("GIT_")]:
        monkeypatch.delenv(k)
    for k in ("GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "GIT_TERMINAL_PROMPT"):
        monkeypatch.setenv(k, oms_env[k])


@pytest.fixture
def outside(tmp_path: Path) -> tuple[Path, str]:
    """A host directory outside the repository holding `f.txt` with a unique marker."""
    host = tmp_path / "host"
    host.mkdir()
    marker = "HOSTMARK-" + secrets.token_hex(8)
    (host / "f.txt").write_text(marker + "\n")
    return host, marker


# -- fsread ----------------------------------------------------------------------------


def _plant(repo: Path, how: str, host: Path) -> str:
    """Make `how` at a path in `repo`; return the path to read."""
    if how == "leaf symlink":
        (repo / "l.txt").symlink_to(host / "f.txt")
        return "l.txt"
    if how == "parent symlink":
        (repo / "d").symlink_to(host, target_is_directory=True)
        return "d/f.txt"
    if how == "deep parent symlink":
        (repo / "a" / "b").mkdir(parents=True)
        (repo / "a" / "b" / "c").symlink_to(host, target_is_directory=True)
        return "a/b/c/f.txt"
    if how == "relative parent symlink":
        (repo / "r").symlink_to(os.path.relpath(host, repo), target_is_directory=True)
        return "r/f.txt"
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how", ["leaf symlink", "parent symlink", "deep parent symlink", "relative parent symlink"]
)
def test_a_symlink_anywhere_on_the_path_serves_nothing(
    git_repo: Path, outside: tuple[Path, str], how: str
) -> None:
    host, _ = outside
    rel = _plant(git_repo, how, host)
    with RepoFiles(git_repo) as files, pytest.raises(LinkRefused):
        files.read(rel, 1 << 20)


def test_a_directory_swapped_for_a_symlink_after_the_check_serves_nothing_outside(
    git_repo: Path, outside: tuple[Path, str]
) -> None:
    host, marker = outside
    (git_repo / "d").mkdir()
    (git_repo / "d" / "f.txt").write_text("inside\n")
    with RepoFiles(git_repo) as files:
        files.lstat("d/f.txt")  # the check: a regular file below a real directory
        os.rename(git_repo / "d", git_repo / "d-old")
        (git_repo / "d").symlink_to(host, target_is_directory=True)
        try:
            data = files.read("d/f.txt", 1 << 20)
        except LinkRefused:
            data = b""
    assert marker.encode() not in data
    with RepoFiles(git_repo) as fresh, pytest.raises(LinkRefused):
        fresh.read("d/f.txt", 1 << 20)


def test_fifo_is_refused_without_being_opened_and_limits_and_absence_are_typed(
    git_repo: Path,
) -> None:
    os.mkfifo(git_repo / "pipe")  # opening it for reading would block: a read is visible
    (git_repo / "big.txt").write_bytes(b"x" * 100)
    with RepoFiles(git_repo) as files:
        with pytest.raises(NotRegular):
            files.read("pipe", 1 << 20)
        with pytest.raises(TooLarge):
            files.read("big.txt", 99)
        with pytest.raises(Missing):
            files.read("nothing/here.txt", 10)
        assert files.read("README.md", 100) == b"hello\n"


@pytest.mark.parametrize("rel", ["../x", "/etc/passwd", "a/../../x", "", "a\x00b"])
def test_paths_that_could_leave_the_top_are_refused_by_spelling(git_repo: Path, rel: str) -> None:
    from gatekeeper.errors import UsageError

    with RepoFiles(git_repo) as files, pytest.raises(UsageError):
        files.read(rel, 10)


@pytest.mark.parametrize("size", [0, 1, 8191, (1 << 16) + 3, 200_000])
def test_a_file_is_read_whole_at_every_size_up_to_the_limit(git_repo: Path, size: int) -> None:
    data = bytes(random.Random(size).getrandbits(8) for _ in range(size))
    (git_repo / "f.bin").write_bytes(data)
    with RepoFiles(git_repo) as files:
        assert files.read("f.bin", 200_000) == data
        if size:
            with pytest.raises(TooLarge):
                files.read("f.bin", size - 1)


@pytest.mark.parametrize("limit", [400_000, 300_000, 123_457])
def test_a_file_that_grew_after_its_fstat_is_read_to_its_end_or_to_the_limit(
    tmp_path: Path, limit: int
) -> None:
    data = os.urandom(300_000)
    (tmp_path / "grown").write_bytes(data)
    fd = os.open(tmp_path / "grown", os.O_RDONLY)
    try:  # the size fstat gave was 10 bytes: the file grew before the read
        got = _read_to_end(fd, limit, 10)
    finally:
        os.close(fd)
    assert got == data[:limit]


@pytest.mark.parametrize(
    ("rel", "parts"),
    [("a/b", ("a", "b")), ("a//b", ("a", "b")), ("./a", ("a",)), ("a/", ("a",)),
     ("a/./b/", ("a", "b")), ("a b/\n", ("a b", "\n"))],
)  # fmt: skip
def test_parts_of_drops_empty_and_dot_components(rel: str, parts: tuple[str, ...]) -> None:
    assert parts_of(rel) == parts


# -- worktree state ----------------------------------------------------------------------

Change = Callable[[Path, Callable[..., str]], None]


def _edit(repo: Path, run_git: Callable[..., str]) -> None:
    (repo / "README.md").write_text("edited\n")


def _stage(repo: Path, run_git: Callable[..., str]) -> None:
    (repo / "README.md").write_text("staged\n")
    run_git(repo, "add", "README.md")


def _untracked(repo: Path, run_git: Callable[..., str]) -> None:
    (repo / "new.txt").write_text("new\n")


def _delete(repo: Path, run_git: Callable[..., str]) -> None:
    (repo / "README.md").unlink()


def _skip_worktree(repo: Path, run_git: Callable[..., str]) -> None:
    run_git(repo, "update-index", "--skip-worktree", "README.md")


def _assume_unchanged_edit(repo: Path, run_git: Callable[..., str]) -> None:
    run_git(repo, "update-index", "--assume-unchanged", "README.md")
    (repo / "README.md").write_text("hidden edit\n")


def _exec_bit(repo: Path, run_git: Callable[..., str]) -> None:
    os.chmod(repo / "README.md", 0o755)


def _link_swap(repo: Path, run_git: Callable[..., str]) -> None:
    (repo / "README.md").unlink()
    (repo / "README.md").symlink_to("/etc/hostname")


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (_edit, " M README.md"),
        (_stage, "M  README.md"),
        (_untracked, "?? new.txt"),
        (_delete, " D README.md"),
        (_skip_worktree, " S README.md"),
        (_assume_unchanged_edit, " h README.md"),
        (_exec_bit, " M README.md"),
        (_link_swap, " M README.md"),
    ],
    ids=lambda v: getattr(v, "__name__", v).strip("_") if callable(v) else None,
)
def test_worktree_state_is_computed_from_bytes_and_index_flags(
    git_repo: Path, run_git: Callable[..., str], change: Change, line: str
) -> None:
    repo = open_repo(git_repo)
    head = run_git(git_repo, "rev-parse", "HEAD").strip()
    assert worktree_state(repo, head).changes == ()
    change(git_repo, run_git)
    state = worktree_state(repo, head)
    assert state.dirty and [c.line() for c in state.changes] == [line]


def test_worktree_state_runs_no_clean_filter_of_the_repository(
    git_repo: Path, run_git: Callable[..., str], tmp_path: Path
) -> None:
    marker = tmp_path / "filter-ran"
    run_git(git_repo, "config", "filter.spy.clean", f"touch {marker}; cat")
    run_git(git_repo, "config", "filter.spy.required", "true")
    (git_repo / ".gitattributes").write_text("* filter=spy\n")
    (git_repo / "README.md").write_text("edited\n")
    (git_repo / "same.txt").write_text("same\n")
    run_git(git_repo, "-c", "filter.spy.clean=cat", "add", "same.txt")
    run_git(git_repo, "-c", "filter.spy.clean=cat", "commit", "-q", "-m", "same")
    os.utime(git_repo / "same.txt", (1, 1))  # stat-dirty, same bytes: git status would filter
    state = worktree_state(open_repo(git_repo), run_git(git_repo, "rev-parse", "HEAD").strip())
    assert {c.line() for c in state.changes} == {" M README.md", "?? .gitattributes"}
    assert not marker.exists(), "a clean filter of the repository ran"


def test_blob_id_matches_git_hash_object(git_repo: Path, run_git: Callable[..., str]) -> None:
    data = b"some bytes\r\nwith CRLF and no final newline"
    (git_repo / "x.bin").write_bytes(data)
    want = run_git(git_repo, "hash-object", "--no-filters", "x.bin").strip()
    assert blob_id(data) == want


def test_git_sees_the_same_change_oms_computes(git_repo: Path, run_git: Callable[..., str]) -> None:
    """Cross-check with git itself on a harmless repository (no filters configured)."""
    (git_repo / "README.md").write_text("hello\nworld\n")
    ours = unified_diff("README.md", b"hello\n", (git_repo / "README.md").read_bytes()).decode()
    theirs = subprocess.run(["git", "-C", str(git_repo), "diff", "--no-color", "--no-ext-diff"],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert [ln for ln in ours.splitlines() if ln[:1] in "+-@"] == [
        ln for ln in theirs.splitlines() if ln[:1] in "+-@"
    ]
