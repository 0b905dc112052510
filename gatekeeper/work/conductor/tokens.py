"""Lease tokens the conductor holds for its dispatches, kept by oms and never shown.

The conductor (a model) sees only opaque ids; the fencing token of a ticket's lease stays in
`$OMS_HOME/repos/<repo-id>/conductor/leases/<ticket>` (0600, in a 0700 directory, never
through a symlink), where the worker pane's oms process reads it to record the run and file
the receipt. The state root is out of every agent's reach (`oms agent run`).
"""

from __future__ import annotations

import os
from pathlib import Path

from evidence import state_root
from evidence.state import ensure_private_dir
from gatekeeper.errors import NotFound, UsageError
from gatekeeper.work.model import LEASE_TOKEN_RE, TICKET_ID_RE


def conductor_dir(repo_id: str, root: Path | None = None) -> Path:
    """The repository's private conductor directory (created 0700)."""
    base = root or state_root()
    path = base / "repos" / repo_id / "conductor"
    ensure_private_dir(path, base)
    return path


def _path(repo_id: str, ticket: str) -> Path:
    if not TICKET_ID_RE.fullmatch(ticket):
        raise UsageError(f"not a ticket id: {ticket[:40]!r}")
    d = conductor_dir(repo_id) / "leases"
    ensure_private_dir(d, state_root())
    return d / ticket


def keep(repo_id: str, ticket: str, token: str) -> None:
    if not LEASE_TOKEN_RE.fullmatch(token):
        raise UsageError("not a lease token")
    path = _path(repo_id, ticket)
    tmp = path.with_name(f".{ticket}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, token.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def held(repo_id: str, ticket: str) -> str:
    """The token oms holds for `ticket`'s lease; NotFound when it holds none."""
    try:
        fd = os.open(_path(repo_id, ticket), os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise NotFound(f"oms holds no lease of ticket {ticket}") from None
    try:
        token = os.read(fd, 256).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if not LEASE_TOKEN_RE.fullmatch(token):
        raise NotFound(f"oms holds no usable lease of ticket {ticket}")
    return token


def drop(repo_id: str, ticket: str) -> None:
    try:
        os.unlink(_path(repo_id, ticket))
    except FileNotFoundError:
        pass
