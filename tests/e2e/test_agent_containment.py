"""Containment of the agent profile (`sandbox.agent`): real bwrap, real seccomp, real ptys.

Host-side bait (a fake HOME with ~/.ssh, an $OMS_HOME, a repository, a process, a
socket) is world-readable in a world-traversable directory, so that only the profile's
namespaces and binds hide it. Every command inside prints a start and an end marker,
asserted, so that a refusal to run never counts as containment. Commands inside use
/bin/sh and Debian's /usr/bin/python3; nothing contacts any address but loopback.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.sandbox import AS_ROOT, NEEDS_BWRAP_AND_PYTHON, PY, SH, traversable_dir

import gatekeeper
from sandbox import ProfileError, SandboxUnavailable, cgroup, find_bwrap
from sandbox import agent as ag
from sandbox.agent import (
    HOME,
    AgentLimits,
    AgentProfile,
    agent_profile,
    host_secret_paths,
    oms_install_paths,
)
from sandbox.agent_probe import AgentProbe, probe_agent, probe_and_run
from sandbox.agent_runner import AgentResult, run_agent
from sandbox.runner import SANDBOX_HOST_UID

pytestmark = NEEDS_BWRAP_AND_PYTHON
LIMITS = AgentLimits(wall_s=30, memory_mb=1024, max_procs=256, tmpfs_mb=64, output_bytes=1 << 16)
ENV = {"PATH": "/usr/bin:/bin", "HOME": HOME, "LANG": "C.UTF-8"}
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Box:
    base: Path
    home: Path  # a fake host HOME with ~/.ssh planted
    oms_home: Path
    repo: Path
    workspace: Path
    run_dir: Path

    def env(self) -> dict[str, str]:
        return {"HOME": str(self.home)}


@pytest.fixture
def box() -> Iterator[Box]:
    with traversable_dir("oms-agent-box-") as base:
        home, oms_home, repo = base / "home", base / "oms-home", base / "repo"
        for d in (home / ".ssh", oms_home / "keys", repo / ".git", base / "ws"):
            d.mkdir(parents=True, mode=0o755)
        (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
        (oms_home / "keys" / "signing.key").write_text("SIGNING KEY\n")
        run_dir = base / "run"
        (run_dir / "oms").mkdir(parents=True)
        (run_dir / "home" / ".claude").mkdir(parents=True)
        (run_dir / "oms" / "run.json").write_text('{"run_id": "t"}')
        yield Box(base, home, oms_home, repo, base / "ws", run_dir)


def profile(box: Box, ro: list[str] | None = None, limits: AgentLimits = LIMITS) -> AgentProfile:
    return agent_profile(limits, ro or [], ENV, [box.oms_home, box.repo], box.env())


def run(box: Box, cmd: list[str], prof: AgentProfile | None = None) -> AgentResult:
    return run_agent(prof or profile(box), find_bwrap(), workspace=box.workspace,
                     run_dir=box.run_dir, cmd=cmd, mode="capture")  # fmt: skip


def ran(result: AgentResult) -> str:
    """stdout of a run that really ran to its end (guards against vacuous passes)."""
    assert result.stdout is not None and result.timed_out is False, result
    out = result.stdout.kept.decode()
    assert "@start" in out and "@end" in out, (out, result.stderr)
    return out


def sh(box: Box, script: str, prof: AgentProfile | None = None) -> str:
    return ran(run(box, [SH, "-c", f"echo @start; {script}; echo @end"], prof))


def py(box: Box, code: str, prof: AgentProfile | None = None) -> str:
    return ran(run(box, [PY, "-I", "-c", f"print('@start')\n{code}\nprint('@end')"], prof))


# ---------------------------------------------------------------- files ---


def test_agent_cannot_see_home_ssh_oms_home_or_the_repository(box: Box) -> None:
    paths = [box.home / ".ssh" / "id_ed25519", box.home, box.oms_home, box.repo, box.run_dir]
    out = sh(box, " ".join(f"test -e {p} && echo VISIBLE {p};" for p in paths) + " true")
    assert "VISIBLE" not in out
    assert all(p.exists() for p in paths)  # control: the bait is there on the host


def test_writes_outside_workspace_tmp_and_home_fail(box: Box) -> None:
    targets = ["/x", "/usr/x", "/etc/x", "/run/oms/x", "/home/x", "/var/x", "/dev/x"]
    writes = " ".join(f"(: > {t}) 2>/dev/null && echo WROTE {t};" for t in targets)
    ok = "for d in /workspace /tmp /home/agent /home/agent/.claude; do : > $d/f && echo ok $d; done"
    out = sh(box, f"{writes} {ok}")
    assert "WROTE" not in out
    assert out.count("ok /") == 4
    assert (box.workspace / "f").exists() and (box.run_dir / "home" / ".claude" / "f").exists()


def test_run_oms_is_read_only_and_its_socket_accepts_the_agent(box: Box) -> None:
    path = box.run_dir / "oms" / "broker.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = srv.accept()
        got.append(conn.recv(16))
        conn.sendall(b"pong")
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        out = py(
            box,
            """
