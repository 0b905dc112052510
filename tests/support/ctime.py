"""Waiting for the kernel's clock: a change made afterwards gets a later ctime."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def tick_past(ctime_ns: int, where: Path) -> None:
    """Until a file made in `where` gets a ctime later than `ctime_ns` (the kernel's coarse
    clock ticks every few milliseconds): a write from then on changes a ctime it sees."""
    while True:
        with tempfile.NamedTemporaryFile(dir=where) as fh:
            if os.fstat(fh.fileno()).st_ctime_ns > ctime_ns:
                return
