"""Diff parsing without a repository: `change.py`'s reading of `git diff-tree -z --raw`
output, which paths a commit gives new content, which findings touch added lines, and
`worktree.unified_diff`'s git-shaped text (checked with the real `git apply`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gatekeeper.repo import change
from gatekeeper.repo.change import Change, FileChange, ScanSet, Touched
from gatekeeper.repo.worktree import unified_diff
from gatekeeper.scan import Finding

NULL = "0" * 40
A, B, C = "a" * 40, "b" * 40, "c" * 40
COMMIT = "1" * 40


def _raw(
    status: str, path: bytes, old: str = A, new: str = B, modes: str = "100644 100644"
) -> bytes:
    return f":{modes} {old} {new} {status}".encode() + b"\0" + path + b"\0"


def test_raw_output_gives_a_header_then_each_change_with_its_modes_and_blobs() -> None:
    out = (COMMIT.encode() + b"\0" + _raw("M", b"f") + _raw("A", b"g", NULL, C, "000000 100755")
           + _raw("T", b"l", A, B, "100644 120000"))  # fmt: skip
    got = list(change._raw_entries(out))
    assert got[0] == (COMMIT.encode(), None)
    assert [e for _, e in got[1:]] == [
        FileChange("M", "f", "100644", "100644", B, A),
        FileChange("A", "g", "000000", "100755", C, NULL),
        FileChange("T", "l", "100644", "120000", B, A),
    ]


def test_a_path_is_data_whatever_its_bytes() -> None:
    # A newline, a colon and a non-UTF-8 byte in a name: one entry, shown with \xNN.
    (_, entry), = change._raw_entries(_raw("A", b"x\n:100644 y\xff", NULL, C))  # fmt: skip
    assert entry is not None and entry.path == "x\n:100644 y\\xff"


def _fc(path: str, old: str, new: str, status: str = "M") -> FileChange:
    return FileChange(status, path, "100644", "100644", new, old)


def test_a_commit_gives_new_content_where_it_differs_from_its_parent() -> None:
    got = list(change._new_in_commit(COMMIT, [[_fc("new", NULL, B, "A"), _fc("mod", A, B),
                                              _fc("gone", A, NULL, "D")]]))  # fmt: skip
    assert got == [
        Touched(COMMIT, "new", "100644", B, ()),
        Touched(COMMIT, "mod", "100644", B, (("100644", A),)),
    ]


def test_a_merge_taking_one_sides_version_adds_nothing_there() -> None:
    first = [_fc("both", A, C), _fc("theirs", A, B)]
    second = [_fc("both", B, C)]  # "theirs" is the second parent's version: unchanged there
    got = list(change._new_in_commit(COMMIT, [first, second]))
    assert got == [Touched(COMMIT, "both", "100644", C, (("100644", A), ("100644", B)))]


def test_commit_parts_keep_every_header_but_tree_and_parent_ids() -> None:
    raw = (b"tree " + A.encode() + b"\nparent " + B.encode() + b"\nauthor x <x@y> 1 +0000\n"
           b"committer x <x@y> 1 +0000\nextra: token\n\nsubject\n\nbody\n")  # fmt: skip
    headers, message = change._commit_parts(raw)
    assert headers == b"author x <x@y> 1 +0000\ncommitter x <x@y> 1 +0000\nextra: token"
    assert message == b"subject\n\nbody\n"


def _finding(file: str, line: int, end: int | None = None) -> Finding:
    return Finding("gitleaks", "rule", file, line, "fp", "…", end_line=end)


def test_only_findings_that_touch_an_added_line_are_new() -> None:
    s = ScanSet(items=(), added={"m": frozenset({3, 4})}, also={"m": ("m2",)})
    kept = s.new_findings([_finding("m", 1), _finding("m", 3), _finding("m", 1, end=3),
                           _finding("whole", 9)])  # fmt: skip
    assert [(f.file, f.line, f.end_line) for f in kept] == [
        ("m", 3, None), ("m2", 3, None), ("m", 1, 3), ("m2", 1, 3), ("whole", 9, None),
    ]  # fmt: skip


def test_one_blob_at_two_paths_is_read_once_and_reported_at_both() -> None:
    touched = (Touched(COMMIT, "a", "100644", B, (("100644", A),)),
               Touched(COMMIT, "b", "100644", B, ()),
               Touched(COMMIT, "sub", "160000", C, ()))  # fmt: skip
    blobs = change._blobs(Change("base", COMMIT, touched=touched))
    assert list(blobs) == [B]  # the gitlink names a commit elsewhere: no content
    b = blobs[B]
    assert (b.label, b.also, b.whole, b.olds) == ("a", ["b"], True, {A})


# -- unified_diff: checked by git itself ---------------------------------------------------


CASES = {
    "modified": (b"one\ntwo\nthree\n", b"one\n2\nthree\n"),
    "no-final-newline": (b"one\ntwo\n", b"one\ntwo"),
    "created": (None, b"new\n"),
    "deleted": (b"old\n", None),
    "not-utf8": (b"caf\xe9\n", b"caf\xe9 \xff\n"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_unified_diff_applies_with_git_apply(tmp_path: Path, case: str) -> None:
    old, new = CASES[case]
    if old is not None:
        (tmp_path / "f.txt").write_bytes(old)
    patch = unified_diff("f.txt", old, new)
    assert patch.startswith(b"diff --git a/f.txt b/f.txt\n")
    subprocess.run(["git", "apply", "--unsafe-paths", "--directory=.", "-"], input=patch,
                   cwd=tmp_path, check=True, capture_output=True)  # fmt: skip
    assert (tmp_path / "f.txt").exists() is (new is not None)
    if new is not None:
        assert (tmp_path / "f.txt").read_bytes() == new


def test_no_change_is_no_diff() -> None:
    assert unified_diff("f", b"x\n", b"x\n") == b""
    assert unified_diff("f", None, None) == b""
