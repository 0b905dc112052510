"""The scratch copy: bounded host work before the sandbox, and removal that never gives up.

- The copy's work is linear in the tree: each directory is made once, parents
  first, and no per-entry work grows with the depth (counted in interpreter line
  events in scratch.py, not timed).
- A tree over the entry, depth or path-length cap is refused before anything is
  written; a tree at the caps is copied.
- A spent Deadline stops the copy and leaves nothing behind.
- Removal gives back permissions the sandbox took away, and a removal that fails
  is raised with the path; copies and run directories of dead oms processes are
  swept, never a live one, a symlink or someone else's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.repos import make_repo
from support.sandbox import AS_ROOT, traversable_dir

import gatekeeper.repo.scratch as scratch
from gatekeeper.errors import EXIT_UNAVAILABLE, EXIT_USAGE, Unavailable, classify
from sandbox import BudgetExpired, Deadline, SandboxUnavailable
from sandbox.runner import remove_dir


def _head(repo: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def chain(depth: int) -> dict[str, str]:
    """A file at every level of a `depth`-deep chain of directories `d/d/…`."""
    return {"d/" * k + "f": f"{k}\n" for k in range(depth)}


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    d = tmp_path / "scratch-parent"
    d.mkdir()
    return d


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every uid can reach (tmp_path's parents are 0700)."""
    with traversable_dir("oms-test-shared-", "/dev/shm") as d:
        yield d


# ------------------------------------------------------------- linear copy ---


def _line_events_of_copy(repo: Path, dest: Path) -> tuple[int, Path]:
    counted = 0
    target = scratch.__file__

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal counted
        if event == "line":
            counted += 1
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename == target else None

    sha = _head(repo)
    sys.settrace(tracer)
    try:
        root = scratch.copy_commit(repo, sha, dest)
    finally:
        sys.settrace(None)
    return counted, root


