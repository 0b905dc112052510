"""What every renderer takes: a command's kind, its `--json` data, its exit code."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

FORMATS = ("text", "json", "sarif", "markdown", "junit")
Kind = Literal["scan", "result"]


@dataclass(frozen=True)
class Report:
    """What a command produced: its kind, its `--json` data and exit code, its text lines
    (None: the data as indented JSON), and where its relative file names are rooted."""

    kind: Kind
    data: Mapping[str, Any]
    code: int
    text: Sequence[str] | None = None
    root: Path | None = None  # the repository's top: SARIF's %SRCROOT%
    cwd: Path | None = None  # where names given on the command line are relative to


def envelope(report: Report) -> dict[str, Any]:
    """The object `--json` prints: `ok`, `oms_exit_code`, then the command's own keys."""
    return {"ok": report.code == 0, "oms_exit_code": report.code, **report.data}
