"""The agent profile's seccomp filter, compiled by libseccomp (through pyseccomp).

Default allow; the syscalls an agent never needs and that reach past its namespaces
fail with EPERM: ptrace and process_vm_* (reading another process's memory), bpf and
perf_event_open (kernel attack surface), the keyrings (keyctl, add_key, request_key:
not namespaced by the mount or network namespace), io_uring (bypasses seccomp for the
operations it carries) and userfaultfd. `ioctl` with TIOCSTI or TIOCLINUX fails too, so
nothing inside can push bytes into a terminal's input. The command argument is compared
on its low 32 bits (the kernel ignores the rest), so a high bit set cannot slip past.
Syscalls of another ABI (x32, i386) hit libseccomp's bad-arch action: the process dies.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import tempfile
from typing import Any

from .errors import SandboxUnavailable

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "bpf", "perf_event_open",
    "keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "userfaultfd",
)  # fmt: skip
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
DENIED_IOCTLS = (TIOCSTI, TIOCLINUX)
_LOW32 = 0xFFFF_FFFF


def _library() -> Any:
    # Imported here, not at module level: pyseccomp loads libseccomp when imported, which
    # `oms` start-up must not pay for, and raises (not ImportError) when it is missing.
    try:
        import pyseccomp
    except (ImportError, OSError, RuntimeError) as exc:
        raise SandboxUnavailable(
            f"seccomp is unavailable ({exc}); install libseccomp2 and pyseccomp"
        ) from None
    return pyseccomp


@functools.lru_cache(maxsize=1)
def agent_filter() -> bytes:
    """The filter as BPF bytes, ready for bwrap's `--seccomp FD`."""
    sc = _library()
    try:
        flt = sc.SyscallFilter(sc.ALLOW)
        deny = sc.ERRNO(errno.EPERM)
        for name in DENIED:
            flt.add_rule(deny, name)
        for cmd in DENIED_IOCTLS:
            flt.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, _LOW32, cmd))
        with tempfile.TemporaryFile() as f:
            flt.export_bpf(f)
            f.seek(0)
            data = f.read()
    except (OSError, ValueError) as exc:
        raise SandboxUnavailable(f"cannot build the seccomp filter: {exc}") from None
    if not data:
        raise SandboxUnavailable("libseccomp produced an empty seccomp filter")
    return data


def filter_digest() -> str:
    """SHA-256 of the filter bytes; part of the agent profile's digest."""
    return "sha256:" + hashlib.sha256(agent_filter()).hexdigest()


def filter_fd() -> int:
    """A fresh memfd holding the filter at offset 0 (bwrap reads it to the end, once).

    Not close-on-exec-proof on its own: pass it in `pass_fds` and close it after start.
    """
    data = agent_filter()
    fd = os.memfd_create("oms-seccomp", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError as exc:
        os.close(fd)
        raise SandboxUnavailable(f"cannot write the seccomp filter: {exc.strerror}") from None
    return fd
