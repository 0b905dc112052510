"""Hard limits of `oms sandbox run`: processes, memory, file size, tmpfs, time, survivors, output.

Limits are lowered per test by committing an `oms.toml` with a `[sandbox]` table
in a real git repository. Effects are asserted from outside where they can be:
the call returns in time, no process with the test's unique argv marker is left
on the host, the oms process's own peak memory stays bounded.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from support.repos import make_repo
from support.sandbox import AS_ROOT, NEEDS_BWRAP_AND_PYTHON, PY, SH, cli_env, sandbox_toml

from gatekeeper.gates.sandboxed import sandbox_run

pytestmark = NEEDS_BWRAP_AND_PYTHON


# ---------------------------------------------------------------- fixtures ---


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    home = tmp_path / "home"
    home.mkdir()
    oms_home = tmp_path / "oms-state"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OMS_HOME", str(oms_home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return {"home": home, "oms_home": oms_home}


def cli_argv(repo_dir: Path, *cmd: str, timeout: int | None = None) -> list[str]:
    extra = ["--timeout", str(timeout)] if timeout else []
    return [sys.executable, "-m", "gatekeeper", "sandbox", "run", "--repo", str(repo_dir),
            *extra, "--json", "--", *cmd]  # fmt: skip


def parse_envelope(stdout: str, returncode: int) -> dict[str, Any]:
    lines = stdout.splitlines()
    assert len(lines) == 1, (returncode, stdout[:2000])
    obj = json.loads(lines[0])
    assert obj["oms_exit_code"] == returncode, obj
    assert obj["ok"] is (returncode == 0), obj
    return obj


def host_pids_with(marker: bytes, settle_s: float = 2.0) -> list[int]:
    """Host pids whose argv contains `marker` (waiting briefly for teardown to finish)."""
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker in f.read():
                        found.append(int(entry))
            except OSError:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def _user_process_count(uid: int) -> int:
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


# ------------------------------------------------------------- processes ---


# RLIMIT_NPROC counts every process of the sandbox uid, other tests' sandboxes included:
# beside them the probe itself could not fork, and beside it they could not either.
@pytest.mark.alone
@pytest.mark.skipif(
    not AS_ROOT and _user_process_count(os.getuid()) > 16,
    reason="as a normal user RLIMIT_NPROC also counts the user's own host processes",
)
def test_fork_storm_hits_max_procs_and_the_run_ends(tmp_path: Path, state: Any) -> None:
    repo_dir = make_repo(
        tmp_path / "repo", {"oms.toml": sandbox_toml({"max_procs": 32, "wall_s": 20})}
    )
    marker = f"oms-fork-storm-{secrets.token_hex(6)}"
    code = f"""# {marker}
import os, time
n = 0
try:
    while n < 5000:
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        n += 1
    print("NO_LIMIT", n)
except OSError as e:
    print("stopped", e.errno, n)
"""
    start = time.monotonic()
    try:
        result = sandbox_run(repo_dir, [PY, "-c", code], 20).to_json()
        elapsed = time.monotonic() - start
        out = result["stdout"]
        assert result["timed_out"] is False, result
        assert "NO_LIMIT" not in out, out
        fields = out.split()
        assert fields[:2] == ["stopped", "11"], out  # EAGAIN
        assert int(fields[2]) < 32, out
        assert elapsed < 15, f"the run took {elapsed:.1f} s"
        # The forked children (sleeping 120 s) died with the sandbox.
        assert host_pids_with(marker.encode()) == []
    finally:
        _kill_all(host_pids_with(marker.encode(), settle_s=0))


def test_memory_hog_cannot_allocate_beyond_memory_mb(tmp_path: Path, state: Any) -> None:
    repo_dir = make_repo(tmp_path / "repo", {"oms.toml": sandbox_toml({"memory_mb": 256})})
    code = """
small = bytearray(64 << 20)
print("small_ok")
try:
    big = bytearray(1 << 30)
    print("BIG_ALLOCATED", len(big))
except MemoryError:
    print("MemoryError")
