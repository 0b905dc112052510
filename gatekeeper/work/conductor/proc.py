"""A process named so that PID reuse cannot fool oms: (pid, start_ticks).

`start_ticks` is field 22 of `/proc/<pid>/stat` (the start time in clock ticks since boot).
A pid whose start time differs from the recorded one is another process: the recorded one
is dead. `alive` says True only for the same process, and `group_dead` proves a whole
process group gone (the lease-reclaim rule: reclaim only after the holder's group died).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcId:
    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int) -> ProcId | None:
        """The identity of the running `pid`, or None when there is no such process."""
        ticks = start_ticks(pid)
        return None if ticks is None else cls(pid, ticks)

    @classmethod
    def me(cls) -> ProcId:
        me = cls.of(os.getpid())
        assert me is not None
        return me

    def alive(self) -> bool:
        """This very process still runs (not a zombie, not a new process on its pid)."""
        return start_ticks(self.pid) == self.start_ticks and not _zombie(self.pid)


def _stat(pid: int) -> list[str] | None:
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read(4096).decode("ascii", "replace")
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after its last ')'.
    tail = raw[raw.rfind(")") + 2 :].split()
    return tail  # tail[0] is field 3 (state)


def start_ticks(pid: int) -> int | None:
    tail = _stat(pid)
    if tail is None or len(tail) < 20:
        return None
    try:
        return int(tail[19])  # field 22
    except ValueError:
        return None


def _zombie(pid: int) -> bool:
    tail = _stat(pid)
    return tail is None or tail[0] in ("Z", "X")


def group_dead(pgid: int) -> bool:
    """No live process is left in process group `pgid` (zombies count as dead)."""
    if pgid <= 1:
        return False
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            if os.getpgid(pid) == pgid and not _zombie(pid):
                return False
        except OSError:
            continue
    return True
