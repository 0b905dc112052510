"""A cgroup per sandbox run: caps kernel memory and processes, and kills every survivor.

RLIMIT_AS does not count tmpfs pages, inodes or dentries, so a check creating
300,000 empty files in a 1 MB tmpfs would pin ~240 MB of kernel memory. A memory
cgroup charges all of them (cgroup v2, and cgroup v1 on kernels that account
kernel memory in `memory.usage_in_bytes`, as every kernel since 5.x does unless
booted with `cgroup.memory=nokmem`). oms makes one child of its own cgroup per
run, so it only ever narrows the limits it already lives under.

Where no cgroup can be made (no delegated v2 controllers, v1 without root),
`support()` says why; the run goes ahead with rlimits only and `oms doctor`
warns. Where one can be made and making it fails, the run is refused.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .errors import SandboxUnavailable

PROC_MOUNTS = Path("/proc/mounts")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
PREFIX = "oms-run-"
# Kernel memory for the process tree itself (page tables, sockets, pipes) on top of
# what the profile grants: address space plus the three tmpfs mounts it caps.
SLACK_MB = 64
TMPFS_MOUNTS = 3
MB = 1024 * 1024


class Limits(Protocol):
    """What a run's cgroup caps: the check profile's and the agent profile's limits both fit."""

    @property
    def memory_mb(self) -> int: ...
    @property
    def tmpfs_mb(self) -> int: ...
    @property
    def max_procs(self) -> int: ...


@dataclass(frozen=True)
class Support:
    """Whether a run can get a cgroup: `kind` is "v2", "v1" or None (with `reason`)."""

    kind: str | None
    reason: str
    memory_parent: Path | None = None
    pids_parent: Path | None = None


@dataclass(frozen=True)
class RunCgroup:
    """The cgroup directories of one run and the `cgroup.procs` fds the child joins by."""

    kind: str
    dirs: tuple[Path, ...]
    join_fds: tuple[int, ...]

    def join(self) -> None:
        """Move the calling process in (runs in the child between fork and exec)."""
        for fd in self.join_fds:
            os.write(fd, b"0")


def memory_cap_bytes(limits: Limits) -> int:
    """Everything a check may legitimately hold in RAM, user and kernel memory together."""
    return (limits.memory_mb + TMPFS_MOUNTS * limits.tmpfs_mb + SLACK_MB) * MB


def _mounts() -> Iterator[tuple[str, str, set[str]]]:
    """(mount point, fs type, options) of the cgroup file systems."""
    try:
        text = PROC_MOUNTS.read_text()
    except OSError:
        return
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            yield parts[1], parts[2], set(parts[3].split(","))


def _own_paths() -> dict[str, str]:
    """This process's cgroup per v1 controller name, and "" for the v2 hierarchy."""
    out: dict[str, str] = {}
    try:
        text = PROC_SELF_CGROUP.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            out[name] = path
    return out


def _writable(d: Path) -> bool:
    return d.is_dir() and os.access(d, os.W_OK | os.X_OK)


def _v2(own: dict[str, str]) -> Support | None:
    """Our own v2 cgroup if memory and pids are delegated below it; as root, else the root.

    (A v2 cgroup holding processes cannot enable controllers for children, so the
    usual systemd session or service cgroup only qualifies when delegated.)
    """
    for mnt, fstype, _ in _mounts():
        if fstype != "cgroup2" or "" not in own:
            continue
        parents = [Path(mnt + own[""].rstrip("/"))]
        if os.geteuid() == 0:
            parents.append(Path(mnt))
        for parent in parents:
            try:
                delegated = set((parent / "cgroup.subtree_control").read_text().split())
            except OSError:
                continue
            if {"memory", "pids"} <= delegated and _writable(parent):
                return Support("v2", "cgroup v2 with memory and pids controllers", parent, parent)
    return None