"""
    result = sandbox_run(repo_dir, [PY, "-c", code], 20).to_json()
    out = result["stdout"]
    assert "small_ok" in out, result  # control: the limit is not "nothing works"
    assert "BIG_ALLOCATED" not in out
    assert "MemoryError" in out


# ----------------------------------------------------------------- disk ---


def test_file_larger_than_file_size_mb_cannot_be_written(tmp_path: Path, state: Any) -> None:
    repo_dir = make_repo(tmp_path / "repo", {"oms.toml": sandbox_toml({"file_size_mb": 5})})
    code = """
import errno, os, subprocess
chunk = b"x" * (1 << 20)
for path in ("/workspace/big", "/tmp/big"):
    try:
        with open(path, "wb") as f:
            for _ in range(50):
                f.write(chunk)
                f.flush()
        print("WROTE_ALL", path)
    except OSError as e:
        print("refused", path, errno.errorcode.get(e.errno))
    print("size", path, os.path.getsize(path))
r = subprocess.run(["/bin/sh", "-c", "head -c 50000000 /dev/zero > /workspace/big2"])
print("shell_rc", r.returncode, os.path.getsize("/workspace/big2"))
"""
    result = sandbox_run(repo_dir, [PY, "-c", code], 20).to_json()
    out = result["stdout"]
    limit = 5 * 1024 * 1024
    assert "WROTE_ALL" not in out, out
    assert out.count("refused") == 2 and "EFBIG" in out, out
    sizes = [int(ln.split()[-1]) for ln in out.splitlines() if ln.startswith("size")]
    assert len(sizes) == 2 and all(0 < s <= limit for s in sizes), out
    shell = next(ln for ln in out.splitlines() if ln.startswith("shell_rc")).split()
    assert shell[1] != "0" and int(shell[2]) <= limit, out  # SIGXFSZ


def test_tmp_and_home_are_capped_at_tmpfs_mb(tmp_path: Path, state: Any) -> None:
    repo_dir = make_repo(
        tmp_path / "repo", {"oms.toml": sandbox_toml({"tmpfs_mb": 16, "file_size_mb": 1024})}
    )
    code = """
import errno, os
chunk = b"x" * (1 << 20)
for path in ("/tmp/fill", "/home/sandbox/fill"):
    try:
        with open(path, "wb") as f:
            for _ in range(100):
                f.write(chunk)
                f.flush()
        print("WROTE_ALL", path)
    except OSError as e:
        print("refused", path, errno.errorcode.get(e.errno))
    print("size", path, os.path.getsize(path))
"""
    result = sandbox_run(repo_dir, [PY, "-c", code], 20).to_json()
    out = result["stdout"]
    assert "WROTE_ALL" not in out, out
    assert out.count("refused") == 2 and out.count("ENOSPC") == 2, out
    sizes = [int(ln.split()[-1]) for ln in out.splitlines() if ln.startswith("size")]
    assert len(sizes) == 2 and all(0 < s <= 16 * 1024 * 1024 for s in sizes), out


# ------------------------------------------------------------------ time ---


@pytest.mark.parametrize("kind", ["sleep", "busy_loop"])
def test_command_past_the_timeout_is_killed_and_reported(
    tmp_path: Path, state: dict[str, Path], kind: str
) -> None:
    repo_dir = make_repo(tmp_path / "repo")
    marker = f"oms-timeout-{secrets.token_hex(6)}"
    if kind == "sleep":
        cmd = [SH, "-c", f"echo started; exec sleep 3000 # {marker}", marker]
    else:
        cmd = [PY, "-c", f"# {marker}\nprint('started', flush=True)\nwhile True: pass"]
    start = time.monotonic()
    proc = subprocess.run(
        cli_argv(repo_dir, *cmd, timeout=2),
        capture_output=True,
        text=True,
        env=cli_env(state),
        timeout=30,
        check=False,
    )
    elapsed = time.monotonic() - start
    try:
        obj = parse_envelope(proc.stdout, proc.returncode)
        assert proc.returncode == 1
        assert obj["timed_out"] is True
        assert obj["exit_code"] is None
        assert "started" in obj["stdout"]  # control: the command did run
        assert 1.5 <= obj["duration_s"] < 5, obj
        assert elapsed < 10, f"the CLI call took {elapsed:.1f} s"
        assert host_pids_with(marker.encode()) == []
    finally:
        _kill_all(host_pids_with(marker.encode(), settle_s=0))


# ------------------------------------------------------------- survivors ---


def _setsid_script(n: int) -> list[str]:
    return [SH, "-c", (
        f"setsid sleep {n} & sleep 0.3; "
        "echo \"inside: $(tr '\\0' ' ' < /proc/$!/cmdline)\"; echo @done"
    )]  # fmt: skip


def _daemon_script(n: int) -> list[str]:
    """A classic double-fork daemon with its std fds on /dev/null (the run sees EOF at once)."""
    code = f"""
