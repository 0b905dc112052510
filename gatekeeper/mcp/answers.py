"""What the repo gateway answers: frozen values whose `to_json()` is the tool's JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gatekeeper.mcp.bounds import Page


@dataclass(frozen=True)
class Listing:
    """One page of served file names."""

    files: tuple[str, ...]
    total: int
    offset: int

    @property
    def next_offset(self) -> int | None:
        nxt = self.offset + len(self.files)
        return nxt if nxt < self.total else None

    def to_json(self) -> dict[str, Any]:
        return {"files": list(self.files), "total": self.total, "offset": self.offset,
                "next_offset": self.next_offset,
                "truncated": self.next_offset is not None}  # fmt: skip


@dataclass(frozen=True)
class FileText:
    """One page of a redacted text file."""

    path: str
    page: Page
    redacted_findings: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, **self.page.to_json(),
                "redacted_findings": self.redacted_findings}  # fmt: skip


@dataclass(frozen=True)
class Hit:
    path: str
    line: int
    text: str  # the line, cut to 200 characters

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "text": self.text}


@dataclass(frozen=True)
class Matches:
    """Search hits on lines without findings; `redacted_findings` counts every withheld
    line of the searched files, whatever the query."""

    results: tuple[Hit, ...]
    truncated: bool
    redacted_findings: int

    def to_json(self) -> dict[str, Any]:
        return {"results": [h.to_json() for h in self.results], "truncated": self.truncated,
                "redacted_findings": self.redacted_findings}  # fmt: skip


@dataclass(frozen=True)
class DiffText:
    """One page of the redacted worktree diff, and how many files differ."""

    page: Page
    redacted_findings: int
    files: int

    def to_json(self) -> dict[str, Any]:
        return {**self.page.to_json(), "redacted_findings": self.redacted_findings,
                "files": self.files}  # fmt: skip