import json, socket
print("marker", json.load(open("/run/oms/run.json"))["run_id"])
try:
    open("/run/oms/run.json", "w")
except OSError as e:
    print("write", e.errno)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("/run/oms/broker.sock"); s.sendall(b"ping"); print("reply", s.recv(16).decode())
""",
        )
    finally:
        t.join(10)
        srv.close()
    assert "marker t" in out and "write 30" in out  # EROFS
    assert "reply pong" in out and got == [b"ping"]


def test_no_descriptor_but_stdio_reaches_the_agent(box: Box) -> None:
    out = py(box, "import os; print('fds', sorted(int(f) for f in os.listdir('/proc/self/fd')))")
    assert "fds [0, 1, 2, 3]" in out  # 3: the listdir's own


def test_bwraps_command_line_inside_names_no_host_path(box: Box) -> None:
    out = sh(box, "tr '\\0' ' ' < /proc/1/cmdline; echo")
    assert "/usr/bin/bwrap --args " in out
    assert str(box.base) not in out  # workspace, run_dir: host paths stay outside


def test_environment_is_exactly_the_profile_env(box: Box) -> None:
    out = sh(box, "tr '\\0' '\\n' < /proc/$$/environ | sort")
    lines = out.splitlines()
    body = lines[lines.index("@start") + 1 : lines.index("@end")]
    assert body == sorted([*(f"{k}={v}" for k, v in ENV.items()), "PWD=/workspace"])


# ---------------------------------------------------- processes, network ---


def test_host_processes_are_invisible(box: Box) -> None:
    uid = SANDBOX_HOST_UID if AS_ROOT else None
    sleeper = subprocess.Popen(["sleep", "300"], user=uid, group=uid)
    try:
        each = "echo pid ${d#/proc/} $(tr '\\0' ' ' < $d/cmdline)"
        out = sh(box, f"for d in /proc/[0-9]*; do {each}; done")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert "sleep 300" not in out
    assert f"pid {sleeper.pid} " not in out
    assert "pid 1 /usr/bin/bwrap " in out


def test_only_loopback_and_no_route(box: Box) -> None:
    out = py(
        box,
        """
