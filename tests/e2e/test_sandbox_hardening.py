"""What a run can write, reach and pin, and how a sandbox set-up problem is reported.

- bwrap's root tmpfs is read-only: only /workspace and the capped tmpfs mounts
  take writes.
- A toolchain path (`[sandbox] ro_paths`) holding a unix socket is refused.
- A command the sandbox cannot start (missing inside, a toolchain symlink into a
  place that is not bound) is Unavailable with bwrap's cause, told apart by
  bwrap's status descriptor, never by the command's own stderr.
- Where a memory cgroup can be had, kernel memory (inodes, dentries, tmpfs pages)
  of a run is capped and the run's cgroup is gone afterwards.
- The gate's time budget clamps a check and, once spent, is Unavailable; in the
  result gate both are recorded UNAVAILABLE verdicts, never FAILED.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.oms import run_oms
from support.repos import git, make_repo
from support.sandbox import NEEDS_BWRAP_AND_PYTHON, PY, SH, cli_env, traversable_dir

import gatekeeper.gates.result.pipeline as rg
import gatekeeper.gates.sandboxed as gs
from gatekeeper.errors import EXIT_UNAVAILABLE, Unavailable, classify
from gatekeeper.gates.sandboxed import profile_for, ready, run_in_scratch, sandbox_run
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit
from sandbox import Deadline, ProfileError, cgroup

pytestmark = NEEDS_BWRAP_AND_PYTHON


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A host directory every uid can traverse (a toolchain must be)."""
    with traversable_dir("oms-sbx-tc-", "/dev/shm") as path:
        yield path


