"""Placing the base's files over a scratch copy, and clearing a report path in it: never
through a symlink or a file the candidate planted, never onto a directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gatekeeper.repo.scratch import ScratchError, clear_path, overlay


def test_overlay_replaces_a_file_and_a_symlink_without_following_it(tmp_path: Path) -> None:
    root, outside = tmp_path / "copy", tmp_path / "outside.txt"
    (root / "tests").mkdir(parents=True)
    outside.write_text("host file")
    (root / "tests" / "test_a.py").write_text("candidate")
    os.symlink(outside, root / "tests" / "test_b.py")
    overlay(root, [("tests/test_a.py", b"base a"), ("tests/test_b.py", b"base b"),
                   ("new/dir/conftest.py", b"base c")])  # fmt: skip
    assert (root / "tests" / "test_a.py").read_bytes() == b"base a"
    assert not (root / "tests" / "test_b.py").is_symlink()
    assert (root / "tests" / "test_b.py").read_bytes() == b"base b"
    assert outside.read_text() == "host file"
    assert (root / "new" / "dir" / "conftest.py").read_bytes() == b"base c"


@pytest.mark.parametrize("planted", ["symlink", "file"])
def test_overlay_refuses_a_parent_the_candidate_made_a_symlink_or_a_file(
    tmp_path: Path, planted: str
) -> None:
    root, elsewhere = tmp_path / "copy", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    if planted == "symlink":
        os.symlink(elsewhere, root / "tests")
    else:
        (root / "tests").write_text("x")
    with pytest.raises(ScratchError):
        overlay(root, [("tests/test_a.py", b"base")])
    assert list(elsewhere.iterdir()) == []


def test_overlay_refuses_a_directory_where_the_file_goes(tmp_path: Path) -> None:
    (tmp_path / "tests" / "test_a.py").mkdir(parents=True)
    with pytest.raises(ScratchError, match="directory"):
        overlay(tmp_path, [("tests/test_a.py", b"base")])


def test_clear_path_removes_a_committed_report_or_link_and_makes_its_parents(
    tmp_path: Path,
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.xml").write_text("<testsuite/>")
    clear_path(tmp_path, "out/report.xml")
    assert not (tmp_path / "out" / "report.xml").exists()
    os.symlink("/etc/passwd", tmp_path / "out" / "report.xml")
    clear_path(tmp_path, "out/report.xml")
    assert not os.path.lexists(tmp_path / "out" / "report.xml")
    clear_path(tmp_path, "fresh/dir/report.xml")
    assert (tmp_path / "fresh" / "dir").is_dir()
    (tmp_path / "d" / "report.xml").mkdir(parents=True)
    with pytest.raises(ScratchError, match="directory"):
        clear_path(tmp_path, "d/report.xml")
