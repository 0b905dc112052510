"""GitHub REST items -> typed events: small typed fields only, never a title's or body's text.

Each function takes the JSON items of one endpoint (as GitHub sends them: untrusted data)
and returns `TypedEvent`s with stable keys, so the same fact always has the same key and a
re-sync inserts nothing. Fields are checked for type and bounded; an item whose fields are
not of the expected types is skipped (it is data, not an error of ours). Titles and bodies
never enter an event: a ready issue's text goes to a draft blob, and only the blob's digest
is in its marker event (`ready`).

Kinds and keys (R is OWNER/NAME):
  gh.issue   gh:R:issue:N@updated_at         number, id, state, labels, comments, updated_at
  gh.issue   gh:R:ready:N                    number, id, draft_blob, mapped labels (once, ever)
  gh.label   gh:R:label:EVENT_ID             id, number, action added|removed, label, created_at
  gh.comment gh:R:comment:ID@updated_at      id, number, created_at, updated_at
  gh.pr      gh:R:pr:N@updated_at            number, id, state, draft, merged, head_sha, ...
  gh.branch  gh:R:branch:NAME_DIGEST@sha     name, sha, protected
  gh.review  gh:R:review:ID@state            id, number, state, commit_id, submitted_at
  gh.check   gh:R:check:ID@status/conclusion id, sha, status, conclusion, completed_at
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from gatekeeper.work.events.outbox import MAX_KEY_CHARS, TypedEvent

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
MAX_LABELS = 50
MAX_NAME_CHARS = 255  # a label or branch name (data, bounded)
_STATE_RE = re.compile(r"^[A-Za-z_]{1,40}$")
_TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def key(repo: str, rest: str) -> str:
    """`gh:R:rest`, or its digest form when that would be longer than a key may be."""
    full = f"gh:{repo}:{rest}"
    if len(full) <= MAX_KEY_CHARS and full.isprintable():
        return full
    return "gh:sha256:" + hashlib.sha256(full.encode("utf-8", "surrogateescape")).hexdigest()


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 53 else None


def _time(v: Any) -> str | None:
    return v if isinstance(v, str) and _TIME_RE.fullmatch(v) else None


def _state(v: Any) -> str | None:
    return v if isinstance(v, str) and _STATE_RE.fullmatch(v) else None


def _name(v: Any) -> str | None:
    ok = isinstance(v, str) and 0 < len(v) <= MAX_NAME_CHARS and v.isprintable()
    return v if ok else None


def _sha(v: Any) -> str | None:
    return v if isinstance(v, str) and SHA_RE.fullmatch(v) else None


def _dicts(items: Any) -> Iterable[Mapping[str, Any]]:
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


def labels_of(item: Mapping[str, Any]) -> list[str]:
    got = item.get("labels")
    names = [_name(x.get("name")) for x in _dicts(got)]
    return sorted({n for n in names if n})[:MAX_LABELS]


def updated(item: Mapping[str, Any]) -> str | None:
    return _time(item.get("updated_at"))


def is_ready(item: Mapping[str, Any], ready_label: str) -> bool:
    """An open issue (not a PR) labelled `ready_label`."""
    return (item.get("state") == "open" and "pull_request" not in item
            and ready_label in labels_of(item))  # fmt: skip


def issues(repo: str, items: Any) -> list[TypedEvent]:
    """The issues listing (`/issues`, which also lists PRs: those are left to `pulls`)."""
    out = []
    for i in _dicts(items):
        number, at, state = _int(i.get("number")), updated(i), _state(i.get("state"))
        if number is None or at is None or state is None or "pull_request" in i:
            continue
        body = {"number": number, "id": _int(i.get("id")), "state": state,
                "labels": labels_of(i), "comments": _int(i.get("comments")),
                "updated_at": at}  # fmt: skip
        out.append(TypedEvent(key(repo, f"issue:{number}@{at}"), "gh.issue", body))
    return out


def ready(repo: str, item: Mapping[str, Any], draft_blob: str,
          mapped: Iterable[str] = ()) -> TypedEvent:  # fmt: skip
    """The marker of an issue found ready: once per (repo, number), ever. `labels`: those
    of its labels that the policy maps to a goal (`mapped`), so the marker stays small."""
    number = item["number"]
    body = {"number": number, "id": _int(item.get("id")), "ready": True,
            "draft_blob": draft_blob,
            "labels": sorted(set(labels_of(item)) & set(mapped))}  # fmt: skip
    return TypedEvent(key(repo, f"ready:{number}"), "gh.issue", body)


def label_events(repo: str, items: Any) -> list[TypedEvent]:
    """`/issues/events`: `labeled` and `unlabeled` only (each its own id: a removal and a
    re-add are two events)."""
    out = []
    for e in _dicts(items):
        action = {"labeled": "added", "unlabeled": "removed"}.get(str(e.get("event")))
        eid, label = _int(e.get("id")), e.get("label")
        name = _name(label.get("name")) if isinstance(label, Mapping) else None
        issue = e.get("issue")
        number = _int(issue.get("number")) if isinstance(issue, Mapping) else None
        if action is None or eid is None or name is None:
            continue
        body = {"id": eid, "number": number, "action": action, "label": name,
                "created_at": _time(e.get("created_at"))}  # fmt: skip
        out.append(TypedEvent(key(repo, f"label:{eid}"), "gh.label", body))
    return out


def _issue_number(url: Any) -> int | None:
    if not isinstance(url, str):
        return None
    tail = url.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() and len(tail) < 16 else None


def comments(repo: str, items: Any) -> list[TypedEvent]:
    """`/issues/comments`: a comment's existence and edits (never its text)."""
    out = []
    for c in _dicts(items):
        cid, at = _int(c.get("id")), updated(c)
        if cid is None or at is None:
            continue
        body = {"id": cid, "number": _issue_number(c.get("issue_url")),
                "created_at": _time(c.get("created_at")), "updated_at": at}  # fmt: skip
        out.append(TypedEvent(key(repo, f"comment:{cid}@{at}"), "gh.comment", body))
    return out


