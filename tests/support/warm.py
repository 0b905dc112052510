"""The real `oms` CLI started from a warm interpreter: the same code, its imports paid once.

Most of an `oms` process's time in this suite is Python importing oms (about 0.5-1 s of
every call, thousands of calls). The server below is `python` with oms' packages already
imported and its pydantic models built; for each call it forks, and the child becomes the
process `python -m gatekeeper ARGS` would have been: the caller's stdin, stdout and stderr
(passed over a Unix socket), its exact environment, working directory and umask, only
fds 0-2 open, the signal dispositions a fresh interpreter has (SIGPIPE ignored), and
`sys.argv`/`sys.path[0]` as `-m` sets them.
Then it runs `gatekeeper/__main__.py` and exits as the interpreter would (thread join,
atexit, flush). The exit status (a signal as a negative code) comes back to the caller.

Nothing is a stand-in: the child runs oms' own `main()` on the real files, git, bwrap and
scanners. What it cannot reproduce, it does not try: a call whose interpreter would start
differently (any `PYTHON*`, `LC_*` or `LANG` variable unlike the server's) or that asks
for more than `run_oms`' plain arguments (beyond a new session, a /dev/null stdin or a
decoding's `errors`) runs as a fresh process, and so does every call
when `OMS_TEST_WARM=off` (the whole suite then runs as before). The tests of start-up
itself (import sets, lazy loading, `--help` time, the installed console script) start
their own fresh interpreters and never come here; `tests/e2e/test_warm.py` holds a warm
call's output equal to a fresh one's.

`spawn_warm` starts such a child without waiting for it (a `Popen`-like `WarmChild`): the
pty tests' human at a terminal gets one whose controlling terminal is their pty, set up as
support/pty.py's fresh child sets it up (a new session, TIOCSCTTY).

The server is one per pytest worker, started at its first call; it ends when the worker
does (its stdin is a pipe from the worker: EOF ends it).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

# Variables that change how the interpreter itself starts (flags, encodings, paths).
INTERPRETER_ENV = ("PYTHON", "LC_", "LANG")
PACKAGES = ("gatekeeper", "sandbox", "evidence", "policy")
_PID = struct.Struct("!q")


def _interpreter_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(INTERPRETER_ENV)}


# --- the caller's side ---------------------------------------------------------------------


class _Server:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="oms-warm-"))
        self.path = self.dir / "s"
        self.env = _interpreter_env(env)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(self.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**{k: v for k, v in os.environ.items() if not k.startswith(INTERPRETER_ENV)},
                 **self.env},
        )  # fmt: skip
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        self.ok = ready == b"ready\n"

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(OSError):
            self.path.unlink()
            self.dir.rmdir()


_server: _Server | None = None
_server_pid = -1


def _get_server(env: Mapping[str, str]) -> _Server | None:
    global _server, _server_pid
    if os.environ.get("OMS_TEST_WARM", "on") == "off":
        return None
    if _server is None or _server_pid != os.getpid():
        _server = _Server(env)
        _server_pid = os.getpid()
        atexit.register(_server.close)
    if not _server.ok or _server.proc.poll() is not None:
        return None
    if _interpreter_env(env) != _server.env:
        return None
    return _server


def run_warm(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    input: str | None,
    timeout: float,
    new_session: bool = False,
    stdin_devnull: bool = False,
    errors: str = "strict",
) -> subprocess.CompletedProcess[str] | None:
    """`python -m gatekeeper ARGV` forked from the warm server, or None when this call must
    run as a fresh process (the caller then does). `new_session` and `stdin_devnull` are
    Popen's `start_new_session=True` and `stdin=DEVNULL`; `errors` is how the UTF-8 input
    and output are encoded and decoded, as `subprocess.run(errors=...)` takes it."""
    data = None if input is None else input.encode("utf-8", errors)
    child = spawn_warm(argv, env=env, cwd=cwd, input=data, new_session=new_session,
                       stdin_devnull=stdin_devnull)  # fmt: skip
    if child is None:
        return None
    try:
        out, err = child.communicate(timeout)
    except subprocess.TimeoutExpired:
        child.kill()  # and, as subprocess.run does, wait for it, not for its pipes
        child.wait()
        raise
    assert child.returncode is not None
    return subprocess.CompletedProcess(child.args, child.returncode, _text(out, errors),
                                       _text(err, errors))  # fmt: skip


class WarmChild:
    """A warm `python -m gatekeeper ARGV` child, as much of `Popen` as the tests use: its
    stdout and stderr are pipes to this process; `returncode` once it has ended."""

    def __init__(self, args: list[str], pid: int, conn: socket.socket, out_r: int, err_r: int,
                 writer: threading.Thread | None) -> None:  # fmt: skip
        self.args, self.pid = args, pid
        self.returncode: int | None = None
        self._conn, self._writer = conn, writer
        self._chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        self._out_r, self._err_r = out_r, err_r

    def _pump(self, timeout: float | None, until_done: bool) -> None:
        """Read what is there (or, `until_done`, everything until the child has ended and
        closed its pipes); TimeoutExpired after `timeout` seconds."""
        sel = selectors.DefaultSelector()
        for fd in (self._out_r, self._err_r):
            if fd >= 0:
                sel.register(fd, selectors.EVENT_READ)
        if self.returncode is None:
            sel.register(self._conn, selectors.EVENT_READ)
        deadline = None if timeout is None else _now() + timeout
        try:
            while sel.get_map():
                left = None if deadline is None else max(deadline - _now(), 0)
                if left == 0 and until_done:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                ready = sel.select(left if until_done else 0)
                if not ready and not until_done:
                    return
                for key, _ in ready:
                    if key.fileobj is self._conn:
                        status = _PID.unpack(_recv_exact(self._conn, _PID.size))[0]
                        self.returncode = os.waitstatus_to_exitcode(status)
                        sel.unregister(self._conn)
                        continue
                    fd = key.fileobj
                    assert isinstance(fd, int)
                    block = os.read(fd, 1 << 16)
                    if block:
                        self._chunks[fd].append(block)
                    else:
                        sel.unregister(fd)
                        os.close(fd)
                        if fd == self._out_r:
                            self._out_r = -1
                        else:
                            self._err_r = -1
        finally:
            sel.close()

    def poll(self) -> int | None:
        self._pump(0, until_done=False)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Everything it wrote to stdout and stderr, once it has ended."""
        self._pump(timeout, until_done=True)
        self._conn.close()
        if self._writer is not None:
            self._writer.join(timeout=5)
        out_r, err_r = self._chunks
        return b"".join(self._chunks[out_r]), b"".join(self._chunks[err_r])

    def wait(self) -> int:
        """Its exit status, waiting for it to end but not for its pipes (a process it left
        behind may hold them); what it wrote and did not get read is dropped."""
        if self.returncode is None:
            self._conn.settimeout(None)
            status = _PID.unpack(_recv_exact(self._conn, _PID.size))[0]
            self.returncode = os.waitstatus_to_exitcode(status)
        self._conn.close()
        for fd in (self._out_r, self._err_r):
            if fd >= 0:
                os.close(fd)
        self._out_r = self._err_r = -1
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def spawn_warm(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | Path | None,
    input: bytes | None = None,
    new_session: bool = False,
    stdin_devnull: bool = False,
    ctty: str | None = None,
    ctty_stdio: bool = False,
) -> WarmChild | None:
    """Start `python -m gatekeeper ARGV` forked from the warm server (None: it cannot serve
    `env`; start a fresh process). `ctty`: a new session whose controlling terminal is that
    pty (its stdin and stdout too with `ctty_stdio`), as support/pty.py's child sets up."""
    server = _get_server(env)
    if server is None:
        return None
    mask = os.umask(0)
    os.umask(mask)
    request = json.dumps(
        {
            "argv": list(argv),
            "env": dict(env),
            "cwd": os.path.abspath(cwd or os.getcwd()),
            "umask": mask,
            "setsid": new_session or ctty is not None,
            "ctty": ctty,
            "ctty_stdio": ctty_stdio,
        }
    ).encode()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    if input is not None:
        in_r, in_w = os.pipe()
    elif stdin_devnull:
        in_r, in_w = os.open(os.devnull, os.O_RDONLY), -1
    else:
        in_r, in_w = 0, -1
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(server.path))
        socket.send_fds(conn, [b"F"], [in_r, out_w, err_w])
        conn.sendall(struct.pack("!I", len(request)) + request)
    finally:
        for fd in (out_w, err_w, in_r if in_r != 0 else -1):
            if fd >= 0:
                os.close(fd)
    writer = None
    if input is not None:

        def feed() -> None:
            with contextlib.suppress(BrokenPipeError), open(in_w, "wb", closefd=True) as f:
                f.write(input)

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
    pid = _PID.unpack(_recv_exact(conn, _PID.size))[0]
    args = [sys.executable, "-m", "gatekeeper", *argv]
    return WarmChild(args, pid, conn, out_r, err_r, writer)


