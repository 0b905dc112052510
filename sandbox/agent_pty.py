"""The pty side of `oms agent run` in pty mode: our terminal and the agent's own pty.

Our terminal goes raw while the agent runs and is restored on every way out (the caller
closes `Terminal` in a `finally`); bytes are relayed both ways like script(1), writes to
the agent's pty never block the relay, and SIGWINCH copies our window size across.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import termios
import threading
import time
import tty
from typing import Any

from .errors import ProfileError


class HungUp(Exception):
    """SIGTERM or SIGHUP reached oms during the relay: restore the terminal, stop the run."""


class Terminal:
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

    def raw(self) -> None:
        """Our terminal in raw mode: every key, ^C included, goes to the agent's pty."""
        tty.setraw(0, termios.TCSANOW)

    def close_slave(self) -> None:
        if self.slave >= 0:
            os.close(self.slave)
            self.slave = -1

    def close(self) -> None:
        termios.tcsetattr(0, termios.TCSADRAIN, self.saved)
        self.close_slave()
        os.close(self.master)


def install_handlers(term: Terminal) -> dict[int, Any]:
    """SIGWINCH copies our window size to the pty; SIGTERM/SIGHUP end the relay cleanly.
    Signal handlers exist only in the main thread; elsewhere the size is copied once."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def hang_up(signum: int, frame: object) -> None:
        raise HungUp(signum)

    old: dict[int, Any] = {
        signal.SIGWINCH: signal.signal(signal.SIGWINCH, lambda s, f: term.copy_size()),
        signal.SIGTERM: signal.signal(signal.SIGTERM, hang_up),
        signal.SIGHUP: signal.signal(signal.SIGHUP, hang_up),
    }
    return old


def relay(term: Terminal, deadline: float) -> bool:
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