def _v1(own: dict[str, str]) -> Support | None:
    found: dict[str, Path] = {}
    for mnt, fstype, opts in _mounts():
        for ctl in ("memory", "pids"):
            if fstype == "cgroup" and ctl in opts and ctl in own:
                found[ctl] = Path(mnt + own[ctl].rstrip("/"))
    memory = found.get("memory")
    if memory is None:
        return None
    if not _writable(memory):
        return Support(None, f"cgroup v1 memory controller at {memory} is not writable (not root)")
    pids = found.get("pids")
    pids = pids if pids is not None and _writable(pids) else None
    return Support("v1", "cgroup v1 memory controller", memory, pids)


def support() -> Support:
    """Can a run get a memory cgroup here? Structural only; nothing is created."""
    own = _own_paths()
    found = _v2(own) or _v1(own)
    if found is not None:
        return found
    return Support(None, "no cgroup v2 with memory delegated and no cgroup v1 memory controller")


def _write(d: Path, name: str, value: int, required: bool) -> None:
    try:
        (d / name).write_text(str(value))
    except OSError:
        if required:  # an optional file (swap accounting) may be absent or refuse
            raise


Settings = list[tuple[str, int, bool]]  # (file, value, required)


def _settings(kind: str, limits: Limits) -> tuple[Settings, Settings]:
    """(settings of the memory cgroup, settings of the pids cgroup)."""
    cap = memory_cap_bytes(limits)
    if kind == "v2":
        mem = [("memory.max", cap, True), ("memory.swap.max", 0, False)]
        return [*mem, ("pids.max", limits.max_procs, True)], []
    # memsw exists only with swap accounting; it must not be below the memory limit.
    mem = [("memory.limit_in_bytes", cap, True), ("memory.memsw.limit_in_bytes", cap, False)]
    return mem, [("pids.max", limits.max_procs, True)]


def create(limits: Limits, found: Support | None = None) -> RunCgroup | None:
    """A fresh cgroup for one run, or None where none can be had (see `support`)."""
    found = found or support()
    if found.kind is None or found.memory_parent is None:
        return None
    name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    mem_set, pid_set = _settings(found.kind, limits)
    plan = [(found.memory_parent / name, mem_set)]
    if found.pids_parent is not None and pid_set:
        plan.append((found.pids_parent / name, pid_set))
    made: list[Path] = []
    fds: list[int] = []
    try:
        for d, settings in plan:
            d.mkdir(mode=0o755)
            made.append(d)
            for file, value, required in settings:
                _write(d, file, value, required)
            fds.append(os.open(d / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        for d in reversed(made):
            _rmdir_quietly(d)
        raise SandboxUnavailable(f"cannot set up the run's cgroup ({found.kind}): {exc}") from None
    return RunCgroup(found.kind, tuple(made), tuple(fds))


def _pids(d: Path) -> list[int]:
    try:
        return [int(p) for p in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _rmdir_quietly(d: Path) -> None:
    try:
        d.rmdir()
    except OSError:
        pass


def destroy(cg: RunCgroup, attempts: int = 100) -> None:
    """Kill whatever is still in the run's cgroup and remove it; SandboxUnavailable if it stays."""
    for fd in cg.join_fds:
        os.close(fd)
    for d in cg.dirs:
        wait = 0.001
        for _ in range(attempts):
            for pid in _pids(d):  # only this run's processes can be in it
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                # Dying processes leave the cgroup asynchronously, usually within a
                # millisecond or two: back off from 1 ms to 20 ms (about 2 s in all).
                time.sleep(wait)
                wait = min(wait * 2, 0.02)
        else:
            raise SandboxUnavailable(f"cannot remove the run's cgroup {d}; remove it by hand")


def sweep_stale(found: Support | None = None) -> list[Path]:
    """Remove empty `oms-run-<pid>-*` cgroups left by oms processes that no longer exist."""
    found = found or support()
    removed = []
    for parent in {p for p in (found.memory_parent, found.pids_parent) if p is not None}:
        try:
            entries = list(os.scandir(parent))
        except OSError:
            continue
        for entry in entries:
            if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            pid = entry.name[len(PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not pid_alive(int(pid)) and not _pids(Path(entry.path)):
                try:
                    os.rmdir(entry.path)
                    removed.append(Path(entry.path))
                except OSError:
                    pass
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (ours or another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
