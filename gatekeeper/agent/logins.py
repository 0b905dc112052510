"""Subscription logins under `--egress tunnel`: the one file of an agent CLI that outlives a run.

A run's config dir is fresh (gatekeeper/agent/kinds.py), so a CLI logged in with a
subscription (Claude Code's OAuth, Codex's ChatGPT sign-in) would ask for a new login every
run. Only its credential file persists, stored owner-only (0700 dir, 0600 file) at
`$XDG_DATA_HOME/oms/logins/<kind>/` (default `~/.local/share/oms/logins`), outside
`$OMS_HOME` and never bound into a sandbox: a run gets a copy of it in its fresh config dir,
and when the agent has ended, only that file is read back, without following a link, as a
regular file of bounded size holding a JSON object with the CLI's own keys. Only those keys
are written back, and only when they changed (a refreshed token). Nothing else the agent
wrote to its config (instructions, settings, hooks, MCP servers, agents) survives the run.

The agent can read its own login token: it is the CLI's credential, in the CLI's config dir.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence.errors import StoreUnavailable
from evidence.state import atomic_write, ensure_private_dir
from gatekeeper.agent.kinds import Egress, Kind
from gatekeeper.agent.workspace import data_home, outside_state
from gatekeeper.errors import ConfigError
from gatekeeper.repo.fsread import FileRefused, Missing, RepoFiles

MAX_BYTES = 64 * 1024  # a credential file is a few KB; anything larger is not one


@dataclass(frozen=True)
class Login:
    """Where a CLI keeps its login in its config dir, and the keys it holds."""

    config_dir: str  # below the run's home, as kinds.py makes it
    name: str
    required: tuple[str, ...]  # each a JSON object
    optional: tuple[str, ...] = ()


LOGINS: Mapping[Kind, Login] = {
    "claude-code": Login(".claude", ".credentials.json", ("claudeAiOauth",)),
    "codex": Login(
        ".codex", "auth.json", ("tokens",), ("OPENAI_API_KEY", "last_refresh", "auth_mode")
    ),
}


def logins_root(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_DATA_HOME/oms/logins` (default `~/.local/share/oms/logins`); ConfigError when it
    and the state root contain one another."""
    root = data_home(environ) / "oms" / "logins"
    return outside_state(root, "login dir", "XDG_DATA_HOME", environ)


def shaped(kind: Kind, data: bytes) -> bytes | None:
    """The credential file as oms writes it: a JSON object of the CLI's own keys only, the
    required ones objects; None for anything else."""
    login = LOGINS[kind]
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), dict) for k in login.required):
        return None
    kept: dict[str, Any] = {k: doc[k] for k in (*login.required, *login.optional) if k in doc}
    return (json.dumps(kept, indent=2) + "\n").encode()


def _stored(kind: Kind) -> Path:
    return logins_root() / kind / LOGINS[kind].name


def _read(kind: Kind, conf: Path) -> bytes | None:
    """The shaped credential file in `conf` (a link, a FIFO, too large, malformed: None)."""
    try:
        with RepoFiles(conf) as files:
            data = files.read(LOGINS[kind].name, MAX_BYTES)
    except (FileRefused, OSError):
        return None
    return shaped(kind, data)


def seed(kind: Kind, egress: Egress, home: Path) -> bytes | None:
    """Under a tunnel, a copy of the stored login in the run's fresh config dir (0600); the
    bytes given, or None when there is none (the CLI then asks for a login)."""
    if egress != "tunnel" or kind not in LOGINS:
        return None
    stored = _stored(kind)
    data = _read(kind, stored.parent) if stored.parent.is_dir() else None
    if data is None:
        return None
    target = home / LOGINS[kind].config_dir / LOGINS[kind].name
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return data


def save(kind: Kind, egress: Egress, home: Path, seeded: bytes | None) -> str | None:
    """After the agent ended: its credential file, shaped, back to the store when it changed.
    What happened, in a word or two ("saved", "unchanged", "none", "refused: …"); None when
    there is no login to keep (no tunnel, or a kind without one). Never raises: a login that
    cannot be kept must not hide the run's own outcome."""
    if egress != "tunnel" or kind not in LOGINS:
        return None
    conf = home / LOGINS[kind].config_dir
    try:
        with RepoFiles(conf) as files:
            data = files.read(LOGINS[kind].name, MAX_BYTES)
    except Missing:
        return "none"  # logged out, or never logged in: the stored login stays as it is
    except FileRefused as exc:
        return f"refused: {exc.reason}"
    except OSError:
        return "none"
    kept = shaped(kind, data)
    if kept is None:
        return "refused: not the CLI's credential file"
    if kept == seeded:
        return "unchanged"
    try:
        stored = _stored(kind)
        ensure_private_dir(stored.parent)
        atomic_write(stored, kept, mode=0o600)
    except (StoreUnavailable, ConfigError, OSError) as exc:
        return f"refused: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
    return "saved"


def hidden(environ: Mapping[str, str] | None = None) -> list[str]:
    """The login store, for the probe's list of what must be absent inside."""
    return [str(logins_root(environ))]
