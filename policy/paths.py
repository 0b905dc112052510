"""The path patterns of `oms.toml` (`[protected] paths`, `[scanners] exclude_paths`, a
`[[scanners.allow]]` entry's `paths`).

`*` and `?` within a path segment, `**` across segments, a trailing `/` for a whole
directory; a pattern with no `/` matches that name at any depth. Matching ignores case:
on a case-insensitive filesystem (macOS, Windows) `.GitHub/Workflows/x.yml` is the CI
file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache


@lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str]:
    directory = pattern.endswith("/")
    body = pattern.rstrip("/")
    anchored = "/" in body
    out = []
    i = 0
    while i < len(body):
        if body.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif body.startswith("**", i):
            out.append(".*")
            i += 2
        elif body[i] == "*":
            out.append("[^/]*")
            i += 1
        elif body[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(body[i]))
            i += 1
    core = "".join(out)
    prefix = "" if anchored else "(?:.*/)?"
    suffix = "(?:/.*)?" if directory else ""
    # Case-insensitive: on a case-insensitive filesystem `.GitHub/` is `.github/`.
    return re.compile(f"{prefix}{core}{suffix}", re.DOTALL | re.IGNORECASE)


def matches(path: str, patterns: Iterable[str]) -> str | None:
    """The first pattern that `path` falls under, or None."""
    for pattern in patterns:
        if _compile(pattern.lstrip("/")).fullmatch(path):
            return pattern
    return None
