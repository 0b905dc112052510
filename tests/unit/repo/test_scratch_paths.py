"""The pure checks of `repo/scratch.py` before anything is written: tree names, the caps,
the owner pid in a scratch directory's name, and where copies go."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatekeeper.repo import scratch
from gatekeeper.repo.scratch import (
    MAX_DEPTH,
    MAX_ENTRIES,
    MAX_PATH_BYTES,
    ScratchError,
    ScratchLimit,
    check_limits,
)

# Beyond tests/test_scratch.py's table: git's own names in any case and at any depth.
UNSAFE = [b".git", b".GIT", b"a/.git", b"a/.GiT/b", b"a/b/..", b"./a", b"a/.", b"//a", b"a//"]
SAFE = [b"a", b".gitignore", b"a/.github/x", b"git/x", b"...", b"a/...b", b"a b/c\tfile",
        b"\xff\xfe", b"a/.git.d/x"]  # fmt: skip


@pytest.mark.parametrize("path", UNSAFE, ids=repr)
def test_a_name_that_leaves_the_copy_or_reaches_git_is_refused(path: bytes) -> None:
    with pytest.raises(ScratchError, match="unsafe path"):
        scratch._check_path(path)


@pytest.mark.parametrize("path", SAFE, ids=repr)
def test_other_names_are_copied_as_data(path: bytes) -> None:
    scratch._check_path(path)


def _entries(*paths: bytes) -> list[tuple[str, str, bytes]]:
    return [("100644", "0" * 40, p) for p in paths]


def test_a_tree_at_every_cap_passes() -> None:
    deepest = b"/".join([b"d"] * MAX_DEPTH)  # MAX_DEPTH - 1 slashes
    longest = b"x" * MAX_PATH_BYTES
    check_limits(_entries(deepest, longest) * (MAX_ENTRIES // 2))


@pytest.mark.parametrize(
    ("entries", "needle"),
    [
        (_entries(b"f") * (MAX_ENTRIES + 1), "entries"),
        (_entries(b"x" * (MAX_PATH_BYTES + 1)), "longer than"),
        (_entries(b"/".join([b"d"] * (MAX_DEPTH + 1))), "deeper than"),
    ],
    ids=["entries", "path-bytes", "depth"],
)
def test_a_tree_over_a_cap_is_refused_in_one_line(
    entries: list[tuple[str, str, bytes]], needle: str
) -> None:
    with pytest.raises(ScratchLimit, match=needle) as caught:
        check_limits(entries)
    assert caught.value.kind == "usage" and "\n" not in str(caught.value)
    assert len(str(caught.value)) < 300  # a long name is cut, not echoed whole


@pytest.mark.parametrize(
    ("name", "pid"),
    [("oms-scratch-123-abcd", 123), ("oms-run-7-x", 7), ("oms-probe-42-", 42),
     ("oms-scratch-k2j4h5", None), ("oms-scratch-12", None), ("oms-scratch--1-x", None),
     ("oms-scratch-1a-x", None), ("other-123-x", None)],
)  # fmt: skip
def test_the_owner_pid_is_read_only_from_a_name_oms_made(name: str, pid: int | None) -> None:
    assert scratch._owner_pid(name) == pid


def test_oms_scratch_dir_places_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMS_SCRATCH_DIR", str(tmp_path))
    assert scratch.scratch_parent() == tmp_path
