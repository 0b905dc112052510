"""Protected paths: a candidate that touches one is blocked, not merely flagged.

Built in: the policy file, CI configuration, git metadata files, oms' own files
and scanner configuration and ignore files; plus `[protected] paths` from the
base policy. Patterns: `*` and `?` within a path segment, `**` across
segments, a trailing `/` for a whole directory; a pattern with no `/` matches
that name at any depth.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from .change import FileChange

BUILTIN = (
    "oms.toml", ".oms/", "oms.lock",
    ".github/", ".gitlab-ci.yml", ".gitlab/", ".circleci/", ".travis.yml", "Jenkinsfile",
    "azure-pipelines.yml", "bitbucket-pipelines.yml", ".buildkite/", ".drone.yml",
    ".woodpecker.yml", ".woodpecker/", ".ci/", ".pre-commit-config.yaml",
    ".gitmodules", ".gitattributes", ".git/", ".mailmap",
    ".gitleaks.toml", ".gitleaksignore", "gitleaks.toml", ".secrets.baseline",
    ".detect-secrets.cfg", ".trufflehog.yml",
)  # fmt: skip


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
    return re.compile(f"{prefix}{core}{suffix}", re.DOTALL)


def matches(path: str, patterns: Iterable[str]) -> str | None:
    """The first pattern that `path` falls under, or None."""
    for pattern in patterns:
        if _compile(pattern.lstrip("/")).fullmatch(path):
            return pattern
    return None


def protected_changes(files: Sequence[FileChange], extra: Sequence[str]) -> list[dict[str, str]]:
    patterns = (*BUILTIN, *extra)
    hits = []
    for f in files:
        pattern = matches(f.path, patterns)
        if pattern is not None:
            hits.append({"path": f.path, "status": f.status, "pattern": pattern})
    return hits
