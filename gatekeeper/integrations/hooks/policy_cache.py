"""The trusted policy a hook needs, kept between hook calls (issue 33): for hooks only.

A hook runs on every tool call; finding the trusted mark and reading `oms.toml` there costs
git processes and the evidence log each time. This cache keeps what the hook needs (the
policy's bytes at the mark, its blob id, the protected-path list) in
`$OMS_HOME/cache/hook-policy/<repo-id>.json`, owner-only, written atomically, HMAC'd with the
cache directory's key under its own domain. An entry answers only when everything the mark
depends on is what it was when the entry was made, all read from files with no git run: the
repository id, the default branch's ref and tip, the evidence log's size, inode and mtime
(an append, a mark included, changes them), and oms' version. A missing, corrupt, foreign,
mismatched or unreadable entry is a miss: the hook then reads the policy as the gates do.

The gates never read this cache: they find the mark and read the policy themselves
(gates/mark.py). A hook's answer is only ever a refusal or silence on the host.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from evidence import StoreUnavailable, state_root
from evidence.state import atomic_write, check_state_dirs
from gatekeeper.dists import dist_version
from gatekeeper.errors import OmsError
from gatekeeper.repo.git import Repo
from gatekeeper.repo.refs import default_branch_named

if TYPE_CHECKING:
    from gatekeeper.scan.policy import ScanPin
    from policy import LoadedPolicy

# gatekeeper.scan.policy (the scanners, the scan cache) is imported where a scan or an
# entry needs it: a Bash call's hook never does.

FORMAT = 1
DOMAIN = b"oms hook-policy v1\x00"
SUBDIR = "hook-policy"
MAX_ENTRY_BYTES = 1 << 20
DEFAULTS = "built-in defaults"


@dataclass(frozen=True)
class HookPolicy:
    """What a hook reads of the trusted policy: its protected paths (the extra ones the
    policy names), what a scan takes of it, and the policy itself, parsed only on demand."""

    protected: tuple[str, ...]
    scan: ScanPin | None  # None: not known without the model (built-in defaults, a miss)
    source: bytes | None  # oms.toml at the mark; None: no file there, the built-in defaults
    origin: str

    @classmethod
    def of(cls, loaded: LoadedPolicy, source: bytes | None) -> HookPolicy:
        from gatekeeper.scan.policy import ScanPin

        return cls(tuple(loaded.policy.protected.paths), ScanPin.of(loaded), source,
                   loaded.origin)  # fmt: skip

    def pin(self) -> ScanPin:
        """What a scan takes of the policy: the cached copy, else from the parsed model."""
        from gatekeeper.scan.policy import ScanPin

        return self.scan if self.scan is not None else ScanPin.of(self.loaded())

    def loaded(self) -> LoadedPolicy:
        from policy import default_policy, parse_policy  # a scan needs the model; a path no

        return default_policy() if self.source is None else parse_policy(self.source, self.origin)


@cache
def _oms_version() -> str:
    return dist_version("oh-my-super-agent") or "unknown"


def _path(repo_id: str) -> Path:
    return state_root() / "cache" / SUBDIR / f"{repo_id}.json"


def facts(repo: Repo) -> dict[str, object]:
    """What the trusted policy depends on, read from files only (module docstring)."""
    ref, tip = default_branch_named(repo)
    log = os.stat(state_root() / "repos" / repo.repo_id / "evidence" / "log.jsonl")
    return {"format": FORMAT, "oms": _oms_version(), "repo_id": repo.repo_id, "ref": ref,
            "tip": tip, "log": [log.st_size, log.st_ino, log.st_mtime_ns]}  # fmt: skip


def _mac(key: bytes, body: bytes) -> str:
    return hmac.digest(key, DOMAIN + body, "sha256").hex()


def _key() -> bytes:
    from gatekeeper.scan.cache import mac_key  # the scan cache's key, one per state root

    return mac_key()


def lookup(repo: Repo) -> HookPolicy | None:
    """The cached policy for this repository as it stands now, or None (any doubt)."""
    from gatekeeper.scan.policy import ScanPin

    try:
        want = facts(repo)
        fd = os.open(_path(repo.repo_id), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            doc = json.loads(fh.read(MAX_ENTRY_BYTES + 1))
        body = json.dumps(doc["entry"], sort_keys=True).encode()
        if not hmac.compare_digest(str(doc["mac"]), _mac(_key(), body)):
            return None
        entry = doc["entry"]
        if entry["facts"] != want:
            return None
        source = entry["source"]
        raw = None if source is None else base64.b64decode(source, validate=True)
        if raw is not None and _blob_id(raw, str(entry["commit"])) != entry["blob"]:
            return None
        protected, scan = entry["protected"], entry["scan"]
        if not (_texts(protected) and _texts(scan["allow_fingerprints"])):
            return None
        pin = ScanPin(str(scan["gitleaks_sha256"]), int(scan["timeout_s"]),
                      tuple(scan["allow_fingerprints"]))  # fmt: skip
        return HookPolicy(tuple(protected), pin, raw, str(entry["origin"]))
    except (OSError, ValueError, KeyError, TypeError, OmsError, StoreUnavailable):
        return None


def remember(repo: Repo, known: dict[str, object], commit: str, loaded: LoadedPolicy,
             source: bytes | None) -> None:  # fmt: skip
    """Store the policy read at the mark `commit` under the facts `known` before it was read
    (a change meanwhile makes the entry a miss next time); a failure costs only a re-read."""
    from gatekeeper.scan.policy import ScanPin

    blob = None if source is None else _blob_id(source, commit)
    pin = ScanPin.of(loaded)
    entry = {
        "facts": known,
        "commit": commit,
        "blob": blob,
        "origin": loaded.origin,
        "digest": loaded.digest,
        "protected": list(loaded.policy.protected.paths),
        "scan": {
            "gitleaks_sha256": pin.gitleaks_sha256,
            "timeout_s": pin.timeout_s,
            "allow_fingerprints": list(pin.allow_fingerprints),
        },
        "source": None if source is None else base64.b64encode(source).decode("ascii"),
    }
    body = json.dumps(entry, sort_keys=True).encode()
    try:
        doc = json.dumps({"entry": entry, "mac": _mac(_key(), body)}).encode()
        root = state_root()
        check_state_dirs(root, f"cache/{SUBDIR}", create=True)
        atomic_write(_path(repo.repo_id), doc, durable=False)
    except (OSError, OmsError, StoreUnavailable):
        return


def _texts(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _blob_id(data: bytes, commit: str) -> str:
    """The git blob id of `data` in the repository of `commit` (SHA-256 ids are 64 digits)."""
    algo = "sha256" if len(commit) == 64 else "sha1"
    return hashlib.new(algo, b"blob %d\x00" % len(data) + data).hexdigest()