def test_copy_work_grows_linearly_with_tree_depth(
    tmp_path: Path, dest: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    real_mkdir = os.mkdir

    def counting_mkdir(path: Any, mode: int = 0o777, *a: Any, **k: Any) -> None:
        made.append(os.fsdecode(path))
        real_mkdir(path, mode, *a, **k)

    work = {}
    for depth in (60, 120):
        repo = make_repo(tmp_path / f"repo{depth}", files=chain(depth))
        made.clear()
        monkeypatch.setattr(os, "mkdir", counting_mkdir)
        work[depth], root = _line_events_of_copy(repo, dest)
        monkeypatch.setattr(os, "mkdir", real_mkdir)
        inside = [m for m in made if m.startswith(str(root) + "/")]
        # One mkdir per directory, each parent before its child.
        assert len(inside) == depth - 1 == len(set(inside)), (depth, len(inside))
        assert inside == sorted(inside, key=len)
        assert (root / ("d/" * (depth - 1) + "f")).read_text() == f"{depth - 1}\n"
        scratch.remove_tree(root)
    # Twice the depth (and entries): about twice the work, not four times.
    assert work[120] < 2.5 * work[60], work


# ------------------------------------------------------------------- caps ---


def _over_entries(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setattr(scratch, "MAX_ENTRIES", 5)
    return {f"f{i}": "x\n" for i in range(6)}  # README.md makes seven


CAPPED = {
    "depth_900": (lambda mp: chain(900), "deeper than"),
    "path_length": (lambda mp: {("n" * 200 + "/") * 11 + "f": "x\n"}, "longer than"),
    "entries": (_over_entries, "entries"),
}


@pytest.mark.parametrize("case", sorted(CAPPED))
def test_tree_over_a_cap_is_refused_before_anything_is_written(
    tmp_path: Path, dest: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    build, words = CAPPED[case]
    repo = make_repo(tmp_path / "repo", files=build(monkeypatch))
    with pytest.raises(scratch.ScratchLimit, match=words) as info:
        scratch.copy_commit(repo, _head(repo), dest)
    assert classify(info.value) == (EXIT_USAGE, "usage")
    assert list(dest.iterdir()) == []


def test_tree_at_the_depth_cap_is_copied(tmp_path: Path, dest: Path) -> None:
    repo = make_repo(tmp_path / "repo", files=chain(scratch.MAX_DEPTH))
    root = scratch.copy_commit(repo, _head(repo), dest)
    deepest = "d/" * (scratch.MAX_DEPTH - 1) + "f"
    assert (root / deepest).read_text() == f"{scratch.MAX_DEPTH - 1}\n"
    scratch.remove_tree(root)


def test_spent_deadline_stops_the_copy_and_leaves_nothing(tmp_path: Path, dest: Path) -> None:
    repo = make_repo(tmp_path / "repo", files=chain(10))
    with pytest.raises(BudgetExpired, match="time budget"):
        scratch.copy_commit(repo, _head(repo), dest, deadline=Deadline.after(0))
    assert list(dest.iterdir()) == []


# ---------------------------------------------------------------- removal ---


def _locked_tree(root: Path) -> None:
    """What a check can do to its copy: directories without write or search permission."""
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    (root / "c").mkdir()
    (root / "c" / "g").write_text("y")
    os.chmod(root / "a" / "b", 0o000)
    os.chmod(root / "a", 0o500)
    os.chmod(root / "c", 0o000)


@pytest.mark.skipif(not AS_ROOT, reason="needs root to run the removal as another uid")
def test_removal_gives_back_permissions_the_sandbox_took_away(shared: Path) -> None:
    """As the owning, unprivileged uid (root would ignore the permissions)."""
    os.chmod(shared, 0o1777)  # like /dev/shm, the usual scratch parent
    root = shared / f"{scratch.SCRATCH_PREFIX}{os.getpid()}-locked"
    root.mkdir()
    os.chown(root, 65534, 65534)
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, lock the tree, remove it
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            _locked_tree(root)
            scratch.remove_tree(root)
            code = 0 if not root.exists() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not root.exists()


REMOVERS = {"scratch_copy": scratch.remove_tree, "run_dir": remove_dir}


@pytest.mark.skipif(not AS_ROOT, reason="needs root to mount a file system inside the copy")
@pytest.mark.parametrize("remover", sorted(REMOVERS))
def test_removal_that_fails_is_reported_with_the_path(dest: Path, remover: str) -> None:
    root = dest / f"{scratch.SCRATCH_PREFIX}{os.getpid()}-busy"
    (root / "mnt").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "oms-test", str(root / "mnt")],
                   check=True)  # fmt: skip
    try:
        with pytest.raises((Unavailable, SandboxUnavailable), match="remove it by hand") as info:
            REMOVERS[remover](root)
        assert str(root) in str(info.value)
        assert classify(info.value) == (EXIT_UNAVAILABLE, "unavailable")
    finally:
        subprocess.run(["umount", str(root / "mnt")], check=True)
    scratch.remove_tree(root)
    assert not root.exists()


# ------------------------------------------------------------------ sweep ---


def _dead_pid() -> int:
    proc = subprocess.Popen(["/bin/true"])
    proc.wait()
    return proc.pid


def _entry(parent: Path, case: str) -> tuple[Path, bool]:
    """Make one entry for `case`; (its path, whether the sweep must remove it)."""
    old = time.time() - 2 * scratch.STALE_AFTER_S
    dead, live = _dead_pid(), os.getpid()
    name = {
        "dead_owner_old": f"oms-scratch-{dead}-aaaa",
        "dead_owner_run_dir": f"oms-run-{dead}-bbbb",
        "dead_owner_probe_dir": f"oms-probe-{dead}-cccc",
        "live_owner_old": f"oms-scratch-{live}-dddd",
        "dead_owner_young": f"oms-scratch-{dead}-eeee",
        "symlink": f"oms-scratch-{dead}-ffff",
        "other_name": f"not-oms-{dead}-gggg",
        "legacy_name_old": "oms-scratch-k2j4h5",
        "legacy_name_recent": "oms-scratch-p9q8r7",
        "other_owner": f"oms-scratch-{dead}-hhhh",
    }[case]
    path = parent / name
    if case == "symlink":
        target = parent / "elsewhere"
        target.mkdir()
        (target / "precious").write_text("keep")
        path.symlink_to(target)
        os.utime(path, (old, old), follow_symlinks=False)
        return path, False
    path.mkdir()
    (path / "file").write_text("x")
    when = {
        "dead_owner_young": time.time(),
        "legacy_name_old": time.time() - 2 * scratch.STALE_UNOWNED_AFTER_S,
    }.get(case, old)
    if case == "other_owner":
        os.chown(path, 4242, 4242)
    os.utime(path, (when, when))
    swept = {"dead_owner_old", "dead_owner_run_dir", "dead_owner_probe_dir", "legacy_name_old"}
    return path, case in swept


SWEEP_CASES = ["dead_owner_old", "dead_owner_run_dir", "dead_owner_probe_dir", "live_owner_old",
               "dead_owner_young", "symlink", "other_name", "legacy_name_old",
               "legacy_name_recent", "other_owner"]  # fmt: skip


@pytest.mark.parametrize("case", SWEEP_CASES)
def test_sweep_removes_only_old_copies_of_dead_oms_processes(dest: Path, case: str) -> None:
    if case == "other_owner" and not AS_ROOT:
        pytest.skip("needs root to make a directory owned by another uid")
    path, swept = _entry(dest, case)
    removed = scratch.sweep_stale([dest])
    assert (path in removed) is swept
    assert os.path.lexists(path) is not swept
    if case == "symlink":
        assert (dest / "elsewhere" / "precious").read_text() == "keep"
