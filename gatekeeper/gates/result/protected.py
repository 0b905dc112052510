"""Protected paths: a candidate that touches one is blocked, not merely flagged.

Built in: the policy file, CI configuration, hook managers, agent configuration,
git metadata files, oms' own files and scanner configuration and ignore files;
plus `[protected] paths` from the base policy. Patterns: `*` and `?` within a
path segment, `**` across segments, a trailing `/` for a whole directory; a
pattern with no `/` matches that name at any depth. Matching ignores case: on a
case-insensitive filesystem (macOS, Windows) `.GitHub/Workflows/x.yml` is the CI
file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from gatekeeper.gates.result.verdict import ProtectedChange
from gatekeeper.repo.change import FileChange

BUILTIN = (
    # oms itself and the policy
    "oms.toml", ".oms/", "oms.lock",
    # CI: every system the docs name, in each spelling it reads
    ".github/", ".gitlab-ci.yml", ".gitlab-ci.yaml", ".gitlab/", ".circleci/", ".travis.yml",
    ".travis.yaml", "Jenkinsfile", "Jenkinsfile.*", "azure-pipelines.yml",
    "azure-pipelines.yaml", ".azure-pipelines/", "bitbucket-pipelines.yml",
    "bitbucket-pipelines.yaml", ".buildkite/", ".drone.yml", ".drone.yaml", ".drone.jsonnet",
    ".drone.star", ".woodpecker.yml", ".woodpecker.yaml", ".woodpecker/", ".gitea/workflows/",
    ".forgejo/workflows/", ".gitea/actions/", ".forgejo/actions/", "appveyor.yml",
    ".appveyor.yml", ".cirrus.yml", ".cirrus.star", "cloudbuild.yaml", "cloudbuild.yml",
    "buildspec.yml", ".semaphore/", "codemagic.yaml", "bitrise.yml", ".ci/",
    # hook managers and environment loaders: they run code on a developer's machine
    ".pre-commit-config.yaml", ".pre-commit-config.yml", ".pre-commit-hooks.yaml", ".husky/",
    "lefthook.yml", "lefthook.yaml", ".lefthook.yml", ".lefthook.yaml", "lefthook-local.yml",
    "lefthook-local.yaml", ".lefthook/", ".envrc", ".devcontainer/", ".devcontainer.json",
    ".vscode/tasks.json", ".vscode/settings.json", ".vscode/launch.json",
    # agent configuration: instructions, hooks and MCP servers an agent obeys
    ".claude/", "CLAUDE.md", "CLAUDE.local.md", ".mcp.json", ".codex/", ".cursor/",
    ".cursorrules", ".agents/", "AGENTS.md", "AGENTS.override.md", ".windsurfrules",
    ".aider.conf.yml", ".continue/", ".gemini/", "GEMINI.md",
    # git metadata
    ".gitmodules", ".gitattributes", ".git/", ".mailmap",
    # scanner configuration and ignore files
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
    # Case-insensitive: on a case-insensitive filesystem `.GitHub/` is `.github/`.
    return re.compile(f"{prefix}{core}{suffix}", re.DOTALL | re.IGNORECASE)


def matches(path: str, patterns: Iterable[str]) -> str | None:
    """The first pattern that `path` falls under, or None."""
    for pattern in patterns:
        if _compile(pattern.lstrip("/")).fullmatch(path):
            return pattern
    return None


def protected_changes(
    files: Sequence[FileChange], extra: Sequence[str]
) -> tuple[ProtectedChange, ...]:
    """Every change to a built-in or policy-named protected path, with its pattern."""
    patterns = (*BUILTIN, *extra)
    hits = []
    for f in files:
        pattern = matches(f.path, patterns)
        if pattern is not None:
            hits.append(ProtectedChange.of(f, pattern))
    return tuple(hits)
