"""Running the agent in its profile: a relayed pty, inherited pipes, or bounded capture.

`pty` (stdin and stdout are terminals): the agent gets a fresh pty as its controlling
terminal; our terminal is put in raw mode (restored on every way out) and bytes are
relayed both ways as script(1) does, window size included (SIGWINCH). TIOCSTI inside
is denied by seccomp and could only reach the agent's own pty anyway. `pipes`:
`--new-session`, our stdin/stdout/stderr inherited. `output`: as `pipes`, but stdin /dev/null
(a CLI that reads a non-terminal stdin gets nothing, and nobody's keys reach it: a worker
pane that only shows the agent's output). `capture`: `--new-session`, stdin /dev/null opened
read-only, stdout/stderr captured as `oms sandbox run` does.

Limits: the wall deadline kills bwrap's process group (and with it the pid namespace);
RLIMIT_NPROC/NOFILE/CORE; no RLIMIT_AS (V8 and the codex binary reserve huge virtual
memory): memory is capped by the run's cgroup where one can be had. No `exit-code`
document on bwrap's status descriptor means the command never ran: SandboxUnavailable.
"""

from __future__ import annotations

import fcntl
import os
import resource
import signal
import subprocess
import termios
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from . import cgroup, seccomp, staging
from .agent import AgentProfile, build_agent_argv, prepare_run_dir
from .agent_pty import HungUp, Terminal, install_handlers, relay
from .bwrap import Bwrap
from .errors import ProfileError, SandboxUnavailable
from .runner import (
    SANDBOX_HOST_UID,
    Capture,
    StatusPipe,
    Stream,
    open_ro_paths,
    pump,
    start_failure,
    stop,
)

Mode = Literal["pty", "pipes", "output", "capture"]
StdIO = int | IO[bytes] | None


@dataclass(frozen=True)
class AgentResult:
    exit_code: int | None  # CMD's own status; None when killed at the deadline
    signal: int | None
    timed_out: bool
    duration_s: float
    stdout: Stream | None  # only in capture mode
    stderr: Stream | None


@dataclass(frozen=True)
class Launched:
    """A started agent sandbox: the bwrap process, its status pipe and --info-fd reader."""

    proc: subprocess.Popen[bytes]
    status: StatusPipe
    info_fd: int | None
    cmd0: str


# Called once the sandbox started, before CMD may run (see `run_agent`).
Gate = Callable[[Launched, float], None]


def _child_setup(
    profile: AgentProfile,
    cg: cgroup.RunCgroup | None,
    ctty: bool,
    stages: Sequence[staging.Stage],
) -> Callable[[], None]:
    lim = profile.limits
    values = [
        (resource.RLIMIT_NPROC, lim.max_procs),
        (resource.RLIMIT_NOFILE, lim.open_files),
        (resource.RLIMIT_CORE, 0),
    ]
    as_root = os.geteuid() == 0
    uid = SANDBOX_HOST_UID

    def apply() -> None:  # runs in the child between fork and exec: syscalls only
        if cg is not None:
            cg.join()  # before exec, so that every process bwrap starts is inside
        for which, value in values:
            resource.setrlimit(which, (value, value))
        if stages:
            staging.mount_stages(stages)
        if as_root:  # here, not Popen(user=): the stages need root first
            staging.drop_to(uid)
        if ctty:  # after setsid: the pty on fd 0 becomes the controlling terminal
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    return apply


def _spawn(
    argv: list[str],
    stdio: tuple[StdIO, StdIO, StdIO],
    profile: AgentProfile,
    fds: Sequence[int],
    setup: Callable[[], None],
) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            argv, stdin=stdio[0], stdout=stdio[1], stderr=stdio[2],
            env=dict(profile.env),  # bwrap's own environ is visible as /proc/1/environ
            close_fds=True, pass_fds=fds, start_new_session=True, preexec_fn=setup,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"cannot start bwrap: {exc}") from None


