"""Per-run canaries: a random token planted in `$OMS_HOME/canaries/<run-id>` before an agent
starts. The agent never sees the state root, so the token showing up in its provider traffic
(the egress broker) or in its result (the result gate) means the containment leaked; both
alarm and block. A canary is named by its run id, never by its value.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path

from evidence import state_root
from evidence.state import atomic_write, ensure_private_dir
from gatekeeper.errors import UsageError

CANARY_DIR = "canaries"
TOKEN_RE = re.compile(r"^oms-canary-[0-9a-f]{32}$")
_ANY_TOKEN = re.compile(r"oms-canary-[0-9a-f]{32}")
_NAME_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,127}$")
_MAX_FILE = 256


def canary_dir() -> Path:
    return state_root() / CANARY_DIR


def plant_canary(run_id: str) -> str:
    """Write a fresh token for `run_id` (file mode 0600, directory 0700); return it."""
    if not _NAME_RE.match(run_id):
        raise UsageError(f"not a run id: {run_id[:80]!r}")
    token = f"oms-canary-{secrets.token_hex(16)}"
    ensure_private_dir(canary_dir(), state_root())
    atomic_write(canary_dir() / run_id, (token + "\n").encode(), mode=0o600)
    return token


def _read_token(d: int, name: str) -> str | None:
    """The token in one canary file, None for anything that is not a canary file."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=d)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, _MAX_FILE).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    return text if TOKEN_RE.match(text) else None


def canaries() -> dict[str, str]:
    """run id -> token of every canary in the state root now ({} when there is none)."""
    try:
        d = os.open(canary_dir(), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    try:
        found = {}
        for name in sorted(os.listdir(d)):
            token = None if name.startswith(".") else _read_token(d, name)
            if token is not None:
                found[name] = token
        return found
    finally:
        os.close(d)


def canary_tokens() -> list[str]:
    """Every canary token currently planted (for the egress broker and the result gate)."""
    return list(canaries().values())


def canaries_in(text: str, planted: dict[str, str]) -> list[str]:
    """The run ids whose token appears in `text`: one pass over the text however many runs
    planted a canary (they stay planted, so that a late leak is still caught)."""
    seen = set(_ANY_TOKEN.findall(text))
    return [run for run, token in planted.items() if token in seen] if seen else []
