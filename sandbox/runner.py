"""Running one command in the sandbox with hard limits and bounded output capture.

Limits are set with setrlimit in the child just before bwrap starts and are
inherited by everything inside. RLIMIT_NPROC is not enforced for root, so when
oms runs as root the sandbox runs as an unprivileged uid that owns the scratch
copy. The wall-clock deadline kills bwrap's whole process group; with
--unshare-pid and --die-with-parent that tears down every process inside.

Where a cgroup can be had (see `cgroup.py`), the run gets its own: memory
(tmpfs pages, inodes and dentries included) and processes are capped there, and
anything still in it when the run ends is killed.

bwrap reports through `--json-status-fd`: an `exit-code` document appears only
once the command itself ran and exited. Without it (and without a time-out or a
signal), bwrap could not set up or exec the command: that is SandboxUnavailable,
never the command's failure. The command's own output cannot fake this; it has
no access to that descriptor.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import cgroup, staging
from .bwrap import Bwrap, find_bwrap
from .errors import SandboxUnavailable
from .profile import HOME, INSIDE_UID, Profile, build_argv
from .staging import chown_tree

# When oms runs as root, the sandbox runs as this otherwise unused uid/gid.
SANDBOX_HOST_UID = 2_147_480_000
TAIL_BYTES = 8 * 1024
HEAD_BYTES = 8 * 1024


@dataclass(frozen=True)
class Stream:
    """A bounded capture: head and tail for display, `kept` up to the output cap."""

    head: bytes
    tail: bytes
    total: int
    kept: bytes

    @property
    def dropped(self) -> int:
        """Bytes not in `kept` (the output cap cut them)."""
        return self.total - len(self.kept)

    def display(self) -> str:
        """Head and tail with a marker for what lies between, as text."""
        if self.total <= len(self.head):
            return self.head.decode("utf-8", "replace")
        gap = self.total - len(self.head) - len(self.tail)
        return (
            self.head.decode("utf-8", "replace")
            + f"\n[… {gap} bytes not shown …]\n"
            + self.tail.decode("utf-8", "replace")
        )


@dataclass(frozen=True)
class RunResult:
    exit_code: int | None  # None when killed at the deadline
    timed_out: bool
    duration_s: float
    stdout: Stream
    stderr: Stream
    profile_digest: str
    signal: int | None = None


class Capture:
    """Bounded capture of one stream: an 8 KiB head and tail, and up to `cap` bytes kept."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.kept = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        if len(self.head) < HEAD_BYTES:
            self.head += data[: HEAD_BYTES - len(self.head)]
        if len(self.kept) < self.cap:
            self.kept += data[: self.cap - len(self.kept)]
        self.tail += data
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]

    def result(self) -> Stream:
        return Stream(bytes(self.head), bytes(self.tail), self.total, bytes(self.kept))


def _child_setup(
    profile: Profile,
    cg: cgroup.RunCgroup | None,
    stages: Sequence[staging.Stage],
    as_root: bool,
) -> Callable[[], None]:
    lim = profile.limits
    mb = 1024 * 1024
    values = [
        (resource.RLIMIT_CPU, lim.cpu_s),
        (resource.RLIMIT_AS, lim.memory_mb * mb),
        (resource.RLIMIT_NPROC, lim.max_procs),
        (resource.RLIMIT_FSIZE, lim.file_size_mb * mb),
        (resource.RLIMIT_NOFILE, lim.open_files),
        (resource.RLIMIT_CORE, 0),
    ]

    def apply() -> None:  # runs in the child between fork and exec: syscalls only
        if cg is not None:
            cg.join()  # before exec, so that every process bwrap starts is inside
        if stages:
            staging.mount_stages(stages)
        if as_root:  # here, not Popen(user=): the stages need root first
            staging.drop_to(SANDBOX_HOST_UID)
        # Last: RLIMIT_AS (sized for the command) could starve this Python code, and it is
        # the order Popen(user=) had (the uid changed first).
        for which, value in values:
            resource.setrlimit(which, (value, value))

    return apply


