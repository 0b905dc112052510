"""The scratch copy refuses a commit tree whose names could leave the copy or write
`.git` (checked by spelling alone, before anything is written).

The copy itself, its caps, deadline and removal: tests/e2e/test_scratch.py.
"""

from __future__ import annotations

import pytest

import gatekeeper.repo.scratch as scratch


@pytest.mark.parametrize(
    ("path", "safe"),
    [(b"a/b", True), (b"a/.gitx", True), (b"a/..b", True), (b"x.git/y", True),
     (b".git/x", False), (b"a/.GIT", False), (b"a/../b", False), (b"..", False),
     (b".", False), (b"a/./b", False), (b"/abs", False), (b"a//b", False), (b"a/", False),
     (b"", False)],
)  # fmt: skip
def test_unsafe_names_in_a_commit_tree_are_refused(path: bytes, safe: bool) -> None:
    if safe:
        scratch._check_path(path)
    else:
        with pytest.raises(scratch.ScratchError, match="unsafe path"):
            scratch._check_path(path)