def command(args: Sequence[str], env: Mapping[str, str]) -> tuple[str, list[str]]:
    """(command, arguments) for another program to start `python -m gatekeeper ARGS` with
    `env` (an MCP client starting `oms mcp`): a small stdlib-only launcher that hands its own
    stdin, stdout and stderr to a warm child, forwards the signals it gets, and exits as the
    child did; plain `python -m gatekeeper` when the warm server cannot serve `env`."""
    server = _get_server(env)
    if server is None:
        return sys.executable, ["-m", "gatekeeper", *args]
    return sys.executable, ["-I", "-S", __file__, "--launch", str(server.path), *args]


def _now() -> float:
    import time

    return time.monotonic()


def _text(data: bytes, errors: str) -> str:
    # As `subprocess.run(..., encoding="utf-8", errors=errors)` reads it: universal newlines.
    return data.decode("utf-8", errors).replace("\r\n", "\n").replace("\r", "\n")


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        block = conn.recv(n - len(buf))
        if not block:
            raise ConnectionError("the warm oms server went away")
        buf += block
    return buf


# --- the server's side ---------------------------------------------------------------------


def _warm_up() -> None:
    """Import every module of oms' packages and build every pydantic model's validator: what
    a fresh `oms` process spends most of its time on."""
    import importlib
    import pkgutil

    for name in PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if info.name.endswith(".__main__"):
                continue
            with contextlib.suppress(Exception):
                importlib.import_module(info.name)
    from pydantic import BaseModel

    todo = list(BaseModel.__subclasses__())
    while todo:
        model = todo.pop()
        todo.extend(model.__subclasses__())
        if model.__module__.startswith(PACKAGES):
            with contextlib.suppress(Exception):
                model.model_rebuild(force=True)


