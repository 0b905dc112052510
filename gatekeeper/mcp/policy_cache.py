"""The policy at a commit for a long-lived server, parsed once per policy blob id."""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from pathlib import Path

from gatekeeper.repo.git import git
from gatekeeper.repo.policy import read_policy_at
from policy import POLICY_FILE, LoadedPolicy, PolicyError

POLICY_CACHE_SIZE = 16  # policy blobs remembered, parsed or refused


class PolicyCache:
    """The policy at a commit, parsed once per policy blob id.

    The server lives long and the blob is untrusted text: parsing it again on every
    tool call would repeat whatever cost it imposes. A refusal is remembered too.
    """

    def __init__(self, repo_top: Path) -> None:
        self._top = repo_top
        self._parsed: OrderedDict[str, LoadedPolicy | PolicyError] = OrderedDict()
        self._lock = threading.Lock()  # tools run in worker threads

    def at(self, sha: str) -> LoadedPolicy:
        blob = self._blob_id(sha)
        if blob is None:  # absent (the defaults) or not a regular file (refused): no parse
            return read_policy_at(self._top, sha)
        with self._lock:
            hit = self._parsed.get(blob)
            if hit is None:
                hit = self._parse(sha)
                self._parsed[blob] = hit
                while len(self._parsed) > POLICY_CACHE_SIZE:
                    self._parsed.popitem(last=False)
        if isinstance(hit, PolicyError):
            raise PolicyError(str(hit))
        return dataclasses.replace(hit, origin=f"{sha[:12]}:{POLICY_FILE}")

    def _parse(self, sha: str) -> LoadedPolicy | PolicyError:
        try:
            return read_policy_at(self._top, sha)
        except PolicyError as exc:
            return exc

    def _blob_id(self, sha: str) -> str | None:
        listing = git(self._top, "ls-tree", "-z", "--full-tree", sha, "--", POLICY_FILE)
        fields = listing.partition(b"\t")[0].decode("ascii", "replace").split()
        if len(fields) == 3 and fields[0] in ("100644", "100755") and fields[1] == "blob":
            return fields[2]
        return None