def write_etc(etc: Path, user: str = "sandbox", home: str = HOME) -> None:
    """The synthetic /etc/passwd and /etc/group: `user` is uid/gid 1000 with HOME `home`."""
    (etc / "passwd").write_text(
        f"{user}:x:{INSIDE_UID}:{INSIDE_UID}:oms {user}:{home}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (etc / "group").write_text(f"{user}:x:{INSIDE_UID}:\nnogroup:x:65534:\n")
    for f in ("passwd", "group"):
        os.chmod(etc / f, 0o444)


def run(
    profile: Profile,
    scratch: Path,
    cmd: Sequence[str],
    *,
    bw: Bwrap | None = None,
) -> RunResult:
    """Run `cmd` in the sandbox on `scratch` (bound read-write at /workspace).

    `scratch` must be a private directory that oms created; when oms runs as
    root it is handed to the sandbox uid, and so is each of `profile.rw_paths` for
    the run (then back to oms' own uid and gid, on every way out). As root, what the
    sandbox uid cannot reach is staged (`staging.py`). Raises SandboxUnavailable if
    bwrap cannot start; the command's own failures are in the result.
    """
    bw = bw or find_bwrap()
    as_root = os.geteuid() == 0
    run_dir = Path(tempfile.mkdtemp(prefix=f"oms-run-{os.getpid()}-"))
    try:
        etc = run_dir / "etc"
        etc.mkdir()
        write_etc(etc)
        if as_root:
            chown_tree(scratch, SANDBOX_HOST_UID, SANDBOX_HOST_UID)
            # The sandbox uid must reach the synthetic /etc files.
            chown_tree(run_dir, SANDBOX_HOST_UID, SANDBOX_HOST_UID)
        with staging.lend_trees(
            [r for r, _ in profile.rw_paths] if as_root else [], SANDBOX_HOST_UID
        ):
            return _run_in(profile, bw, scratch, run_dir, cmd, as_root)
    finally:
        remove_dir(run_dir)


def _run_in(
    profile: Profile, bw: Bwrap, scratch: Path, run_dir: Path, cmd: Sequence[str], as_root: bool
) -> RunResult:
    ro_fds = open_ro_paths(profile.ro_paths)
    opened = list(ro_fds)
    status = StatusPipe()
    cg = None
    try:
        rw_fds = open_ro_paths(profile.rw_paths)  # O_PATH: the same opening serves both
        opened += rw_fds
        bind_ro, stages = staging.stage_ro_paths(run_dir, profile.ro_paths, ro_fds, opened)
        bind_rw, rw_stages = staging.stage_rw_paths(run_dir, profile.rw_paths, rw_fds, opened)
        workspace, ws_stages = staging.stage_dir(run_dir, scratch, "ws", opened)
        stages += rw_stages + ws_stages
        argv = build_argv(profile, bw, workspace, run_dir / "etc", cmd, bind_ro,
                          status_fd=status.write_fd, rw_fds=bind_rw)  # fmt: skip
        cg = cgroup.create(profile.limits)
        fds = sorted({*ro_fds, *rw_fds, *bind_ro, *bind_rw})
        return _execute(argv, profile, _child_setup(profile, cg, stages, as_root), fds, status)
    finally:
        for fd in opened:
            os.close(fd)
        status.close()
        if cg is not None:
            cgroup.destroy(cg)


def remove_dir(path: Path) -> None:
    """Remove a directory oms made for a run; SandboxUnavailable (never silence) if it stays."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise SandboxUnavailable(
            f"cannot remove {path}: {exc.strerror or exc}; remove it by hand"
        ) from None


class StatusPipe:
    """The pipe bwrap writes its JSON status to; the parent's write end closes after start."""

    def __init__(self) -> None:
        self.read_fd, write_fd = os.pipe()
        self._write_fd: int | None = write_fd
        os.set_blocking(self.read_fd, False)

    @property
    def write_fd(self) -> int:
        assert self._write_fd is not None
        return self._write_fd

    def started(self) -> None:
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None

    def close(self) -> None:
        self.started()
        os.close(self.read_fd)

    def documents(self) -> list[dict[str, object]]:
        """The JSON documents bwrap wrote (every writer has exited by now)."""
        data = b""
        while len(data) < 65536:
            try:
                chunk = os.read(self.read_fd, 4096)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        return json_documents(data.decode("utf-8", "replace"))


def json_documents(text: str) -> list[dict[str, object]]:
    docs: list[dict[str, object]] = []
    decoder, pos = json.JSONDecoder(), 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return docs
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return docs
        if isinstance(doc, dict):
            docs.append(doc)


def open_ro_paths(ro_paths: Sequence[tuple[str, str]]) -> list[int]:
    """O_PATH descriptors of the checked (host real path, inside) pairs, for --ro-bind-fd."""
    fds: list[int] = []
    try:
        for real, _ in ro_paths:
            fds.append(os.open(real, os.O_PATH | os.O_CLOEXEC))
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        raise SandboxUnavailable(f"cannot open toolchain path: {exc.strerror}") from None
    return fds


def start_failure(cmd0: str, stderr: Stream) -> SandboxUnavailable:
    """bwrap exited before the command ran: SandboxUnavailable with bwrap's last words."""
    # The command never ran, so stderr holds only bwrap's own words; show its last line.
    lines = [ln for ln in stderr.display().splitlines() if ln.startswith("bwrap: ")]
    cause = lines[-1][len("bwrap: ") :][:300] if lines else "bwrap exited before the command ran"
    return SandboxUnavailable(f"the sandbox could not start {cmd0}: {cause}")


def pump(proc: subprocess.Popen[bytes], out: Capture, err: Capture, deadline: float) -> bool:
    """Read the child's stdout and stderr into the captures until both close and it exits,
    or until `deadline` (monotonic): True if the deadline came first."""
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            for key, _ in sel.select(timeout=min(left, 0.5)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                key.data.add(chunk)
    finally:
        sel.close()
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return True
    return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill bwrap's process group unless it has exited (with --unshare-pid and
    --die-with-parent that ends everything inside), reap it, close its pipes."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _execute(
    argv: list[str],
    profile: Profile,
    setup: Callable[[], None],
    pass_fds: Sequence[int],
    status: StatusPipe | None = None,
) -> RunResult:
    cap = profile.limits.output_bytes
    out, err = Capture(cap), Capture(cap)
    start = time.monotonic()
    deadline = start + profile.limits.wall_s
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(profile.env),  # bwrap's own environ is visible as /proc/1/environ
            close_fds=True,
            pass_fds=(*pass_fds, *([status.write_fd] if status else [])),
            start_new_session=True,
            preexec_fn=setup,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"cannot start bwrap: {exc}") from None
    if status is not None:
        status.started()  # only bwrap holds the write end now
    try:
        timed_out = pump(proc, out, err, deadline)
    finally:
        stop(proc)
    duration = time.monotonic() - start
    code = proc.returncode
    if status is not None and not timed_out and code >= 0:
        if not any("exit-code" in doc for doc in status.documents()):
            raise start_failure(argv[argv.index("--") + 1], err.result())
    sig = -code if code is not None and code < 0 else None
    return RunResult(
        exit_code=None if timed_out else (code if code >= 0 else 128 + (sig or 0)),
        timed_out=timed_out,
        duration_s=round(duration, 3),
        stdout=out.result(),
        stderr=err.result(),
        profile_digest=profile.digest,
        signal=sig,
    )