import socket
print("ifaces", [n for _, n in socket.if_nameindex()])
print("routes", open("/proc/net/route").read().splitlines()[1:])
v6 = open("/proc/net/ipv6_route").read().splitlines()
print("routes6", [ln for ln in v6 if not ln.endswith("lo")])
""",
    )
    assert "ifaces ['lo']" in out and "routes []" in out and "routes6 []" in out


# ------------------------------------------------------ seccomp, userns ---

_SYSCALLS = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def err(*args):
    r = libc.syscall(*args)
    return 0 if r >= 0 else ctypes.get_errno()
buf = ctypes.create_string_buffer(8)
class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
iov = Iov(ctypes.cast(buf, ctypes.c_void_p), 8)
print(json.dumps({
    "ptrace": err(101, 0, 0, 0, 0),  # PTRACE_TRACEME: succeeds without the filter
    "process_vm_readv": err(310, os.getpid(), ctypes.byref(iov), 1, ctypes.byref(iov), 1, 0),
    "keyctl": err(250, 0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "add_key": err(248, b"user", b"k", b"v", 1, -3),
    "bpf": err(321, 0, 0, 0),
    "perf_event_open": err(298, 0, 0, -1, -1, 0),
    "io_uring_setup": err(425, 1, 0),  # EFAULT without the filter
    "userfaultfd": err(323, 0),
    "tiocsti": err(16, 0, 0x5412, buf),  # ENOTTY without the filter (stdin is /dev/null)
    "tiocsti_high_bits": err(16, 0, 0x1_0000_5412, buf),
    "tioclinux": err(16, 0, 0x541C, buf),
}))
"""


def test_seccomp_denies_ptrace_keyrings_bpf_io_uring_and_tiocsti_with_eperm(box: Box) -> None:
    out = py(box, _SYSCALLS)
    result = json.loads(next(ln for ln in out.splitlines() if ln.startswith("{")))
    assert result == dict.fromkeys(result, 1), result  # every one EPERM


def test_seccomp_control_the_same_calls_differ_outside(box: Box) -> None:
    """Without the filter, TRACEME and TIOCSTI give other answers: the test above is not
    vacuous (keyctl, bpf, io_uring may be refused by a container's own seccomp)."""
    proc = subprocess.run([PY, "-I", "-c", _SYSCALLS], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, check=True)  # fmt: skip
    result = json.loads(proc.stdout)
    assert result["ptrace"] == 0 and result["tiocsti"] == 25


def test_new_user_namespaces_fail_inside(box: Box) -> None:
    out = sh(box, "unshare -U true 2>/dev/null; echo rc=$?; grep Seccomp: /proc/self/status")
    assert "rc=0" not in out and "rc=" in out
    assert "Seccomp:\t2" in out


# ------------------------------------------------------------------ probe ---


def hidden(box: Box) -> list[str]:
    return [*host_secret_paths(box.env()), str(box.oms_home), str(box.repo)]


def test_probe_holds_for_the_profile_and_hashes_mounts_and_namespaces(box: Box) -> None:
    result = probe_agent(profile(box), find_bwrap(), workspace=box.workspace,
                         run_dir=box.run_dir, hidden=hidden(box))  # fmt: skip
    assert result.ok, result.failures
    assert result.mountinfo_digest.startswith("sha256:")
    assert result.namespaces_digest.startswith("sha256:")


def test_probe_flags_a_hidden_path_bound_in(box: Box) -> None:
    exposed = agent_profile(LIMITS, [str(box.repo)], ENV, [box.oms_home], box.env())
    result = probe_agent(exposed, find_bwrap(), workspace=box.workspace,
                         run_dir=box.run_dir, hidden=hidden(box))  # fmt: skip
    assert not result.ok
    assert f"host path {box.repo} is visible" in result.failures