def _child(fds: list[int], request: dict[str, object], keep: list[int]) -> None:
    """In the forked child: become `python -m gatekeeper ARGV` and never return."""
    code = 1
    try:
        if request.get("setsid"):
            os.setsid()
        for sig, handler in _STARTED_WITH.items():  # as the interpreter set them (SIGPIPE ignored)
            if signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
        stdin, stdout, stderr = fds
        for target, fd in ((0, stdin), (1, stdout), (2, stderr)):
            if fd != target:
                os.dup2(fd, target)
        if request.get("ctty"):  # the pty as controlling terminal, as support/pty.py's CHILD
            import fcntl
            import termios

            tty = os.open(str(request["ctty"]), os.O_RDWR)
            fcntl.ioctl(tty, termios.TIOCSCTTY, 0)
            if request.get("ctty_stdio"):
                os.dup2(tty, 0)
                os.dup2(tty, 1)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        del keep[:]
        os.umask(int(str(request["umask"])))
        cwd = str(request["cwd"])
        os.chdir(cwd)
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        import time

        time.tzset()
        tempfile.tempdir = None
        argv = request["argv"]
        assert isinstance(argv, list)
        sys.path[0] = cwd
        sys.orig_argv = [sys.executable, "-m", "gatekeeper", *map(str, argv)]
        sys.argv = ["-m", *map(str, argv)]
        import runpy

        try:
            runpy.run_module("gatekeeper", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = _exit_code(e.code)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # as Py_FinalizeEx does
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    finally:
        os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def _dispositions() -> dict[signal.Signals, object]:
    found = {}
    for sig in signal.valid_signals():
        handler = signal.getsignal(sig)
        if handler is not None:
            found[sig] = handler
    return found


# Each signal's disposition as this interpreter started: a fresh `python` has the same
# (SIGPIPE and SIGXFSZ ignored, SIGINT raising KeyboardInterrupt, the rest inherited).
_STARTED_WITH = _dispositions()
_OWN_ENV = _interpreter_env(os.environ)


def serve(path: str) -> None:
    _warm_up()
    import gc

    gc.freeze()  # what warm-up made stays out of every child's collections: fewer copied pages
    if threading.active_count() != 1:  # forking a threaded process is not a fresh process
        print("threads", flush=True)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    waiting: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, conn)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in sel.select():
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 4096):
                    return
            elif key.data == "accept":
                conn, _addr = listener.accept()
                with contextlib.suppress(OSError):
                    _start(conn, sel, listener, waiting)
            else:
                pidfd = key.fileobj
                assert isinstance(pidfd, int)
                pid, conn = waiting.pop(pidfd)
                sel.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):
                    conn.sendall(_PID.pack(status))
                conn.close()


