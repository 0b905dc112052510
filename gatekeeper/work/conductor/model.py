"""Ids and bounds of the conductor's records (tables in `gatekeeper.work.db`, schema v3)."""

from __future__ import annotations

import re
import secrets

CONDUCTOR_ID_RE = re.compile(r"^c-[0-9a-f]{12}$")
INTENT_ID_RE = re.compile(r"^i-[0-9a-f]{12}$")
WORKER_ID_RE = re.compile(r"^w-[0-9a-f]{12}$")
TEAM_ID_RE = re.compile(r"^team-[0-9a-f]{12}$")
BATCH_ID_RE = re.compile(r"^n-[0-9a-f]{12}$")

# The tmux session every repository's conductor lives in, on oms' private socket.
SESSION_PREFIX = "oms-"
# What a bridge tool returns of freeform text: never more than this, and only as JSON.
MAX_STATUS_CHARS = 200
# A dispatch intent's freeform task body (a JSON field, never argv).
MAX_INTENT_BYTES = 64 << 10


def new_id(prefix: str) -> str:
    """`<prefix>-<12 hex>`: c (conductor), i (intent), w (worker), team, n (batch)."""
    return f"{prefix}-{secrets.token_hex(6)}"
