"""`oms install claude-code|codex`: wire oms into an agent client in one command.

It writes the `oms` MCP server entry, the hooks (`<absolute oms> hook CLIENT EVENT`) with
time-outs from the trusted base's policy, and a short section in CLAUDE.md / AGENTS.md;
`--uninstall` takes out exactly those. Every file is planned first (before and after
bytes), so `--dry-run` shows the same changes that a real run writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gatekeeper.errors import UsageError
from gatekeeper.gates.mark import base_policy
from gatekeeper.integrations import oms_command
from gatekeeper.integrations.install import changes, claude, codex
from gatekeeper.integrations.install.changes import FileEdit
from gatekeeper.integrations.install.entries import gate_budget_s, hooks_for, mcp_server
from gatekeeper.repo.git import open_repo
from policy import DEFAULT_POLICY, Policy

Client = Literal["claude-code", "codex"]
Scope = Literal["user", "project"]
CONTAINMENT = ("the hooks run inside the agent's own process tree: they are advisory against "
               "a hostile agent; for containment run it under `oms agent run`")  # fmt: skip


@dataclass(frozen=True)
class InstallRequest:
    client: Client
    scope: Scope
    repo: Path
    dry_run: bool = False
    uninstall: bool = False


@dataclass(frozen=True)
class InstallReport:
    request: InstallRequest
    edits: tuple[FileEdit, ...]
    notes: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return any(edit.status != "unchanged" for edit in self.edits)

    def to_json(self) -> dict[str, Any]:
        r = self.request
        files = [{"path": str(e.path), "status": e.status, "what": list(e.what)}
                 for e in self.edits]  # fmt: skip
        return {"client": r.client, "scope": r.scope, "uninstall": r.uninstall,
                "dry_run": r.dry_run, "changed": self.changed, "files": files,
                "notes": list(self.notes)}  # fmt: skip


def trusted_policy(path: Path, need_repo: bool) -> tuple[Path | None, Policy, str | None]:
    """(repository top or None, the trusted base's policy, a note when it is the defaults).
    A bad policy is refused; no repository (unless `need_repo`) or no default branch yet
    means the built-in defaults, said so."""
    try:
        repo = open_repo(path)
    except UsageError:
        if need_repo:
            raise
        return None, DEFAULT_POLICY, "time-outs from the built-in policy (no repository here)"
    try:
        return repo.top, base_policy(repo)[1].policy, None
    except UsageError as exc:  # no default branch yet: the defaults, said so
        return repo.top, DEFAULT_POLICY, f"time-outs from the built-in policy ({exc.message})"


def _notes(request: InstallRequest, edits: tuple[FileEdit, ...]) -> list[str]:
    notes = [CONTAINMENT]
    if request.scope == "project" and not request.uninstall:
        notes.append("commit these files yourself: they are protected paths, so a candidate "
                     "commit that changes them is blocked by the result gate")  # fmt: skip
    if request.client == "codex" and not request.uninstall:
        notes.append("Codex runs new hooks only once you review and trust them (`/hooks`)")
        if request.scope == "project":
            notes.append("Codex loads a project's .codex/ only when the project is trusted")
    if request.client == "claude-code" and request.scope == "project" and not request.uninstall:
        notes.append("Claude Code asks you to approve the project's .mcp.json server once")
    return notes


def install(request: InstallRequest) -> InstallReport:
    """Plan every file's edit, then (unless a dry run) write the ones that change."""
    top, policy, note = trusted_policy(request.repo, request.scope == "project")
    home = Path.home()
    prefix = oms_command()
    server = mcp_server(prefix)
    hooks = hooks_for(request.client, policy)
    project_top = top if request.scope == "project" else None
    install_ = not request.uninstall
    if request.client == "claude-code":
        planned = claude.edits(request.scope, home, project_top, prefix, server, hooks, install_)
    else:
        planned = codex.edits(request.scope, home, project_top, prefix, server, hooks,
                              gate_budget_s(policy), install_)  # fmt: skip
    edits = tuple(planned)
    if not request.dry_run:
        changes.apply(edits)
    notes = _notes(request, edits) + ([note] if note else [])
    return InstallReport(request, edits, tuple(notes))
