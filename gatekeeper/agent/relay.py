"""The loopback relay inside the agent sandbox, and the launcher of the agent command.

    python -I -m gatekeeper.agent.relay --forward 47100=/run/oms/broker.sock
        [--forward PORT=SOCKET ...] -- CMD...

Inside, the network namespace is empty but for loopback, and the one way out is the
broker's unix socket (inside.SOCKET). This listens on 127.0.0.1:PORT for each forward
and pipes each TCP connection, byte for byte, to a new connection on SOCKET (no HTTP is
parsed here: the broker outside parses). It closes every descriptor but stdio it was
given (the probe's control fds). Then it runs CMD as its child with the same
stdio, forwards SIGINT/SIGTERM/SIGHUP/SIGWINCH sent to it, and exits with CMD's status
(128+N when CMD was killed by signal N).

It is the only oms code that runs inside the sandbox at every start: stdlib only,
nothing heavy imported (`python -X importtime` keeps it well under 30 ms).
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGWINCH)
# Python ignores these; CMD must start with the default (a `head` must die of SIGPIPE).
DEFAULTED = (*FORWARDED, signal.SIGPIPE, signal.SIGXFSZ)
SI_KERNEL = 0x80  # si_code of a signal the kernel sent: a terminal's ^C, hang-up, resize
EXIT_USAGE = 2
EXIT_RELAY = 125  # the relay itself could not start: CMD never ran
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
CHUNK = 65536


def parse(argv: Sequence[str]) -> tuple[list[tuple[int, str]], list[str]]:
    """([(port, socket path)...], CMD) from the arguments; ValueError with the reason."""
    forwards: list[tuple[int, str]] = []
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--forward" and i + 1 < len(argv):
            spec, i = argv[i + 1], i + 2
        elif argv[i].startswith("--forward="):
            spec, i = argv[i].removeprefix("--forward="), i + 1
        else:
            raise ValueError(f"unknown argument {argv[i]!r}")
        port, sep, path = spec.partition("=")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not path:
            raise ValueError(f"--forward takes PORT=SOCKET, not {spec!r}")
        forwards.append((int(port), path))
    cmd = list(argv[i + 1 :])
    if not cmd:
        raise ValueError("usage: relay [--forward PORT=SOCKET]... -- CMD...")
    return forwards, cmd


def listen(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    return listener


def serve(listener: socket.socket, path: str) -> None:
    """Accept forever; each connection gets its own unix-socket connection to `path`."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=bridge, args=(conn, path), daemon=True).start()


def bridge(tcp: socket.socket, path: str) -> None:
    """Pipe `tcp` and a new connection to `path` both ways until both sides are done."""
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # SSE comes in small pieces
        unix.connect(path)
    except OSError:
        tcp.close()
        unix.close()
        return
    back = threading.Thread(target=pump, args=(unix, tcp), daemon=True)
    back.start()
    pump(tcp, unix)
    back.join()
    tcp.close()
    unix.close()


def pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy `src` to `dst`; at `src`'s end, half-close `dst`; on an error, end both."""
    try:
        while data := src.recv(CHUNK):
            dst.sendall(data)
    except OSError:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def supervise(pid: int) -> int:
    """Forward signals to `pid` until it ends; its exit status, 128+N if signal N killed it.

    A signal the kernel sent (a terminal's ^C, hang-up or resize) already went to the
    terminal's foreground group, CMD included: forwarding it too would deliver it twice."""
    waited = {*FORWARDED, signal.SIGCHLD}
    while True:
        info = signal.sigwaitinfo(waited)
        if info.si_signo == signal.SIGCHLD:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                code = os.waitstatus_to_exitcode(status)
                return 128 - code if code < 0 else code
        elif info.si_code != SI_KERNEL:
            try:
                os.kill(pid, info.si_signo)
            except ProcessLookupError:
                pass


def main(argv: Sequence[str] | None = None) -> int:
    try:
        forwards, cmd = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"oms relay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # Blocked before any thread starts, so that every thread inherits the mask and only
    # sigwaitinfo() below ever takes these signals.
    signal.pthread_sigmask(signal.SIG_BLOCK, {*FORWARDED, signal.SIGCHLD})
    listeners = []
    for port, path in forwards:
        try:
            listeners.append((listen(port), path))
        except OSError as exc:
            print(f"oms relay: cannot listen on 127.0.0.1:{port}: {exc.strerror}", file=sys.stderr)
            return EXIT_RELAY
    for listener, path in listeners:
        threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    try:
        pid = os.posix_spawnp(cmd[0], cmd, os.environ, setsigmask=(), setsigdef=DEFAULTED)
    except OSError as exc:
        print(f"oms relay: cannot run {cmd[0]!r}: {exc.strerror}", file=sys.stderr)
        return EXIT_NOT_FOUND if exc.errno == errno.ENOENT else EXIT_NOT_EXECUTABLE
    return supervise(pid)


if __name__ == "__main__":
    # Whatever came down to here but stdio (the probe's control fds) stops here: CMD
    # inherits its stdio only.
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    sys.exit(main())
