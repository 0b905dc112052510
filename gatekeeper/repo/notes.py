"""`refs/notes/oms`: the provenance attestations that travel with commits, read as data.

A note on a commit holds one line per attestation: a DSSE envelope serialised as compact
JSON with sorted keys (`note_line`), each line ending in a newline, the lines sorted and
unique, so that git's `cat_sort_uniq` notes merge keeps every publisher's lines. The ref is
the user's repository's own; its objects are read through oms' repository, and the notes
tree is walked as data (any fan-out: `ab/cdef…`, `ab/cd/ef…`).
"""

from __future__ import annotations

import json
from typing import Any

from gatekeeper.repo.git import SHA_RE, Repo, git
from gatekeeper.repo.refs import read_ref

NOTES_REF = "refs/notes/oms"
MAX_NOTE_BYTES = 16 << 20


def note_line(envelope: dict[str, Any]) -> bytes:
    """The envelope as one note line: compact JSON, sorted keys, ending in a newline."""
    return json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def note_blob(repo: Repo, commit: str, notes_commit: str | None = None) -> str | None:
    """The blob id of `commit`'s note under `notes_commit` (default: the repository's
    `refs/notes/oms`), or None when it has none."""
    if not SHA_RE.match(commit):
        raise ValueError("a note is looked up by a full commit id")
    tip = notes_commit if notes_commit is not None else read_ref(repo, NOTES_REF)
    if tip is None:
        return None
    listing = git(repo, "ls-tree", "-r", "-z", "--full-tree", f"{tip}^{{tree}}")
    for record in listing.split(b"\0"):
        meta, _, path = record.partition(b"\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == b"blob" and path.replace(b"/", b"") == commit.encode():
            return parts[2].decode("ascii")
    return None


def note_lines(repo: Repo, commit: str, notes_commit: str | None = None) -> list[bytes]:
    """The lines of `commit`'s note (each without its newline); [] when it has none."""
    blob = note_blob(repo, commit, notes_commit)
    if blob is None:
        return []
    data = git(repo, "cat-file", "blob", blob)[:MAX_NOTE_BYTES]
    return [line for line in data.split(b"\n") if line.strip()]
