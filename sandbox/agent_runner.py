"""Running the agent in its profile: a relayed pty, inherited pipes, or bounded capture.

`pty` (stdin and stdout are terminals): the agent gets a fresh pty as its controlling
terminal; our terminal is put in raw mode (restored on every way out) and bytes are
relayed both ways as script(1) does, window size included (SIGWINCH). TIOCSTI inside
is denied by seccomp and could only reach the agent's own pty anyway. `pipes`:
`--new-session`, our stdin/stdout/stderr inherited. `capture`: `--new-session`, stdin
/dev/null opened read-only, stdout/stderr captured as `oms sandbox run` does.

Limits: the wall deadline kills bwrap's process group (and with it the pid namespace);
RLIMIT_NPROC/NOFILE/CORE; no RLIMIT_AS (V8 and the codex binary reserve huge virtual
memory): memory is capped by the run's cgroup where one can be had. No `exit-code`
document on bwrap's status descriptor means the command never ran: SandboxUnavailable.
"""

from __future__ import annotations

import fcntl
import os
import resource
import select
import signal
import subprocess
import termios
import threading
import time
import tty
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from . import cgroup, seccomp
from .agent import AgentProfile, build_agent_argv, prepare_run_dir
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

Mode = Literal["pty", "pipes", "capture"]
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


def _child_setup(
    profile: AgentProfile, cg: cgroup.RunCgroup | None, ctty: bool
) -> Callable[[], None]:
    lim = profile.limits
    values = [
        (resource.RLIMIT_NPROC, lim.max_procs),
        (resource.RLIMIT_NOFILE, lim.open_files),
        (resource.RLIMIT_CORE, 0),
    ]

    def apply() -> None:  # runs in the child between fork and exec: syscalls only
        if cg is not None:
            cg.join()  # before exec, so that every process bwrap starts is inside
        for which, value in values:
            resource.setrlimit(which, (value, value))
        if ctty:  # after setsid: the pty on fd 0 becomes the controlling terminal
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    return apply


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
    """Start `cmd` in the agent profile; on leaving, kill what is left and clean up."""
    prepare_run_dir(run_dir, workspace)
    as_root = os.geteuid() == 0
    uid = SANDBOX_HOST_UID if as_root else None
    ro_fds = open_ro_paths(profile.ro_paths)
    status = StatusPipe()
    opened = list(ro_fds)
    info_r = info_w = None
    cg = None
    try:
        sfd = seccomp.filter_fd()
        opened.append(sfd)
        if want_info:
            info_r, info_w = os.pipe()
            opened += [info_r, info_w]
        argv = build_agent_argv(profile, bw, workspace=workspace, run_dir=run_dir, cmd=cmd,
                                seccomp_fd=sfd, ro_fds=ro_fds, status_fd=status.write_fd,
                                info_fd=info_w, new_session=new_session)  # fmt: skip
        cg = cgroup.create(profile.limits)
        fds = [*pass_fds, *ro_fds, sfd, status.write_fd, *([info_w] if info_w else [])]
        try:
            proc = subprocess.Popen(
                argv, stdin=stdio[0], stdout=stdio[1], stderr=stdio[2],
                env=dict(profile.env),  # bwrap's own environ is visible as /proc/1/environ
                close_fds=True, pass_fds=fds, start_new_session=True,
                preexec_fn=_child_setup(profile, cg, ctty=not new_session),
                user=uid, group=uid, extra_groups=[] if as_root else None,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailable(f"cannot start bwrap: {exc}") from None
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
) -> AgentResult:
    """Run CMD in the agent profile on `workspace`, in `run_dir` (see `agent.py`).

    SandboxUnavailable if bwrap cannot start CMD; CMD's own failure is in the result.
    """
    started = time.monotonic()
    deadline = started + profile.limits.wall_s
    if mode == "pty":
        return _run_pty(profile, bw, workspace, run_dir, cmd, pass_fds, started)
    if mode == "pipes":
        with launch(profile, bw, workspace=workspace, run_dir=run_dir, cmd=cmd,
                    stdio=(None, None, None), pass_fds=pass_fds) as r:  # fmt: skip
            timed_out = _wait(r.proc, deadline)
            code, sig, duration = outcome(r, timed_out, started)
        return AgentResult(code, sig, timed_out, duration, None, None)
    if mode != "capture":
        raise ProfileError(f"unknown agent run mode {mode!r}")
    cap = profile.limits.output_bytes
    out, err = Capture(cap), Capture(cap)
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)  # read-only: nothing writes to it
    try:
        pipe = subprocess.PIPE
        with launch(profile, bw, workspace=workspace, run_dir=run_dir, cmd=cmd,
                    stdio=(null, pipe, pipe), pass_fds=pass_fds) as r:  # fmt: skip
            timed_out = pump(r.proc, out, err, deadline)
            code, sig, duration = outcome(r, timed_out, started, err.result())
    finally:
        os.close(null)
    return AgentResult(code, sig, timed_out, duration, out.result(), err.result())