def _ref(side: Any) -> tuple[str | None, str | None]:
    if not isinstance(side, Mapping):
        return None, None
    return _name(side.get("ref")), _sha(side.get("sha"))


def pulls(repo: str, items: Any) -> list[TypedEvent]:
    out = []
    for pr in _dicts(items):
        number, at, state = _int(pr.get("number")), updated(pr), _state(pr.get("state"))
        if number is None or at is None or state is None:
            continue
        head_ref, head_sha = _ref(pr.get("head"))
        base_ref, _ = _ref(pr.get("base"))
        body = {"number": number, "id": _int(pr.get("id")), "state": state,
                "draft": pr.get("draft") is True, "merged": _time(pr.get("merged_at")) is not None,
                "head_ref": head_ref, "head_sha": head_sha, "base_ref": base_ref,
                "updated_at": at}  # fmt: skip
        out.append(TypedEvent(key(repo, f"pr:{number}@{at}"), "gh.pr", body))
    return out


def branches(repo: str, items: Any) -> list[TypedEvent]:
    out = []
    for b in _dicts(items):
        name, commit = _name(b.get("name")), b.get("commit")
        sha = _sha(commit.get("sha")) if isinstance(commit, Mapping) else None
        if name is None or sha is None:
            continue
        tag = hashlib.sha256(name.encode()).hexdigest()[:16]
        body = {"name": name, "sha": sha, "protected": b.get("protected") is True}
        out.append(TypedEvent(key(repo, f"branch:{tag}@{sha}"), "gh.branch", body))
    return out


def reviews(repo: str, number: int, items: Any) -> list[TypedEvent]:
    out = []
    for r in _dicts(items):
        rid, state = _int(r.get("id")), _state(r.get("state"))
        if rid is None or state is None:
            continue
        body = {"id": rid, "number": number, "state": state, "commit_id": _sha(r.get("commit_id")),
                "submitted_at": _time(r.get("submitted_at"))}  # fmt: skip
        out.append(TypedEvent(key(repo, f"review:{rid}@{state}"), "gh.review", body))
    return out


def checks(repo: str, sha: str, data: Any) -> list[TypedEvent]:
    """`/commits/SHA/check-runs` (an object whose `check_runs` is the list)."""
    runs = data.get("check_runs") if isinstance(data, Mapping) else None
    out = []
    for c in _dicts(runs):
        cid, status = _int(c.get("id")), _state(c.get("status"))
        if cid is None or status is None:
            continue
        conclusion = _state(c.get("conclusion"))
        body = {"id": cid, "sha": sha, "status": status, "conclusion": conclusion,
                "completed_at": _time(c.get("completed_at"))}  # fmt: skip
        out.append(TypedEvent(key(repo, f"check:{cid}@{status}/{conclusion}"), "gh.check", body))
    return out
