"""How public the bytes that would leave already are: dirty, unpushed or clean-pushed."""

from __future__ import annotations

from collections.abc import Sequence

from gatekeeper.gates.transfer.manifest import Visibility
from gatekeeper.gates.transfer.select import Selected
from gatekeeper.repo.git import Repo, is_ancestor
from gatekeeper.repo.refs import resolve_commit
from gatekeeper.repo.remote import remote_tip
from gatekeeper.repo.worktree import (
    REGULAR_MODES,
    IndexEntry,
    TreeEntry,
    index_entries,
    tree_entries,
)


def _same_bytes(tree: dict[str, TreeEntry], s: Selected) -> bool:
    """The worktree bytes an item was made from are the blob at its path in `tree`
    (an item whose file is absent matches a tree without that path), by the blob id
    computed when the bytes were read."""
    entry = tree.get(s.path)
    if s.source is None:
        return entry is None
    return (entry is not None and entry.mode in REGULAR_MODES
            and s.blob_id(len(entry.oid)) == entry.oid)  # fmt: skip


def visibility(repo: Repo, items: Sequence[Selected], index: Sequence[IndexEntry] | None = None,
               head: str | None = None) -> Visibility:  # fmt: skip
    """Decided from the items' own bytes, never from `git status`.

    dirty: an item's bytes are not the blob at its path in HEAD, or the index hides or
    has not merged an entry (skip-worktree, assume-unchanged, a conflict); unpushed: no
    commit confirmed on the remote holds HEAD and every item's bytes at its path;
    clean-pushed otherwise. Recomputed at approve and at release (`unchanged.py`).
    `index`, `head`: the index entries as listed when the items were chosen and the HEAD
    commit the caller resolved (each found here when not given).
    """
    head = resolve_commit(repo.top, "HEAD") if head is None else head
    if any(e.hidden or e.stage for e in (index_entries(repo) if index is None else index)):
        return Visibility(state="dirty")
    head_tree = tree_entries(repo, head) if items else {}
    if not all(_same_bytes(head_tree, s) for s in items):
        return Visibility(state="dirty")
    tip = remote_tip(repo)
    if tip is None:
        return Visibility(state="unpushed", upstream=None)
    upstream, commit = tip
    confirmed = commit == head or is_ancestor(repo, head, commit)
    if confirmed and items and commit != head:
        remote_tree = tree_entries(repo, commit)
        confirmed = all(_same_bytes(remote_tree, s) for s in items)
    return Visibility(state="clean-pushed" if confirmed else "unpushed", upstream=upstream)
