"""A makefile or justfile read as rules (`Script`): the shape the make and just readers fill
and `targets` compares."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class Script:
    """A makefile or justfile read as rules: each target's header lines (rule line,
    attributes) and body (recipe lines), its prerequisites; the top-level lines, the
    include lines and the paths they name; the default target. `opaque`: a target or
    prerequisite name could not be resolved, so every rule counts as reached."""

    headers: dict[str, list[str]] = field(default_factory=dict)
    bodies: dict[str, list[str]] = field(default_factory=dict)
    deps: dict[str, list[str]] = field(default_factory=dict)
    top: list[str] = field(default_factory=list)
    include_lines: list[str] = field(default_factory=list)
    includes: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    first: str | None = None
    opaque: bool = False

    def rule(self, target: str, header: str, deps: Iterable[str]) -> None:
        self.headers.setdefault(target, []).append(header)
        self.deps.setdefault(target, []).extend(deps)

    def recipe(self, targets: Iterable[str], line: str) -> None:
        for t in targets:
            self.bodies.setdefault(t, []).append(line)


def stem_of(pattern: str, name: str) -> str | None:
    pre, pct, suf = pattern.partition("%")
    fits = len(name) >= len(pre) + len(suf) and name.startswith(pre) and name.endswith(suf)
    return name[len(pre) : len(name) - len(suf)] if pct and fits else None
