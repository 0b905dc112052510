"""One ticket's Codex session across its attempts: the long-running lane of a Codex worker.

A run's CODEX_HOME is fresh and goes with the run (gatekeeper/agent/kinds.py), so Codex's
session (its rollout file, `sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`) would be lost
and `codex exec resume` would have nothing to resume. The worker's caller names a store,
owner-only under `$OMS_HOME` (never inside the repository, never bound into a sandbox),
one per ticket: before the run, the stored rollout is copied into the fresh CODEX_HOME;
after it, the newest rollout the run left is read back without following a link, as a
regular file of bounded size whose name is a rollout's, and becomes the stored one, with
its session id in `session.json`. A resumed session is written as a new rollout holding
the whole history, so the newest one is always the one to resume next.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from evidence.errors import StoreUnavailable
from evidence.state import atomic_write, ensure_private_dir
from gatekeeper.errors import ConfigError
from gatekeeper.repo.fsread import FileRefused, RepoFiles

MAX_BYTES = 32 << 20  # a rollout of a long session; anything larger is not kept
SESSION_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
ROLLOUT_RE = re.compile(
    r"^sessions/[0-9]{4}/[0-9]{2}/[0-9]{2}/rollout-[0-9T-]{19}-"
    r"(?P<id>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$"
)
META, ROLLOUT = "session.json", "rollout.jsonl"
CODEX_DIR = ".codex"  # the run's CODEX_HOME below its home (kinds.py)


def stored_session(store: Path) -> str | None:
    """The session id the store holds (None: none, or not a well-formed one)."""
    meta = _meta(store)
    return meta[0] if meta else None


def _meta(store: Path) -> tuple[str, str] | None:
    try:
        with RepoFiles(store) as files:
            doc = json.loads(files.read(META, 4096))
    except (FileRefused, OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    sid, rel = doc.get("id"), doc.get("path")
    if not isinstance(sid, str) or not isinstance(rel, str):
        return None
    found = ROLLOUT_RE.fullmatch(rel)
    return (sid, rel) if found and found["id"] == sid else None


def seed(store: Path, home: Path) -> str | None:
    """The stored rollout copied into the run's fresh CODEX_HOME (0600); its session id."""
    meta = _meta(store)
    if meta is None:
        return None
    try:
        with RepoFiles(store) as files:
            data = files.read(ROLLOUT, MAX_BYTES)
    except (FileRefused, OSError):
        return None
    target = home / CODEX_DIR / meta[1]
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return meta[0]


def _rollouts(conf: Path) -> list[str]:
    """The rollout names below `conf/sessions` (links are neither followed nor listed)."""
    out = []
    for top, dirs, names in os.walk(conf / "sessions", followlinks=False):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        for name in names:
            rel = os.path.relpath(os.path.join(top, name), conf)
            if ROLLOUT_RE.fullmatch(rel):
                out.append(rel)
    return out


def save(store: Path, home: Path) -> str | None:
    """After the agent ended: its newest rollout kept in the store; the session id kept,
    or None when there is none to keep. Never raises: a session that cannot be kept must
    not hide the run's own outcome (the next attempt then starts afresh)."""
    conf = home / CODEX_DIR
    # The name's time, then its id: the newest session the run wrote or resumed.
    for rel in sorted(_rollouts(conf), key=lambda r: r.rsplit("/", 1)[1], reverse=True):
        try:
            with RepoFiles(conf) as files:
                data = files.read(rel, MAX_BYTES)
        except (FileRefused, OSError):
            continue
        found = ROLLOUT_RE.fullmatch(rel)
        assert found is not None
        try:
            ensure_private_dir(store)
            atomic_write(store / ROLLOUT, data, mode=0o600)
            meta = json.dumps({"id": found["id"], "path": rel}).encode()
            atomic_write(store / META, meta, mode=0o600)
        except (StoreUnavailable, ConfigError, OSError):
            return None
        return found["id"]
    return None