def _wait(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait for bwrap until the deadline: True if the deadline came first."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return True
    return False


# ------------------------------------------------------------------ pty mode ---


class _HungUp(Exception):
    """SIGTERM or SIGHUP reached oms during the relay: restore the terminal, stop the run."""


class _Terminal:
    """Our terminal (fd 0 in, fd 1 out) and the agent's own pty pair."""

    def __init__(self) -> None:
        if not (os.isatty(0) and os.isatty(1)):
            raise ProfileError("pty mode needs a terminal on stdin and stdout")
        self.saved = termios.tcgetattr(0)
        self.master, self.slave = os.openpty()
        self.copy_size()

    def copy_size(self) -> None:
        size = fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, size)

    def close_slave(self) -> None:
        if self.slave >= 0:
            os.close(self.slave)
            self.slave = -1

    def close(self) -> None:
        termios.tcsetattr(0, termios.TCSADRAIN, self.saved)
        self.close_slave()
        os.close(self.master)


def _run_pty(
    profile: AgentProfile,
    bw: Bwrap,
    workspace: Path,
    run_dir: Path,
    cmd: Sequence[str],
    pass_fds: Sequence[int],
    started: float,
) -> AgentResult:
    deadline = started + profile.limits.wall_s
    term = _Terminal()
    handlers = _install_handlers(term)
    try:
        stdio = (term.slave, term.slave, term.slave)
        with launch(profile, bw, workspace=workspace, run_dir=run_dir, cmd=cmd, stdio=stdio,
                    new_session=False, pass_fds=pass_fds) as r:  # fmt: skip
            term.close_slave()  # the master reads EIO once every process inside is gone
            tty.setraw(0, termios.TCSANOW)
            timed_out = _relay(term, deadline) or _wait(r.proc, deadline)
            code, sig, duration = outcome(r, timed_out, started)
    except _HungUp as exc:
        raise SandboxUnavailable(f"oms got signal {exc.args[0]}; the agent was stopped") from None
    finally:
        term.close()  # our terminal back as it was, on every way out
        for signum, old in handlers.items():
            signal.signal(signum, old)
    return AgentResult(code, sig, timed_out, duration, None, None)


def _install_handlers(term: _Terminal) -> dict[int, Any]:
    """SIGWINCH copies our window size to the pty; SIGTERM/SIGHUP end the relay cleanly.
    Signal handlers exist only in the main thread; elsewhere the size is copied once."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def hang_up(signum: int, frame: object) -> None:
        raise _HungUp(signum)

    old: dict[int, Any] = {
        signal.SIGWINCH: signal.signal(signal.SIGWINCH, lambda s, f: term.copy_size()),
        signal.SIGTERM: signal.signal(signal.SIGTERM, hang_up),
        signal.SIGHUP: signal.signal(signal.SIGHUP, hang_up),
    }
    return old


def _relay(term: _Terminal, deadline: float) -> bool:
    """Bytes both ways until the pty closes (False) or the deadline (True)."""
    os.set_blocking(term.master, False)
    pending = b""
    stdin_open = True
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        poll = select.poll()
        poll.register(term.master, select.POLLIN | (select.POLLOUT if pending else 0))
        if stdin_open and len(pending) < 1 << 16:
            poll.register(0, select.POLLIN)
        for fd, ev in poll.poll(min(left, 0.5) * 1000):
            if fd == term.master and ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                if not _copy_out(term.master):
                    return False
            if fd == term.master and ev & select.POLLOUT and pending:
                pending = pending[_write_some(term.master, pending) :]
            if fd == 0:
                data = os.read(0, 65536)
                stdin_open = bool(data)
                pending += data


def _copy_out(master: int) -> bool:
    """One read from the pty to our stdout; False once the pty is closed (EIO)."""
    try:
        data = os.read(master, 65536)
    except BlockingIOError:
        return True
    except OSError:  # EIO: no process inside holds the pty any more
        return False
    if not data:
        return False
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]
    return True


def _write_some(fd: int, data: bytes) -> int:
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0
