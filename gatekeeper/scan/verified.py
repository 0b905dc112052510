"""The Gitleaks binary's pinned digest, remembered between processes by the binary's fstat.

Hashing the 22 MB binary took ~35 ms in every hook, scan and gate (issue 33). A descriptor
that hashed to its pin is remembered as its fstat (device, inode, size, mtime, ctime, mode)
with that pin, in `$OMS_HOME/cache/gitleaks-verified.json`: owner-only, written atomically,
HMAC'd with the scan cache's key (`cache.mac_key`) under its own domain. The next descriptor
whose fstat is that, for that pin, is not hashed again; it is still the descriptor oms runs.

Anyone who can write the binary can set its mtime back, but not its ctime: every write, chmod
or rename sets it to the kernel's (coarse) clock. A record is made, and trusted, only when the
ctime was older than the time of recording by a margin (`sandbox.quiet_dirs.settled`): a write
in the same clock tick as the stat would otherwise leave it as it was. Any doubt is a miss and
a hash: no record, one that does not parse or verify, another pin, another fstat. Within one
process (the MCP server answers many reads) a hit or a record is also kept in memory.
`OMS_SCAN_CACHE=off` turns it off with the scan-result cache: a scan then writes nothing.
"""

from __future__ import annotations

import hmac
import json
import os
import time
from collections.abc import Sequence

from evidence import StoreUnavailable
from evidence.state import atomic_write
from gatekeeper.errors import OmsError
from gatekeeper.scan.cache import cache_dir, enabled, mac_key
from sandbox.quiet_dirs import settled

DOMAIN = b"oms gitleaks-verified v1\x00"
NAME = "gitleaks-verified.json"
MAX_BYTES = 4096
Ident = tuple[int, int, int, int, int, int]

_SEEN: set[tuple[str, Ident]] = set()  # in this process: hits and records


def ident(st: os.stat_result) -> Ident:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode


def _mac(key: bytes, body: bytes) -> str:
    return hmac.digest(key, DOMAIN + body, "sha256").hex()


def _body(pin: str, stat_ident: Sequence[int], reference_ns: int) -> bytes:
    return json.dumps([pin, list(stat_ident), reference_ns]).encode()


def known(st: os.stat_result, pin: str) -> bool:
    """True when a descriptor with this fstat was hashed to `pin` and nothing changed since."""
    want = ident(st)
    if (pin, want) in _SEEN:
        return True
    if not enabled():
        return False
    try:
        key = mac_key()  # first: it checks the state directories on the way
        fd = os.open(cache_dir() / NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            doc = json.loads(fh.read(MAX_BYTES + 1))
        got_pin, got, reference = doc["entry"]
        got_ident, reference = tuple(int(x) for x in got), int(reference)
        body = _body(str(got_pin), got_ident, reference)
        if not hmac.compare_digest(str(doc["mac"]), _mac(key, body)):
            return False
    except (OSError, ValueError, KeyError, TypeError, OmsError, StoreUnavailable):
        return False
    if got_pin != pin or got_ident != want or not settled(want[4], reference):
        return False
    _SEEN.add((pin, want))
    return True


def remember(st: os.stat_result, pin: str) -> None:
    """Record that the descriptor of this fstat hashed to `pin` (not when its ctime is recent;
    a failure costs only a hash next time)."""
    now = time.time_ns()
    if not settled(st.st_ctime_ns, now):
        return
    _SEEN.add((pin, ident(st)))
    if not enabled():
        return
    body = _body(pin, ident(st), now)
    try:
        doc = {"entry": json.loads(body), "mac": _mac(mac_key(), body)}
        atomic_write(cache_dir() / NAME, json.dumps(doc).encode(), durable=False)
    except (OSError, OmsError, StoreUnavailable):
        return
