"""The policy at a commit for a long-lived server, parsed once per policy blob id, looked
up once per commit."""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TypeVar

from gatekeeper.repo.git import Repo, git
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import read_ref, resolve_commit
from policy import POLICY_FILE, LoadedPolicy, PolicyError

POLICY_CACHE_SIZE = 16  # policy blobs remembered, parsed or refused
COMMITS_REMEMBERED = 256  # commits whose policy (or refusal) is remembered
V = TypeVar("V")


class PolicyCache:
    """The policy at a commit, parsed once per policy blob id.

    The server lives long and the blob is untrusted text: parsing it again on every
    tool call would repeat whatever cost it imposes. A refusal is remembered too.
    What a commit holds never changes (oms' git reads no replace objects), so the policy
    at a commit met before is answered without running git: a repeated read of HEAD's
    policy costs no subprocess, and a HEAD that moved is looked up afresh.
    """

    def __init__(self, repo_top: Path) -> None:
        self._top = repo_top
        self._parsed: OrderedDict[str, LoadedPolicy | PolicyError] = OrderedDict()
        self._commits: OrderedDict[str, LoadedPolicy | PolicyError] = OrderedDict()
        self._heads: OrderedDict[str, None] = OrderedDict()  # what HEAD resolved to before
        self._lock = threading.Lock()  # tools run in worker threads

    def at_head(self, repo: Repo) -> LoadedPolicy:
        """The policy at `repo`'s HEAD. HEAD is read as data each time; a value it held
        before (and that git then resolved to that very commit) is not resolved again."""
        head = read_ref(repo, "HEAD")
        with self._lock:
            known = head is not None and head in self._heads
        if not known:
            head = resolve_commit(repo.top, "HEAD")
            with self._lock:
                _remember(self._heads, head, None, COMMITS_REMEMBERED)
        assert head is not None
        return self.at(head)

    def at(self, sha: str) -> LoadedPolicy:
        with self._lock:
            hit = self._commits.get(sha)
            if hit is not None:
                self._commits.move_to_end(sha)
        if hit is None:
            hit = self._at(sha)
            with self._lock:
                _remember(self._commits, sha, hit, COMMITS_REMEMBERED)
        if isinstance(hit, PolicyError):
            raise PolicyError(str(hit))
        return hit

    def _at(self, sha: str) -> LoadedPolicy | PolicyError:
        """The policy at `sha`, or its refusal (a git failure is raised: not remembered)."""
        blob = self._blob_id(sha)
        if blob is None:  # absent (the defaults) or not a regular file (refused): no parse
            return self._parse(sha)
        with self._lock:
            hit = self._parsed.get(blob)
        if hit is None:
            hit = self._parse(sha)
            with self._lock:
                _remember(self._parsed, blob, hit, POLICY_CACHE_SIZE)
        if isinstance(hit, PolicyError):
            return hit
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


def _remember(memo: OrderedDict[str, V], key: str, value: V, limit: int) -> None:
    memo[key] = value
    memo.move_to_end(key)
    while len(memo) > limit:
        memo.popitem(last=False)
