"""The check runner reaches what the sandbox uid cannot, and binds rw_paths in place.

- As root the check sandbox runs as an unprivileged uid: a ro_path below a directory
  others cannot search (a venv or pyenv under /root, 0700) is staged, not refused, and
  runs inside; so is a scratch copy below such a directory.
- `Profile.rw_paths` are bound read-write at their own absolute path (the `command`
  toolchain builder writes its toolchain there); as root the tree is the sandbox uid's
  for the run and the caller's again afterwards, also when the command fails, and a
  symlink inside is never followed.
- The probe holds for a profile with staged ro paths and rw paths.

Every directory here lies below pytest's tmp_path, whose parent is 0700 (root's).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from support.sandbox import AS_ROOT, NEEDS_BWRAP_AND_PYTHON, PY, SH

from policy import SandboxPolicy
from sandbox import Profile, RunResult, check_profile, find_bwrap, run
from sandbox.probe import probe
from sandbox.staging import unreachable_dir

pytestmark = NEEDS_BWRAP_AND_PYTHON

ENV = {"HOME": "/nonexistent-oms-home"}  # nothing here is below it


@pytest.fixture
def private(tmp_path: Path) -> Path:
    """A 0700 directory: the sandbox uid (as root) cannot search it."""
    d = tmp_path / "private"
    d.mkdir(mode=0o700)
    return d


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    d = Path(tempfile.mkdtemp(prefix="scratch-", dir=tmp_path))
    d.chmod(0o755)
    return d


def profile(ro: Sequence[str] = (), rw: Sequence[str] = ()) -> Profile:
    pol = SandboxPolicy(ro_paths=list(ro), wall_s=60, memory_mb=2048)
    return check_profile(pol, environ=ENV, never=[], rw_paths=rw)


def sh(prof: Profile, scratch: Path, script: str) -> RunResult:
    return run(prof, scratch, [SH, "-c", f"echo @start; {script}; echo @end"], bw=find_bwrap())


def between(result: RunResult) -> list[str]:
    """The command's output between its start and end markers (both must be there)."""
    text = result.stdout.kept.decode()
    assert "@start\n" in text and "@end\n" in text, (text, result.stderr.display())
    return text.split("@start\n", 1)[1].split("@end\n", 1)[0].splitlines()


def test_a_ro_path_below_a_private_dir_runs_its_executable_inside(
    private: Path, scratch: Path
) -> None:
    tool = private / "tc" / "bin" / "hello"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho hello from the toolchain\n")
    tool.chmod(0o755)
    if AS_ROOT:  # what was refused ("not reachable by the sandbox user") before staging
        assert unreachable_dir(tool) is not None
    result = sh(profile(ro=[str(private / "tc")]), scratch, f"{tool}; ls -a {private}; id -u")
    assert result.exit_code == 0, result.stderr.display()
    assert between(result) == ["hello from the toolchain", ".", "..", "tc", "1000"]


def test_a_venv_like_python_in_a_private_dir_runs_python_c_inside(
    private: Path, scratch: Path
) -> None:
    venv = private / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(PY)
    code = "print('@start'); import sys; print(sys.prefix, sys.version_info[0]); print('@end')"
    result = run(profile(ro=[str(venv)]), scratch, [str(venv / "bin" / "python"), "-c", code],
                 bw=find_bwrap())  # fmt: skip
    assert result.exit_code == 0, result.stderr.display()
    assert between(result) == ["/usr 3"]


def test_a_scratch_copy_below_a_private_dir_is_the_workspace(private: Path) -> None:
    scratch = private / "scratch"
    scratch.mkdir()
    (scratch / "candidate.txt").write_text("the candidate\n")
    result = sh(profile(), scratch, "cat candidate.txt; echo made > new.txt")
    assert between(result) == ["the candidate"]
    assert (scratch / "new.txt").read_text() == "made\n"


def test_a_rw_path_is_written_in_place_and_handed_back_to_the_caller(
    private: Path, scratch: Path
) -> None:
    dest = private / "cache" / "toolchains" / "abc"
    dest.mkdir(parents=True)
    (dest / "old.txt").write_text("there before\n")
    script = f"stat -c %u {dest}/old.txt; mkdir {dest}/bin && echo built > {dest}/bin/tool"
    result = sh(profile(rw=[str(dest)]), scratch, script)
    assert result.exit_code == 0, result.stderr.display()
    assert between(result) == ["1000"]  # the tree was the sandbox user's during the run
    assert (dest / "bin" / "tool").read_text() == "built\n"
    for p in (dest, dest / "old.txt", dest / "bin", dest / "bin" / "tool"):
        st = p.lstat()
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), p


def test_a_rw_path_is_handed_back_when_the_command_fails(private: Path, scratch: Path) -> None:
    dest = private / "dest"
    dest.mkdir()
    result = sh(profile(rw=[str(dest)]), scratch, f"echo half > {dest}/half; echo @end; exit 3")
    assert result.exit_code == 3 and between(result) == []
    assert (dest / "half").lstat().st_uid == os.getuid()


@pytest.mark.skipif(not AS_ROOT, reason="only root hands a tree to another uid")
def test_a_symlink_in_a_rw_path_is_never_followed_when_handing_over(
    tmp_path: Path, private: Path, scratch: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not the sandbox's\n")
    os.chown(outside, 4242, 4242)
    dest = private / "dest"
    dest.mkdir()
    (dest / "link").symlink_to(outside)
    result = sh(profile(rw=[str(dest)]), scratch, f"stat -c %u {dest}/link")
    assert between(result) == ["1000"]
    assert (outside.stat().st_uid, outside.stat().st_gid) == (4242, 4242)
    assert (dest / "link").lstat().st_uid == 0


def test_the_probe_holds_for_staged_ro_paths_and_rw_paths(private: Path) -> None:
    tc = private / "tc"
    dest = private / "dest"
    secret = private.parent / "secret"
    for d in (tc, dest, secret):
        d.mkdir()
    # The parents of the binds exist inside as bwrap's empty directories; a sibling never.
    hidden = ["/root", "/etc/shadow", str(private.parent), str(private), str(secret)]
    result = probe(profile(ro=[str(tc)], rw=[str(dest)]), find_bwrap(), hidden)
    assert result.ok, result.failures
    # Control: a bind itself is no parent of one, so it still counts as visible.
    seen = probe(profile(ro=[str(tc)], rw=[str(dest)]), find_bwrap(), [str(dest)])
    assert seen.failures == [f"host path {dest} is visible"]
    assert dest.lstat().st_uid == os.getuid()