def test_probe_flags_a_writable_run_oms(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    real = ag.build_agent_argv

    def rw_run_oms(*args: object, **kw: object) -> list[str]:
        argv = real(*args, **kw)  # type: ignore[arg-type]
        i = argv.index(ag.RUN_DIR)
        argv[i - 2] = "--bind"
        return argv

    monkeypatch.setattr("sandbox.agent_runner.build_agent_argv", rw_run_oms)
    result = probe_agent(profile(box), find_bwrap(), workspace=box.workspace,
                         run_dir=box.run_dir, hidden=hidden(box))  # fmt: skip
    assert not result.ok
    assert any("/run/oms is not a read-only directory" in f for f in result.failures)


class Refused(Exception):
    """What the tests' `on_probed` raises to refuse a probe."""


def probed_run(box: Box, script: str, verdict: Callable[[AgentProbe], bool],
               seen: list[AgentProbe]) -> AgentResult:  # fmt: skip
    """`script` behind the probe in one sandbox: handed over only if `verdict` says so."""

    def on_probed(probed: AgentProbe) -> None:
        seen.append(probed)
        if not verdict(probed):
            raise Refused

    return probe_and_run(profile(box), find_bwrap(), workspace=box.workspace,
                         run_dir=box.run_dir, hidden=hidden(box), mode="capture",
                         cmd=[SH, "-c", f"echo @start > started; echo @start; {script}; echo @end"],
                         on_probed=on_probed)  # fmt: skip


def test_the_probe_hands_over_to_the_command_in_the_same_sandbox(box: Box) -> None:
    seen: list[AgentProbe] = []
    ran(probed_run(box, "cat /proc/self/mountinfo | wc -l", lambda p: p.ok, seen))
    assert len(seen) == 1 and seen[0].ok, seen
    assert seen[0].mountinfo_digest.startswith("sha256:")
    assert (box.workspace / "started").read_text() == "@start\n"
    assert ".oms-probe" not in " ".join(os.listdir(box.workspace))


def test_a_refused_probe_never_starts_the_command(box: Box) -> None:
    """The check outside refuses (here: whatever the probe says): no start marker, ever."""
    seen: list[AgentProbe] = []
    with pytest.raises(Refused):
        probed_run(box, "echo ran > ran", lambda _p: False, seen)
    assert len(seen) == 1 and seen[0].ok  # the probe itself held: only the refusal stopped it
    assert not (box.workspace / "started").exists() and not (box.workspace / "ran").exists()


def test_a_probe_that_fails_is_refused_before_the_command(box: Box) -> None:
    exposed = agent_profile(LIMITS, [str(box.repo)], ENV, [box.oms_home], box.env())
    seen: list[AgentProbe] = []

    def on_probed(probed: AgentProbe) -> None:
        seen.append(probed)
        if not probed.ok:
            raise Refused

    with pytest.raises(Refused):
        probe_and_run(exposed, find_bwrap(), workspace=box.workspace, run_dir=box.run_dir,
                      hidden=hidden(box), mode="capture", on_probed=on_probed,
                      cmd=[SH, "-c", "echo @start > started"])  # fmt: skip
    assert f"host path {box.repo} is visible" in seen[0].failures
    assert not (box.workspace / "started").exists()


def test_a_report_cut_short_is_refused_and_the_command_never_starts(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe whose report ends before its wait point (here: its script cut after the
    network section, then exiting) fails closed: the check says so, nothing else runs."""
    import sandbox.agent_probe as ap

    cut = ap._SCRIPT.index('echo "@route"')
    monkeypatch.setattr(ap, "_SCRIPT", ap._SCRIPT[:cut] + "} >/proc/self/fd/$report\nexit 0\n")
    seen: list[AgentProbe] = []
    with pytest.raises(Refused):
        probed_run(box, "true", lambda p: p.ok, seen)
    assert not seen[0].ok and "the probe did not reach its wait point" in seen[0].failures
    assert not (box.workspace / "started").exists()


def test_behind_the_probe_no_descriptor_but_stdio_reaches_the_agent(box: Box) -> None:
    """The probe's control fds stop at the relay (the command `oms agent run` starts)."""
    relay = str(Path(gatekeeper.__file__).resolve().parent / "agent" / "relay.py")
    listing = "import os; print('fds', sorted(int(f) for f in os.listdir('/proc/self/fd')))"
    result = probe_and_run(profile(box, oms_install_paths()), find_bwrap(), workspace=box.workspace,
                           run_dir=box.run_dir, hidden=hidden(box), mode="capture",
                           on_probed=lambda p: None,
                           cmd=[PY, "-I", relay, "--", PY, "-I", "-c",
                                f"print('@start')\n{listing}\nprint('@end')"])  # fmt: skip
    assert "fds [0, 1, 2, 3]" in ran(result)  # 3: the listdir's own


# ------------------------------------------------------- modes and limits ---


def test_exit_codes_pass_through(box: Box) -> None:
    result = run(box, [SH, "-c", "echo @start; echo @end; exit 42"])
    ran(result)
    assert result.exit_code == 42 and result.signal is None


def test_pipes_mode_inherits_our_stdio_and_passes_the_exit_code(box: Box) -> None:
    code = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
from pathlib import Path
from sandbox import find_bwrap
from sandbox.agent import AgentLimits, agent_profile
from sandbox.agent_runner import run_agent
prof = agent_profile(AgentLimits(30, 1024, 256, 64, 4096), [], {ENV!r}, [], {{}})
r = run_agent(prof, find_bwrap(), workspace=Path({str(box.workspace)!r}),
              run_dir=Path({str(box.run_dir)!r}), mode="pipes",
              cmd=["/bin/sh", "-c", "read x; echo got:$x; exit 3"])
print("exit", r.exit_code, r.stdout)
"""
    proc = subprocess.run([sys.executable, "-c", code], input="hello\n", capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert "got:hello" in proc.stdout and "exit 3 None" in proc.stdout, proc.stderr


def test_output_mode_shows_the_agents_output_but_never_gives_it_our_stdin(box: Box) -> None:
    """A worker pane's `codex exec`: what is typed at the pane never reaches the agent."""
    code = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
from pathlib import Path
from sandbox import find_bwrap
from sandbox.agent import AgentLimits, agent_profile
from sandbox.agent_runner import run_agent
prof = agent_profile(AgentLimits(30, 1024, 256, 64, 4096), [], {ENV!r}, [], {{}})
r = run_agent(prof, find_bwrap(), workspace=Path({str(box.workspace)!r}),
              run_dir=Path({str(box.run_dir)!r}), mode="output",
              cmd=["/bin/sh", "-c", "echo @start; read x; echo got:$x:; echo @end; exit 3"])
print("exit", r.exit_code, r.stdout)
"""
    proc = subprocess.run([sys.executable, "-c", code], input="typed at the pane\n",
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert "@start" in proc.stdout and "@end" in proc.stdout, proc.stderr
    assert "got::" in proc.stdout and "typed" not in proc.stdout
    assert "exit 3 None" in proc.stdout


def test_capture_mode_bounds_output(box: Box) -> None:
    small = AgentLimits(wall_s=30, memory_mb=1024, max_procs=256, tmpfs_mb=64, output_bytes=4096)
    result = run(box, [SH, "-c", "echo @start; head -c 200000 /dev/zero; echo @end"],
                 profile(box, limits=small))  # fmt: skip
    assert result.stdout is not None and result.exit_code == 0
    assert result.stdout.total == len("@start\n@end\n") + 200000
    assert len(result.stdout.kept) == 4096 and result.stdout.dropped > 0
    assert result.stdout.tail.endswith(b"@end\n")


def test_wall_limit_kills_the_agent(box: Box) -> None:
    short = AgentLimits(wall_s=1, memory_mb=1024, max_procs=256, tmpfs_mb=64, output_bytes=4096)
    result = run(box, [SH, "-c", "echo @start; sleep 60; echo @end"], profile(box, limits=short))
    assert result.timed_out and result.exit_code is None
    assert result.stdout is not None and b"@start" in result.stdout.kept
    assert b"@end" not in result.stdout.kept


def test_a_command_bwrap_cannot_start_is_unavailable(box: Box) -> None:
    with pytest.raises(SandboxUnavailable, match="could not start /nonexistent"):
        run(box, ["/nonexistent"])


def test_stdin_in_capture_mode_is_dev_null_read_only(box: Box) -> None:
    out = sh(box, "readlink /proc/self/fd/0; (echo x >&0) 2>/dev/null && echo WROTE-STDIN")
    assert "/dev/null" in out and "WROTE-STDIN" not in out


@pytest.mark.skipif(not AS_ROOT, reason="staging is what root needs for paths others cannot reach")
def test_as_root_a_read_only_path_below_a_private_dir_is_bound(box: Box) -> None:
    private = box.base / "private"
    tool = private / "tool"
    tool.mkdir(parents=True)
    os.chmod(private, 0o700)
    (tool / "hello.txt").write_text("hello from the tool\n")
    out = sh(box, f"cat {tool}/hello.txt; ls -a {private}; id -u",
             agent_profile(LIMITS, [str(tool)], ENV, [], box.env()))  # fmt: skip
    assert "hello from the tool" in out
    assert out.split("@start\n")[1].split("\n")[1:4] == [".", "..", "tool"]
    assert not any(p.name == "ro" for p in box.base.iterdir())  # staged in run_dir only


# -------------------------------------------------------------------- pty ---


_PTY_CHILD = """
import sys, termios
sys.path.insert(0, {root!r})
from pathlib import Path
from sandbox import SandboxUnavailable, find_bwrap
from sandbox.agent import AgentLimits, agent_profile
from sandbox.agent_probe import probe_and_run
from sandbox.agent_runner import run_agent
prof = agent_profile(AgentLimits(30, 1024, 256, 64, 4096), [], {env!r}, [], {{}})
before = termios.tcgetattr(0)
def held(probed):
    if not probed.ok:
        raise SandboxUnavailable("probe: " + "; ".join(probed.failures))
try:
    r = (probe_and_run(prof, find_bwrap(), workspace=Path({ws!r}), run_dir=Path({rd!r}),
                       hidden=[], cmd=["/bin/sh", "-c", {script!r}], mode="pty",
                       on_probed=held)
         if {probed!r} else
         run_agent(prof, find_bwrap(), workspace=Path({ws!r}), run_dir=Path({rd!r}),
                   cmd=["/bin/sh", "-c", {script!r}], mode="pty"))
    print("EXIT", r.exit_code, r.stdout, end=" ")
except SandboxUnavailable as exc:
    print("STOPPED", exc, end=" ")
print("RESTORED", termios.tcgetattr(0) == before)
"""


def in_pty(box: Box, script: str, when_ready: Callable[[int, int], None],
           probed: bool = False) -> tuple[str, int]:  # fmt: skip
    """Run the agent in pty mode from a fresh interpreter whose terminal is a real pty of
    37x101 (behind the probe if `probed`); `when_ready(master, pid)` once the agent printed
    READY. (output, exit status)"""
    code = _PTY_CHILD.format(root=str(REPO_ROOT), env=ENV, ws=str(box.workspace),
                             rd=str(box.run_dir), script=script, probed=probed)  # fmt: skip
    pid, master = pty.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-c", code])
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 37, 101, 0, 0))
    out, ready = b"", False
    try:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child and everything on its terminal are gone
                break
            if not chunk:
                break
            out += chunk
            if b"READY" in out and not ready:
                ready = True
                when_ready(master, pid)
    finally:
        os.close(master)
        _, status = os.waitpid(pid, 0)
    return out.decode(errors="replace"), os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("probed", [False, True], ids=["bare", "behind-the-probe"])
def test_pty_mode_gives_a_tty_of_our_window_size_and_relays_both_ways(
    box: Box, probed: bool
) -> None:
    """Under a real pty: the agent's stdin is a tty of our size, a resize reaches it
    (SIGWINCH), input and output are relayed, and our terminal is restored afterwards;
    the same behind the probe (`oms agent run`'s way), which takes none of the input."""
    script = "echo @start; test -t 0 && echo TTY; stty size; echo READY; read x; stty size"
    script += "; echo got:$x; echo @end"

    def resize_and_type(master: int, pid: int) -> None:
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 120, 0, 0))
        os.write(master, b"hello\r")

    text, status = in_pty(box, script, resize_and_type, probed)
    assert "@start" in text and "@end" in text, text
    assert "TTY" in text and "37 101" in text and "50 120" in text and "got:hello" in text
    assert "EXIT 0 None RESTORED True" in text and status == 0


def test_pty_mode_restores_our_terminal_when_oms_gets_sigterm(box: Box) -> None:
    text, status = in_pty(box, "echo @start; echo READY; sleep 60; echo @end",
                          lambda master, pid: os.kill(pid, signal.SIGTERM))  # fmt: skip
    assert "@start" in text and "@end" not in text, text
    assert "STOPPED oms got signal 15" in text and "RESTORED True" in text, text
    assert status == 0


@pytest.mark.skipif(os.isatty(0) and os.isatty(1), reason="run with a terminal on stdio")
def test_pty_mode_refuses_without_a_terminal(box: Box) -> None:
    """pty mode under pytest's captured stdio: no terminal, so nothing starts."""
    with pytest.raises(ProfileError, match="needs a terminal"):
        run_agent(profile(box), find_bwrap(), workspace=box.workspace, run_dir=box.run_dir,
                  cmd=[SH, "-c", "true"], mode="pty")  # fmt: skip


@pytest.mark.skipif(cgroup.support().kind is None, reason="no memory cgroup can be had here")
def test_memory_is_capped_by_the_runs_cgroup_not_rlimit_as(box: Box) -> None:
    small = AgentLimits(wall_s=30, memory_mb=256, max_procs=256, tmpfs_mb=16, output_bytes=4096)
    code = "x = bytearray({} * 1024 * 1024); print('allocated')"
    script = f'{PY} -c "{code.format(64)}"; {PY} -c "{code.format(600)}"; echo rc=$?'
    out = sh(box, script, profile(box, limits=small))
    assert out.count("allocated") == 1 and "rc=137" in out  # 64 MB fine, 600 MB killed
    limits = sh(box, "grep 'Max address space' /proc/self/limits")
    assert "unlimited" in limits  # V8 and codex reserve far more address space than they use


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the x32 ABI exists on x86_64 only")
def test_x32_syscalls_cannot_slip_past_the_filter(box: Box) -> None:
    """An x32 syscall number (bit 30 set) would dodge rules written for x86_64 numbers:
    the filter kills the process instead (SIGSYS); outside, the same call just returns."""
    code = "import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39); print('survived')"
    out = sh(box, f'{PY} -c "{code}"; echo rc=$?')
    assert "survived" not in out and "rc=159" in out  # 128 + SIGSYS
    outside = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=False)
    assert "survived" in outside.stdout


def test_oms_own_installation_runs_inside_and_the_probe_holds_with_it(box: Box) -> None:
    """The venv, the interpreter's real prefix (a pyenv under /root here, staged as root)
    and the source dir: oms' packages import inside with `python -I`."""
    prof = agent_profile(LIMITS, oms_install_paths(), ENV, [box.oms_home, box.repo], box.env())
    src = str(REPO_ROOT)
    code = (
        f"import sys; sys.path.insert(0, {src!r}); print('@start')\n"
        "import gatekeeper, sandbox, evidence, policy, pydantic, rfc8785\n"
        "print('imported', gatekeeper.__file__); print('@end')"
    )
    out = ran(run(box, [sys.executable, "-I", "-c", code], prof))
    assert f"imported {src}/gatekeeper/__init__.py" in out
    result = probe_agent(prof, find_bwrap(), workspace=box.workspace, run_dir=box.run_dir,
                         hidden=hidden(box))  # fmt: skip
    assert result.ok, result.failures
