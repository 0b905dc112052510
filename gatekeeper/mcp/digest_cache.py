"""The MCP tools digest `oms doctor` reports, remembered so doctor need not load the MCP SDK.

Computing the digest builds the server (the SDK and every tool module: about a second).
What the digest is a function of is cheap to name: the profile served, oms' own code (every
source file of `gatekeeper` and `policy`, by content) and the SDK that renders the tool
definitions (each package's location and its `__init__`'s inode, size and mtime: an install
or upgrade rewrites them). Their SHA-256 is the key; `$OMS_HOME/cache/mcp-tools-<profile>.json`
holds the key and the digest computed for it. A file that is absent, unreadable, malformed or
written for another key is a miss, and the digest is computed as before and stored. The
digest stays informational (`digest_for_doctor`): never a reason to be ready.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from pathlib import Path

from evidence.errors import StoreUnavailable
from evidence.state import atomic_write, check_state_dirs, state_root
from gatekeeper.errors import OmsError
from gatekeeper.mcp.profile import Profile, profile_for
from gatekeeper.repo.git import open_repo

FORMAT = 1
CODE_PACKAGES = ("gatekeeper", "policy")
SDK_PACKAGES = ("mcp", "mcp_types", "pydantic", "pydantic_core", "rfc8785")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def cache_key(profile: Profile) -> str:
    """SHA-256 over everything the tools digest of `profile` depends on (OSError when a
    source cannot be read)."""
    h = hashlib.sha256(b"oms-mcp-tools-digest\x00%d\x00%s\x00" % (FORMAT, profile.encode()))
    for name in CODE_PACKAGES:
        top = Path(__file__).resolve().parents[2] / name
        for path in sorted(top.rglob("*.py")):
            data = path.read_bytes()
            rel = path.relative_to(top.parent).as_posix()
            h.update(b"%s %d\x00" % (rel.encode(), len(data)) + data)
    for name in SDK_PACKAGES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None and spec.origin else ""
        st = os.stat(origin) if origin else None
        shown = (st.st_ino, st.st_size, st.st_mtime_ns) if st else ()
        h.update(f"{name} {origin} {shown}\x00".encode())
    return h.hexdigest()


def cache_file(profile: Profile, root: Path | None = None) -> Path:
    return (root or state_root()) / "cache" / f"mcp-tools-{profile}.json"


def cached(path: Path, key: str) -> str | None:
    """The digest stored for `key`, or None (a miss) on any doubt."""
    try:
        with open(path, "rb") as fh:
            entry = json.loads(fh.read(4096))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != key:
        return None
    digest = entry.get("digest")
    return digest if isinstance(digest, str) and _DIGEST.fullmatch(digest) else None


def store(path: Path, key: str, digest: str) -> None:
    """Remember `digest` for `key`; a cache that cannot be written is no cache."""
    try:
        check_state_dirs(path.parent.parent, path.parent.name, create=True)
        entry = {"format": FORMAT, "key": key, "digest": digest}
        atomic_write(path, json.dumps(entry).encode(), durable=False)
    except (OSError, StoreUnavailable):
        pass


def doctor_digest(repo_dir: Path) -> str:
    """`digest_for_doctor`'s answer for the repository at `repo_dir`, from the cache when
    its key matches; otherwise computed (loading the SDK) and stored."""
    try:
        profile = profile_for(open_repo(repo_dir), None)
        key = cache_key(profile)
    except (OmsError, OSError):
        from gatekeeper.mcp.server import digest_for_doctor

        return digest_for_doctor(repo_dir)
    path = cache_file(profile)
    hit = cached(path, key)
    if hit is not None:
        return hit
    from gatekeeper.mcp.server import digest_for_doctor

    digest = digest_for_doctor(repo_dir, profile)
    if _DIGEST.fullmatch(digest):  # "unavailable: …" is said, never remembered
        store(path, key, digest)
    return digest
