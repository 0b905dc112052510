"""The typed event store, the conductor's notification batches and the request-only outbox.

Used inside one fenced transaction (`Work.fenced`): `record` inserts events by their stable
key (a key seen before is skipped: idempotent, nothing doubled), `notify` appends ONE batch
naming only the new events' opaque keys, and the caller's one evidence entry covers both.
An event's body is bounded canonical JSON of typed fields: data, never a command.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import rfc8785

from gatekeeper.errors import UsageError
from gatekeeper.work import payloads as p
from gatekeeper.work.conductor.model import new_id

MAX_EVENT_BYTES = 8 << 10
MAX_KEY_CHARS = 200
# Kinds: GitHub (`gh.issue`, `gh.comment`, `gh.label`, `gh.branch`, `gh.pr`, `gh.review`,
# `gh.check`), provider hooks (`hook.session`, `hook.activity`, `hook.completion-observed`,
# `hook.quota`), oms' own state changes the conductor is woken for (`work.receipt`,
# `work.verdict`, `work.delivery`, `work.resume`, `work.ticket`), and the outbox's
# request-only `slack.request`.
KIND_PREFIXES = ("gh.", "hook.", "work.", "slack.")


@dataclass(frozen=True)
class TypedEvent:
    key: str  # stable: the same fact always has the same key
    kind: str
    body: Mapping[str, Any]

    def encoded(self) -> str:
        if not self.key or len(self.key) > MAX_KEY_CHARS or not self.key.isprintable():
            raise UsageError(f"not an event key: {self.key[:80]!r}")
        if not self.kind.startswith(KIND_PREFIXES):
            raise UsageError(f"not an event kind: {self.kind[:80]!r}")
        text = bytes(rfc8785.dumps(dict(self.body))).decode()
        if len(text) > MAX_EVENT_BYTES:
            raise UsageError(f"event {self.key[:80]} is larger than {MAX_EVENT_BYTES} bytes")
        return text


def record(tx: Any, events: Sequence[TypedEvent]) -> list[str]:
    """Insert the events not seen before (by key); the keys of those that are new, in order.
    `tx` is the fence's transaction; each row gets the entry's seq once it is appended."""
    new: list[str] = []
    for e in events:
        body = e.encoded()
        if tx.run("INSERT OR IGNORE INTO events (key, kind, body, created) VALUES (?, ?, ?, ?)",
                  e.key, e.kind, body, tx.now):  # fmt: skip
            new.append(e.key)
    if new:
        keys = list(new)

        def stamp(seq: int) -> None:
            tx.conn.executemany("UPDATE events SET seq = ? WHERE key = ?",
                                [(seq, k) for k in keys])  # fmt: skip

        tx.after.append(stamp)
    return new


def notify(tx: Any, keys: Sequence[str]) -> str | None:
    """ONE pending conductor notification naming `keys` (opaque ids only); None when there
    is nothing new, or when the very same set was notified before (replay-safe)."""
    if not keys:
        return None
    listed = json.dumps(sorted(keys))
    digest = "sha256:" + hashlib.sha256(listed.encode()).hexdigest()
    if tx.one("SELECT id FROM batches WHERE digest = ?", digest) is not None:
        return None
    batch = new_id("n")
    tx.run("INSERT INTO batches (id, events, digest, version, state, seq, created, updated) "
           "VALUES (?, ?, ?, 1, 'pending', 0, ?, ?)",
           batch, listed, digest, tx.now, tx.now)  # fmt: skip
    tx.after.append(lambda seq: tx.run("UPDATE batches SET seq = ? WHERE id = ?", seq, batch))
    return batch


def notify_change(tx: Any, kind: str, key: str, body: Mapping[str, p.Small]) -> str | None:
    """A state change the conductor acts on (a receipt, a verdict, a delivery, a resumed
    lane) as ONE event
    and ONE pending notification, inside the transaction that makes the change: neither
    exists without the other. `body` holds opaque ids and states only, never a title, a
    body, a commit message or any text from GitHub or a model."""
    return notify(tx, record(tx, [TypedEvent(key, kind, body)]))


def request(tx: Any, key: str, kind: str, body: Mapping[str, Any]) -> bool:
    """A request-only outbox row (`slack.request`): written, never sent by oms. False when
    the key was there already."""
    text = TypedEvent(key, kind, body).encoded()
    return bool(tx.run("INSERT OR IGNORE INTO outbox (key, kind, body, state, created, "
                       "updated) VALUES (?, ?, ?, 'pending', ?, ?)",
                       key, kind, text, tx.now, tx.now))  # fmt: skip