@pytest.fixture
def state(tmp_path: Path, shared_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    home = shared_dir / "home"
    home.mkdir(mode=0o755)
    oms_home = tmp_path / "oms-state"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OMS_HOME", str(oms_home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return {"home": home, "oms_home": oms_home}


def policy_repo(root: Path, ro_paths: list[str] | None = None, **sandbox: int) -> Path:
    lines = [f"{k} = {v}" for k, v in sandbox.items()]
    if ro_paths is not None:
        lines.append(f"ro_paths = {json.dumps(ro_paths)}")
    return make_repo(root, files={"oms.toml": "version = 1\n\n[sandbox]\n" + "\n".join(lines)})


# ------------------------------------------------------------ read-only root ---


@pytest.mark.parametrize("target", ["/newfile", "/newdir/f", "/etc/oms-new", "/proc-new"])
def test_root_filesystem_refuses_writes_outside_the_capped_mounts(
    tmp_path: Path, state: Any, target: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    code = f"""
import errno, os
for path in ("/workspace/ok", "/tmp/ok"):
    open(path, "w").write("x")
    print("wrote", path)
try:
    if "{target}".count("/") > 1 and not os.path.exists(os.path.dirname("{target}")):
        os.mkdir(os.path.dirname("{target}"))
    open("{target}", "w").write("x")
    print("WROTE {target}")
except OSError as e:
    print("refused", errno.errorcode.get(e.errno))
print("@done")
"""
    out = sandbox_run(repo, [PY, "-c", code], 20).stdout
    assert "@done" in out and "wrote /workspace/ok" in out and "wrote /tmp/ok" in out, out
    assert "WROTE" not in out, out
    assert "refused EROFS" in out, out


# ------------------------------------------------------------ socket ro_paths ---


def _listen(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(1)
    return s


@pytest.mark.parametrize("where", ["top", "nested", "is_the_path"])
def test_ro_path_holding_a_unix_socket_is_refused(
    tmp_path: Path, state: Any, shared_dir: Path, where: str
) -> None:
    tc = shared_dir / "toolchain"
    (tc / "lib" / "deep").mkdir(parents=True)
    (tc / "lib" / "tool.py").write_text("print('tool')\n")
    sock_at = {"top": tc / "agent.sock", "nested": tc / "lib" / "deep" / "s",
               "is_the_path": tc / "lib" / "s"}[where]  # fmt: skip
    server = _listen(sock_at)
    try:
        ro = str(sock_at) if where == "is_the_path" else str(tc)
        repo = policy_repo(tmp_path / "repo", ro_paths=[ro])
        with pytest.raises(ProfileError, match="unix socket"):
            sandbox_run(repo, [SH, "-c", "echo RAN"], 10)
    finally:
        server.close()


def test_ro_path_without_sockets_is_bound_and_usable(
    tmp_path: Path, state: Any, shared_dir: Path
) -> None:
    tc = shared_dir / "toolchain"
    (tc / "lib").mkdir(parents=True)
    (tc / "lib" / "tool.txt").write_text("from the toolchain\n")
    os.symlink("/run/some.sock", tc / "dangling-link")  # a symlink is never followed
    repo = policy_repo(tmp_path / "repo", ro_paths=[str(tc)])
    out = sandbox_run(repo, [SH, "-c", f"cat {tc}/lib/tool.txt"], 10)
    assert out.exit_code == 0 and "from the toolchain" in out.stdout, out


# ---------------------------------------------------- sandbox start failures ---


def _tool_link_into_unbound(shared_dir: Path) -> tuple[list[str], str]:
    """A toolchain whose executable is a symlink to a host place that is not bound."""
    hidden = shared_dir / "hidden"
    hidden.mkdir()
    (hidden / "tool").write_text("#!/bin/sh\necho HIDDEN_RAN\n")
    (hidden / "tool").chmod(0o755)
    bin_dir = shared_dir / "toolchain" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "tool").symlink_to(hidden / "tool")
    return [str(shared_dir / "toolchain")], str(bin_dir / "tool")


@pytest.mark.parametrize("case", ["missing_executable", "toolchain_symlink_into_unbound"])
def test_command_the_sandbox_cannot_start_is_unavailable_with_its_cause(
    tmp_path: Path, state: Any, shared_dir: Path, case: str
) -> None:
    if case == "missing_executable":
        ro, cmd, cause = None, "/opt/nowhere/bin/tool", "No such file or directory"
    else:
        ro, cmd = _tool_link_into_unbound(shared_dir)
        cause = "which is not bound into the sandbox"
    repo = policy_repo(tmp_path / "repo", ro_paths=ro)
    with pytest.raises(Unavailable) as info:
        sandbox_run(repo, [cmd, "--version"], 10)
    assert classify(info.value) == (EXIT_UNAVAILABLE, "unavailable")
    message = str(info.value)
    assert f"could not start {cmd}" in message and cause in message, message


@pytest.mark.parametrize("code", [1, 127])
def test_command_that_prints_bwraps_words_and_fails_is_a_failure_not_unavailable(
    tmp_path: Path, state: Any, code: int
) -> None:
    """The candidate controls its stderr: imitating bwrap's execvp error changes nothing."""
    repo = make_repo(tmp_path / "repo")
    fake = "echo 'bwrap: execvp /bin/x: No such file or directory' >&2"
    result = sandbox_run(repo, [SH, "-c", f"echo RAN; {fake}; exit {code}"], 10)
    assert result.exit_code == code and "RAN" in result.stdout, result
    assert "execvp" in result.stderr


def test_cli_reports_a_command_missing_inside_as_exit_4(tmp_path: Path, state: Any) -> None:
    repo = make_repo(tmp_path / "repo")
    argv = [sys.executable, "-m", "gatekeeper", "sandbox", "run", "--repo", str(repo),
            "--json", "--", "/opt/nowhere/tool"]  # fmt: skip
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=cli_env(state), timeout=60, check=False
    )
    obj = json.loads(proc.stdout)
    assert proc.returncode == 4 and obj["oms_exit_code"] == 4, (proc.stdout, proc.stderr)
    assert obj["error"]["kind"] == "unavailable"
    assert "could not start /opt/nowhere/tool" in obj["error"]["message"]


# ------------------------------------------------------------ kernel memory ---

HAS_CGROUP = cgroup.support().kind is not None


def _run_cgroups() -> list[Path]:
    found = cgroup.support()
    parents = {p for p in (found.memory_parent, found.pids_parent) if p is not None}
    mine = f"{cgroup.PREFIX}{os.getpid()}-"
    return [p / n for p in parents for n in os.listdir(p) if n.startswith(mine)]


@pytest.mark.skipif(not HAS_CGROUP, reason="no memory cgroup can be had here")
def test_many_empty_files_in_a_tiny_tmpfs_cannot_pin_kernel_memory(
    tmp_path: Path, state: Any
) -> None:
    """300,000 empty files (~240 MB of inodes and dentries) with tmpfs_mb = 1."""
    repo = policy_repo(tmp_path / "repo", memory_mb=64, tmpfs_mb=1, wall_s=120)
    code = """
import os
n = 0
try:
    for n in range(300_000):
        os.close(os.open(f"/tmp/{n}", os.O_CREAT | os.O_WRONLY, 0o644))
        if n % 5000 == 0:
            print("made", n, flush=True)
    print("ALL_MADE", flush=True)
except OSError as e:
    print("refused", n, e.errno, flush=True)
"""
    result = sandbox_run(repo, [PY, "-c", code], 120)
    out = result.stdout
    made = [int(ln.split()[1]) for ln in out.splitlines() if ln.startswith("made")]
    assert made and made[-1] >= 5000, result  # control: it ran and created files
    assert "ALL_MADE" not in out, result
    assert result.exit_code != 0 or "refused" in out, result
    assert _run_cgroups() == []  # the run's cgroup went with it


@pytest.mark.skipif(not HAS_CGROUP, reason="no memory cgroup can be had here")
def test_run_cgroup_caps_memory_and_processes_from_the_profile(
    tmp_path: Path, state: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo_dir = policy_repo(tmp_path / "repo", memory_mb=128, tmpfs_mb=4, max_procs=40)
    seen: dict[str, str] = {}
    real_create = cgroup.create

    def spy(limits: Any, found: Any = None) -> Any:
        cg = real_create(limits, found)
        assert cg is not None
        for d in cg.dirs:
            for f in ("memory.limit_in_bytes", "memory.max", "pids.max"):
                if (d / f).exists():
                    seen[f] = (d / f).read_text().strip()
        return cg

    monkeypatch.setattr(cgroup, "create", spy)
    result = sandbox_run(repo_dir, [SH, "-c", "echo RAN"], 10)
    assert "RAN" in result.stdout
    cap = str((128 + 3 * 4 + cgroup.SLACK_MB) * 1024 * 1024)
    assert seen.get("memory.limit_in_bytes", seen.get("memory.max")) == cap, seen
    assert seen.get("pids.max") == "40", seen
    assert _run_cgroups() == []


def test_stale_run_cgroup_of_a_dead_oms_is_swept() -> None:
    found = cgroup.support()
    if found.kind is None or found.memory_parent is None:
        pytest.skip("no memory cgroup can be had here")
    dead = subprocess.Popen(["/bin/true"])
    dead.wait()
    stale = found.memory_parent / f"{cgroup.PREFIX}{dead.pid}-feedface"
    live = found.memory_parent / f"{cgroup.PREFIX}{os.getpid()}-feedface"
    stale.mkdir()
    live.mkdir()
    try:
        assert stale in cgroup.sweep_stale(found)
        assert not stale.exists() and live.exists()
    finally:
        for d in (stale, live):
            if d.exists():
                d.rmdir()


# ------------------------------------------------------------------ budget ---


def _prepared(repo_dir: Path) -> tuple[Any, str, Any, Any]:
    repo = open_repo(repo_dir)
    sha = resolve_commit(repo.top, "HEAD")
    profile = profile_for(repo, read_policy_at(repo.top, sha))
    return repo, sha, profile, ready(repo, profile)


def test_spent_budget_is_unavailable_before_anything_is_copied(
    tmp_path: Path, state: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch_dir = tmp_path / "scratch"
    scratch_dir.mkdir()
    monkeypatch.setenv("OMS_SCRATCH_DIR", str(scratch_dir))
    repo, sha, profile, bw = _prepared(make_repo(tmp_path / "repo"))
    with pytest.raises(Unavailable, match="time budget"):
        run_in_scratch(repo, sha, profile, bw, [SH, "-c", "echo RAN"], Deadline.after(0))
    assert list(scratch_dir.iterdir()) == []


def test_check_is_clamped_to_the_budget_left_and_then_unavailable(
    tmp_path: Path, state: Any
) -> None:
    repo, sha, profile, bw = _prepared(make_repo(tmp_path / "repo"))
    assert profile.limits.wall_s > 30  # the check alone would run for minutes
    with pytest.raises(Unavailable, match=r"time budget .* ran out during a check"):
        run_in_scratch(repo, sha, profile, bw, [SH, "-c", "sleep 600"], Deadline.after(3))


# ------------------------------------------------------------- result gate ---


def _gate_repo(root: Path, cmd: list[str], state: dict[str, Path]) -> Path:
    """`main` with a one-check plan; branch `cand` adding a harmless file."""
    plan = f'version = 1\n\n[[checks]]\nname = "unit"\ncmd = {json.dumps(cmd)}\ntimeout_s = 30\n'
    repo = make_repo(root, files={"oms.toml": plan})
    git(repo, "checkout", "-q", "-b", "cand")
    (repo / "mod.py").write_text("X = 1\n")
    git(repo, "add", "mod.py")
    git(repo, "commit", "-q", "-m", "candidate")
    git(repo, "checkout", "-q", "main")
    proc = run_oms(["init", "--repo", repo, "--json"], env=cli_env(state))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return repo


def test_gate_check_whose_command_is_missing_is_unavailable_not_failed(
    tmp_path: Path, state: Any
) -> None:
    repo = _gate_repo(tmp_path / "repo", ["/opt/nowhere/bin/pytest", "-q"], state)
    argv = [sys.executable, "-m", "gatekeeper", "process-result", "--repo", str(repo),
            "--candidate", "cand", "--base", "main", "--json"]  # fmt: skip
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=cli_env(state), timeout=120, check=False
    )
    obj = json.loads(proc.stdout)
    assert proc.returncode == EXIT_UNAVAILABLE, (proc.stdout, proc.stderr)
    assert obj["decision"] == "UNAVAILABLE", obj
    assert any("could not start /opt/nowhere/bin/pytest" in r for r in obj["reasons"]), obj
    assert obj["evidence_seq"] is not None  # the refusal is recorded


def test_gate_whose_budget_is_spent_is_unavailable_before_the_scanners(
    tmp_path: Path, state: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _gate_repo(tmp_path / "repo", [SH, "-c", "exit 0"], state)
    monkeypatch.setattr(gs, "gate_deadline", lambda loaded: Deadline.after(0))
    with pytest.raises(Unavailable) as info:
        rg.process_result(repo, "cand", "main")
    assert info.value.data["decision"] == "UNAVAILABLE"
    assert "time budget" in str(info.value) and "before the scanners" in str(info.value)
