"""Approval and release are bound to the bytes previewed: HEAD, every selected file and
the visibility recomputed from them must be as they were, or the step is refused."""

from __future__ import annotations

from gatekeeper.errors import Blocked
from gatekeeper.gates.transfer.manifest import Manifest
from gatekeeper.gates.transfer.select import choose
from gatekeeper.gates.transfer.visibility import visibility
from gatekeeper.repo.git import Repo
from gatekeeper.repo.refs import resolve_commit
from gatekeeper.text import sanitize
from policy import TransferPolicy


def check_unchanged(repo: Repo, m: Manifest, tp: TransferPolicy) -> None:
    """Blocked unless HEAD, the selection, each item's source bytes and the visibility
    are what the preview recorded. Run at approve and again at release."""
    head = resolve_commit(repo.top, "HEAD")
    if head != m.head:
        raise Blocked(f"HEAD moved since the preview ({m.head[:12]} -> {head[:12]})")
    chosen = choose(repo, m.context, m.paths, m.base, tp)
    selected = chosen.selected
    now_paths = sorted(s.path for s in selected)
    then_paths = sorted(i.path for i in m.items)
    if now_paths != then_paths:
        raise Blocked("the files changed since the preview (added or removed): preview again")
    for s, item in zip(sorted(selected, key=lambda x: x.path),
                       sorted(m.items, key=lambda x: x.path), strict=True):  # fmt: skip
        if s.sha256 != item.source_sha256:  # hashed as it was read again, just now
            raise Blocked(f"{sanitize(item.path)} changed since the preview: preview again")
    now = visibility(repo, selected, chosen.index, head)
    if now.state != m.visibility.state:
        raise Blocked(f"the repository went from {m.visibility.state} to {now.state} since the "
                      "preview: preview again")  # fmt: skip
