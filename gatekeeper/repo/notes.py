"""`refs/notes/oms`: the provenance attestations that travel with commits, read as data.

A note on a commit holds one line per attestation: a DSSE envelope serialised as compact
JSON with sorted keys (`note_line`), each line ending in a newline, the lines sorted and
unique, so that git's `cat_sort_uniq` notes merge keeps every publisher's lines. The ref is
the user's repository's own; its objects are read through oms' repository, and the notes
tree is walked as data (any fan-out: `ab/cdef…`, `ab/cd/ef…`).

Written (`add_note`, `push_notes`) by `git notes` itself, so the tree keeps git's own
layout and fan-out and a merge is git's `cat_sort_uniq`. Each call runs in oms' repository
(oms' config, never the repository's) on a notes ref of its own there, made for the call
and deleted after (two oms processes never share one), with `GIT_OBJECT_DIRECTORY` naming
the user's object store: the blob, trees and notes commits land where the user's repository
reads them, so its `refs/notes/oms` never names an object it lacks. The user's ref moves
only by compare-and-swap (`refs.write_ref`); a ref moved meanwhile is a refusal, never lost
lines.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gatekeeper.errors import Unavailable
from gatekeeper.repo.git import SHA_RE, Repo, git, git_argv, git_env, run_argv
from gatekeeper.repo.refs import read_ref, write_ref
from gatekeeper.repo.remote import fetch_ref, push_ref, remote_url

NOTES_REF = "refs/notes/oms"
MAX_NOTE_BYTES = 16 << 20
PUSH_TRIES = 5  # a push that loses the race to another publisher: fetch, merge, push again
_IDENT = {"GIT_AUTHOR_NAME": "oms", "GIT_AUTHOR_EMAIL": "oms@oms.invalid",
          "GIT_COMMITTER_NAME": "oms", "GIT_COMMITTER_EMAIL": "oms@oms.invalid"}  # fmt: skip


def verify_hint(commit: str) -> str:
    """The line a pull request body carries: where the attestation is, how to verify it."""
    return (f"The provenance attestation of `{commit}` is in `{NOTES_REF}`; verify it with: "
            f"`git fetch origin {NOTES_REF}:{NOTES_REF} && oms evidence verify --commit "
            f"{commit}`")  # fmt: skip


class NotesRaceLost(Unavailable):
    """Other publishers kept moving the remote's refs/notes/oms between oms' fetch and push."""


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


def _notes_git(repo: Repo, *args: str, input: bytes | None = None) -> bytes:
    """git ARGS in oms' repository, its new objects written into the user's object store."""
    env = {**git_env(repo), **_IDENT, "GIT_OBJECT_DIRECTORY": str(repo.common_dir / "objects")}
    return run_argv(git_argv(repo, *args), env, repo.mirror, input, True, " ".join(args[:3]))


@contextmanager
def _scratch(repo: Repo, tip: str | None, name: str = "work") -> Iterator[str]:
    """A notes ref of oms' repository for this call only, at `tip` (absent for None)."""
    ref = f"refs/notes/oms-{name}-{os.getpid()}-{secrets.token_hex(4)}"
    if tip is not None:
        git(repo, "update-ref", ref, tip, "")
    try:
        yield ref
    finally:
        git(repo, "update-ref", "-d", ref, check=False)


def _tip(repo: Repo, ref: str) -> str:
    return git(repo, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}").decode().strip()


def add_note(repo: Repo, commit: str, line: bytes) -> bool:
    """`commit`'s note in the user's `refs/notes/oms` gains `line` (one envelope, as
    `note_line` makes it), the lines kept sorted and unique; False when it held it already."""
    if not line.endswith(b"\n") or b"\n" in line[:-1]:
        raise ValueError("a note line is one line ending in a newline")
    old = read_ref(repo, NOTES_REF)
    lines = note_lines(repo, commit, old)
    if line[:-1] in lines:
        return False
    body = b"".join(x + b"\n" for x in sorted({*lines, line[:-1]}))
    blob = _notes_git(repo, "hash-object", "-w", "--stdin", input=body).decode().strip()
    with _scratch(repo, old) as ref:
        _notes_git(repo, "notes", f"--ref={ref}", "add", "-f", "-C", blob, commit)
        new = _tip(repo, ref)
    write_ref(repo, NOTES_REF, new, old, f"oms: provenance note on {commit[:12]}")
    return True


def merge_notes(repo: Repo, ours: str | None, theirs: str) -> str:
    """The notes commit keeping both sides' lines on every commit (git's `cat_sort_uniq`)."""
    if ours is None or ours == theirs:
        return theirs
    with _scratch(repo, ours) as mine, _scratch(repo, theirs, "theirs") as other:
        _notes_git(repo, "notes", f"--ref={mine}", "merge", "-q", "-s", "cat_sort_uniq", other)
        return _tip(repo, mine)


def push_notes(repo: Repo, remote: str) -> str:
    """The user's `refs/notes/oms` merged with the remote's and pushed there, never forced:
    fetch theirs (an explicit refspec into a ref of oms' own), merge, move the local ref,
    push; a push another publisher beat is tried again, PUSH_TRIES times in all, then
    NotesRaceLost. Returns the notes commit the remote now has."""
    url = remote_url(repo, remote, push=True)
    for _ in range(PUSH_TRIES):
        with _scratch(repo, None, "fetched") as into:
            theirs = fetch_ref(repo, url, NOTES_REF, into)
        ours = read_ref(repo, NOTES_REF)
        if ours is None and theirs is None:
            raise ValueError("there are no notes to push")
        merged = ours if theirs is None else merge_notes(repo, ours, theirs)
        assert merged is not None
        if merged != ours:
            write_ref(repo, NOTES_REF, merged, ours, "oms: notes merged with the remote's")
        if merged == theirs or push_ref(repo, url, merged, NOTES_REF):
            return merged
    raise NotesRaceLost(f"the remote's {NOTES_REF} kept moving while oms pushed "
                        f"({PUSH_TRIES} tries); nothing forced, try again")  # fmt: skip
