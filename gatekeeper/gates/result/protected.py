"""Protected paths: a candidate that touches one is blocked, not merely flagged.

Built in: the policy file, CI configuration, hook managers, agent configuration,
git metadata files, oms' own files and scanner configuration and ignore files;
plus `[protected] paths` from the base policy, in the pattern language of
`policy/paths.py` (case ignored: on a case-insensitive filesystem
`.GitHub/Workflows/x.yml` is the CI file).
"""

from __future__ import annotations

from collections.abc import Sequence

from gatekeeper.gates.result.verdict import ProtectedChange
from gatekeeper.repo.change import FileChange
from policy.paths import matches

__all__ = ["BUILTIN", "matches", "protected_changes"]

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