def _options_by_fd(argv: list[str]) -> tuple[list[str], int]:
    """bwrap's options go by `--args FD` (a memfd): inside, /proc/1/cmdline (bwrap is pid
    1 there) then shows only `bwrap --args N -- CMD…`, not the host paths of every bind."""
    cut = argv.index("--")
    data = b"".join(os.fsencode(a) + b"\0" for a in argv[1:cut])
    try:
        fd = os.memfd_create("oms-bwrap-args", os.MFD_CLOEXEC)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError as exc:
        raise SandboxUnavailable(f"cannot pass bwrap its options: {exc.strerror}") from None
    return [argv[0], "--args", str(fd), *argv[cut:]], fd


@contextmanager
def launch(
    profile: AgentProfile,
    bw: Bwrap,
    *,
    workspace: Path,
    run_dir: Path,
    cmd: Sequence[str],
    stdio: tuple[StdIO, StdIO, StdIO],
    new_session: bool = True,
    pass_fds: Sequence[int] = (),
    want_info: bool = False,
) -> Iterator[Launched]:
    """Start `cmd` in the agent profile; on leaving, kill what is left and clean up.

    As root, bwrap runs as the sandbox uid (SANDBOX_HOST_UID), inside uid 1000."""
    try:
        prepare_run_dir(run_dir, workspace)
    except OSError as exc:
        raise SandboxUnavailable(f"cannot prepare the run directory {run_dir}: {exc}") from None
    ro_fds = open_ro_paths(profile.ro_paths)
    status = StatusPipe()
    opened = list(ro_fds)
    info_r = info_w = None
    cg = None
    try:
        bind_fds, stages = staging.stage_ro_paths(run_dir, profile.ro_paths, ro_fds, opened)
        workspace, ws_stage = staging.stage_dir(run_dir, workspace, "ws", opened)
        stages += ws_stage
        sfd = seccomp.filter_fd()
        opened.append(sfd)
        if want_info:
            info_r, info_w = os.pipe()
            opened += [info_r, info_w]
        argv = build_agent_argv(profile, bw, workspace=workspace, run_dir=run_dir, cmd=cmd,
                                seccomp_fd=sfd, ro_fds=bind_fds, status_fd=status.write_fd,
                                info_fd=info_w, new_session=new_session)  # fmt: skip
        argv, afd = _options_by_fd(argv)
        opened.append(afd)
        cg = cgroup.create(profile.limits)
        fds = {*pass_fds, *ro_fds, *bind_fds, sfd, afd, status.write_fd}
        fds |= {info_w} if info_w is not None else set()
        setup = _child_setup(profile, cg, not new_session, stages)
        proc = _spawn(argv, stdio, profile, sorted(fds), setup)
        status.started()  # only bwrap holds the write end now
        if info_w is not None:
            os.close(info_w)
            opened.remove(info_w)
        try:
            yield Launched(proc, status, info_r, cmd[0])
        finally:
            stop(proc)
    finally:
        for fd in opened:
            os.close(fd)
        status.close()
        if cg is not None:
            cgroup.destroy(cg)


def outcome(
    run: Launched, timed_out: bool, started: float, err: Stream | None = None
) -> tuple[int | None, int | None, float]:
    """(exit_code, signal, duration) of a finished run; SandboxUnavailable if CMD never ran.

    Called inside `launch` (the status pipe is still open); reaps bwrap first."""
    stop(run.proc)
    code = run.proc.returncode
    duration = round(time.monotonic() - started, 3)
    docs = run.status.documents()
    exits = [d["exit-code"] for d in docs if isinstance(d.get("exit-code"), int)]
    if not timed_out and code >= 0 and not exits:
        if err is not None:
            raise start_failure(run.cmd0, err)
        raise SandboxUnavailable(f"the sandbox could not start {run.cmd0} (bwrap exit {code})")
    sig = -code if code < 0 else None
    if timed_out:
        return None, sig, duration
    if sig is not None:
        return 128 + sig, sig, duration
    own = exits[-1]
    assert isinstance(own, int)
    return own, None, duration


