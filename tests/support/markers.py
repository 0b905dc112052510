"""Programs that record that they ran: the hooks, filters and helpers oms must never run.

A test makes each vector (a hook, a clean filter, `core.fsmonitor`…) one of these, shows it
live under plain git, clears the markers, then asserts that oms ran none of them.
"""

from __future__ import annotations

import os
from pathlib import Path


class MarkerScripts:
    """Mixed into a test's lab, which has `root` (where scripts go) and `markers` (where
    each run leaves its name)."""

    root: Path
    markers: Path

    def marker_script(self, name: str, tail: str = "exit 0") -> Path:
        """An executable that records that it ran, then runs `tail` (e.g. `cat`, for a
        filter that passes its data through)."""
        path = self.root / f"run-{name}"
        path.write_text(f"#!/bin/sh\ntouch {self.markers}/{name}\n{tail}\n")
        path.chmod(0o755)
        return path

    def ran(self) -> list[str]:
        return sorted(os.listdir(self.markers))

    def clear(self) -> None:
        for m in os.listdir(self.markers):
            os.unlink(self.markers / m)
