"""The built-in protected paths (protected.py), apart from the gate's models: the hooks
deny writes to them on every tool call and import only this list."""

from __future__ import annotations

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