def run_agent(
    profile: AgentProfile,
    bw: Bwrap,
    *,
    workspace: Path,
    run_dir: Path,
    cmd: Sequence[str],
    mode: Mode,
    pass_fds: Sequence[int] = (),
    stdin: bytes | None = None,
    on_spawn: Callable[[int], None] | None = None,
    gate: Gate | None = None,
) -> AgentResult:
    """Run CMD in the agent profile on `workspace`, in `run_dir` (see `agent.py`).

    `stdin` (capture mode only): the bytes CMD reads on its standard input, from a sealed
    memfd, so the agent can neither change them nor learn a host path. SandboxUnavailable
    if bwrap cannot start CMD; CMD's own failure is in the result. `on_spawn` (pty and pipes
    modes) is given bwrap's pid, which is its process group's id too (its own session).
    `gate` (`agent_probe.probe_and_run`'s) is called once bwrap started, before anything
    else, with the started sandbox (its --info-fd read end open) and the start time; what
    it raises stops the sandbox and raises here.
    """
    started = time.monotonic()
    deadline = started + profile.limits.wall_s
    if mode == "pty":
        return _run_pty(profile, bw, workspace, run_dir, cmd, pass_fds, started, on_spawn, gate)
    if mode in ("pipes", "output"):
        null = _stdin_fd(None) if mode == "output" else None
        try:
            with launch(profile, bw, workspace=workspace, run_dir=run_dir, cmd=cmd,
                        stdio=(null, None, None), pass_fds=pass_fds,
                        want_info=gate is not None) as r:  # fmt: skip
                if gate is not None:
                    gate(r, started)
                if on_spawn is not None:
                    on_spawn(r.proc.pid)
                timed_out = _wait(r.proc, deadline)
                code, sig, duration = outcome(r, timed_out, started)
        finally:
            if null is not None:
                os.close(null)
        return AgentResult(code, sig, timed_out, duration, None, None)
    if mode != "capture":
        raise ProfileError(f"unknown agent run mode {mode!r}")
    cap = profile.limits.output_bytes
    out, err = Capture(cap), Capture(cap)
    null = _stdin_fd(stdin)
    try:
        pipe = subprocess.PIPE
        with launch(profile, bw, workspace=workspace, run_dir=run_dir, cmd=cmd,
                    stdio=(null, pipe, pipe), pass_fds=pass_fds,
                    want_info=gate is not None) as r:  # fmt: skip
            if gate is not None:
                gate(r, started)
            timed_out = pump(r.proc, out, err, deadline)
            code, sig, duration = outcome(r, timed_out, started, err.result())
    finally:
        os.close(null)
    return AgentResult(code, sig, timed_out, duration, out.result(), err.result())


def _stdin_fd(data: bytes | None) -> int:
    """/dev/null read-only, or a sealed memfd holding `data` at offset 0."""
    if data is None:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)  # read-only: nothing writes
    try:
        fd = os.memfd_create("oms-agent-stdin", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as exc:
        raise SandboxUnavailable(f"cannot hold the agent's input: {exc.strerror}") from None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError as exc:
        os.close(fd)
        raise SandboxUnavailable(f"cannot hold the agent's input: {exc.strerror}") from None
    return fd


def _wait(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait for bwrap until the deadline: True if the deadline came first."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return True
    return False


def _run_pty(
    profile: AgentProfile,
    bw: Bwrap,
    workspace: Path,
    run_dir: Path,
    cmd: Sequence[str],
    pass_fds: Sequence[int],
    started: float,
    on_spawn: Callable[[int], None] | None = None,
    gate: Gate | None = None,
) -> AgentResult:
    deadline = started + profile.limits.wall_s
    term = Terminal()
    handlers = install_handlers(term)
    try:
        stdio = (term.slave, term.slave, term.slave)
        with launch(profile, bw, workspace=workspace, run_dir=run_dir, cmd=cmd, stdio=stdio,
                    new_session=False, pass_fds=pass_fds,
                    want_info=gate is not None) as r:  # fmt: skip
            if gate is not None:
                gate(r, started)
            if on_spawn is not None:
                on_spawn(r.proc.pid)
            term.close_slave()  # the master reads EIO once every process inside is gone
            term.raw()
            timed_out = relay(term, deadline) or _wait(r.proc, deadline)
            code, sig, duration = outcome(r, timed_out, started)
    except HungUp as exc:
        raise SandboxUnavailable(f"oms got signal {exc.args[0]}; the agent was stopped") from None
    finally:
        term.close()  # our terminal back as it was, on every way out
        for signum, old in handlers.items():
            signal.signal(signum, old)
    return AgentResult(code, sig, timed_out, duration, None, None)