def _launch(path: str, argv: list[str]) -> None:
    """The launcher's whole life (see `command`): never returns."""
    env = dict(os.environ)
    fresh = [sys.executable, "-m", "gatekeeper", *argv]
    mask = os.umask(0)
    os.umask(mask)
    request = json.dumps({"argv": argv, "env": env, "cwd": os.getcwd(), "umask": mask,
                          "same_interpreter": True}).encode()  # fmt: skip
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        socket.send_fds(conn, [b"F"], [0, 1, 2])
        conn.sendall(struct.pack("!I", len(request)) + request)
        pid = _PID.unpack(_recv_exact(conn, _PID.size))[0]
    except OSError:
        pid = -1
    if pid < 0:  # the server is gone or would not start this interpreter: a fresh one
        conn.close()
        os.execve(sys.executable, fresh, env)

    def forward(sig: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, forward)
    try:
        status = _PID.unpack(_recv_exact(conn, _PID.size))[0]
    except ConnectionError:
        os._exit(1)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # ended by a signal: end by the same one
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _start(
    conn: socket.socket,
    sel: selectors.BaseSelector,
    listener: socket.socket,
    waiting: dict[int, tuple[int, socket.socket]],
) -> None:
    _, fds, _, _ = socket.recv_fds(conn, 1, 3)
    try:
        (size,) = struct.unpack("!I", _recv_exact(conn, 4))
        request = json.loads(_recv_exact(conn, size))
        if request.get("same_interpreter") and _interpreter_env(request["env"]) != _OWN_ENV:
            conn.sendall(_PID.pack(-1))
            conn.close()
            return
        pid = os.fork()
        if pid == 0:
            _child(fds, request, [])
        pidfd = os.pidfd_open(pid)
    finally:
        for fd in fds:
            os.close(fd)
    waiting[pidfd] = (pid, conn)
    sel.register(pidfd, selectors.EVENT_READ, "child")
    conn.sendall(_PID.pack(pid))


if __name__ == "__main__":
    if sys.argv[1] == "--launch":
        _launch(sys.argv[2], sys.argv[3:])
    del sys.path[0]  # this file's directory: `support`'s modules are not oms' (`sandbox`)
    serve(sys.argv[1])