import os, sys, time
if os.fork():
    time.sleep(0.3)
    for p in os.listdir("/proc"):
        if p.isdigit():
            with open(f"/proc/{{p}}/cmdline") as f:
                print("inside:", f.read().replace(chr(0), " "))
    print("@done")
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
fd = os.open("/dev/null", os.O_RDWR)
for i in (0, 1, 2):
    os.dup2(fd, i)
os.execv("/bin/sleep", ["sleep", "{n}"])
"""
    return [PY, "-c", code]


@pytest.mark.parametrize("build", [_setsid_script, _daemon_script], ids=["setsid", "daemon"])
def test_background_process_does_not_outlive_the_run(
    tmp_path: Path, state: Any, build: Any
) -> None:
    repo_dir = make_repo(tmp_path / "repo")
    n = 900_000_000 + secrets.randbelow(99_999_999)
    marker = f"sleep\0{n}\0".encode()
    try:
        result = sandbox_run(repo_dir, build(n), 20).to_json()
        assert result["timed_out"] is False, result
        assert "@done" in result["stdout"], result
        assert f"sleep {n}" in result["stdout"], result  # control: it was alive inside
        assert host_pids_with(marker) == [], "a background process survived the run"
    finally:
        _kill_all(host_pids_with(marker, settle_s=0))


# ---------------------------------------------------------------- output ---


# argv[1]: where to write the peak RSS (KiB) of the command argv[2:], which it runs and waits
# for; its exit code is the command's.
MAXRSS_LAUNCHER = (
    "import os, subprocess, sys; p = subprocess.Popen(sys.argv[2:]); "
    "_, status, usage = os.wait4(p.pid, 0); "
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss)); "
    "sys.exit(os.waitstatus_to_exitcode(status))"
)


def test_output_flood_is_counted_but_bounded_in_json_and_oms_memory(
    tmp_path: Path, state: dict[str, Path]
) -> None:
    repo_dir = make_repo(tmp_path / "repo", {"oms.toml": sandbox_toml({"wall_s": 60})})
    total = 300_000_000
    script = f"yes 0123456789abcdef | head -c {total}"
    rss_file = tmp_path / "maxrss"
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        # Through a small launcher that waits for oms itself: Linux carries the high-water
        # RSS of the mm a process had before exec into its ru_maxrss, so oms started by
        # this (large, long-lived) pytest worker would report the worker's RSS, not its own.
        proc = subprocess.Popen(
            [sys.executable, "-c", MAXRSS_LAUNCHER, str(rss_file),
             *cli_argv(repo_dir, SH, "-c", script)],
            stdout=out, stderr=err, env=cli_env(state),
        )  # fmt: skip
        proc.wait()
        elapsed = time.monotonic() - start
        out.seek(0)
        printed = out.read()
    maxrss_kib = int(rss_file.read_text())
    obj = parse_envelope(printed.decode(), proc.returncode)
    assert obj["exit_code"] == 0 and obj["timed_out"] is False, obj
    assert obj["stdout_bytes"] == total
    assert len(obj["stdout"]) <= 20_000
    assert obj["stdout"].startswith("0123456789abcdef\n")
    assert len(printed) <= 64_000
    # ru_maxrss is in KiB on Linux: the oms process (and bwrap) stayed under 200 MB.
    assert maxrss_kib * 1024 < 200 * 1024 * 1024, f"peak RSS {maxrss_kib} KiB"
    assert elapsed < 30
