"""`oms events sync github`: one-shot GitHub sync into typed, deduplicated events.

One sync reads a bounded set of REST endpoints of one repository (`SOURCES`, then the
reviews and check runs of at most `MAX_DETAIL` pull requests that changed in this sync):
  /repos/R/issues?state=all&sort=updated&direction=desc         -> gh.issue (+ ready marker)
  /repos/R/issues/events                                        -> gh.label (added/removed)
  /repos/R/issues/comments?sort=updated&direction=desc          -> gh.comment
  /repos/R/pulls?state=all&sort=updated&direction=desc          -> gh.pr
  /repos/R/branches                                             -> gh.branch
  /repos/R/pulls/N/reviews                                      -> gh.review
  /repos/R/commits/SHA/check-runs                               -> gh.check
Each listing is newest first: its first page is asked with `If-None-Match` and the stored
ETag (a 304 costs nothing and writes nothing), and pages (`Link: rel="next"`, same origin
only) are followed until one reaches the stored cursor (the newest `updated_at` or event id
seen), or `MAX_PAGES`. Each answer and the whole sync have a deadline (`[conductor]
github_answer_timeout_s`, `github_sync_timeout_s`), and one sync of a repository runs at a
time (`_only_sync`: a second refuses at once, exit 4).

Pages are written as they arrive (`_Sync.flush`), never all held: before the next page of
a listing is asked for, ONE fenced transaction records the events pending that were not
seen before (by stable key), appends ONE conductor notification naming only their keys,
writes the watermarks of the listings read through, and appends ONE `work.events` evidence
entry whose blob is the batch's canonical JSON; the rest goes in one more at the end. A
failure at any page (a 5xx, a network error, a deadline, a rate limit, a foreign link)
raises (exit 4) keeping what was written; a watermark moves only with or after the last
page of its listing, so the next sync reads an unfinished listing again from page 1 and
dedups. A batch with nothing new writes nothing at all (not even a changed ETag).

A ready issue (open, not a PR, labelled `[conductor] ready_label`) gets a marker event
once per (repository, number), its title and text kept in a draft blob; after the
projection each marker is materialised as ONE pending ticket, under a nonce derived from
(repository, number): a second materialisation, after a crash or a label removed and
re-added, is a replayed nonce and adds nothing. Its goal is the open goal that
`[conductor] goal_labels` (the trusted policy) maps one of its labels to, else the
repository's standing goal; nothing in the issue's text names a goal. Each ticket's own
transaction also notifies the conductor (`work.ticket`): the projection's batch can wake
a waiter before the tickets exist, and that waiter must not miss them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785

from evidence import EntryNotFound
from gatekeeper.errors import Unavailable, UsageError
from gatekeeper.repo.remote import repo_config
from gatekeeper.text import sanitize
from gatekeeper.work import payloads as p
from gatekeeper.work.events import github as gh
from gatekeeper.work.events import outbox
from gatekeeper.work.events.outbox import TypedEvent
from gatekeeper.work.fence import NonceReplayed, Work, WrongState
from gatekeeper.work.github import GitHub, checked_repo, token_from_env
from gatekeeper.work.model import MAX_BODY_BYTES, MAX_TITLE_CHARS

PER_PAGE = 100
MAX_PAGES = 100  # per listing and sync; a first sync imports at most this much history
MAX_DETAIL = 20  # pull requests whose reviews and check runs are read per sync
LOCK_FILE = "github-sync.lock"  # in the repository's state directory, beside work.db
_GITHUB_URL = re.compile(
    r"^(?:https://github\.com/|ssh://git@github\.com/|git@github\.com:)"
    r"([A-Za-z0-9_.-]{1,100})/([A-Za-z0-9_.-]{1,100}?)(?:\.git)?/?$"
)


class _NothingNew(Exception):
    """Inside the projection: another sync stored these events first; roll back."""


@dataclass(frozen=True)
class Source:
    name: str  # the watermark is `github:R:name`
    path: str  # under /repos/R
    params: Mapping[str, str | int]
    project: Callable[[str, Any], list[TypedEvent]]
    cursor: Callable[[Mapping[str, Any]], str | None]  # newest-first position of an item
    # Newest first: any change shows on page 1, so page 1's ETag stands for the listing.
    # Not so for branches (by name): a change past page 1 leaves page 1's ETag as it was.
    newest_first: bool = True


def _event_id(item: Mapping[str, Any]) -> str | None:
    v = item.get("id")
    return f"{v:020d}" if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


_DESC = {"sort": "updated", "direction": "desc"}
SOURCES: tuple[Source, ...] = (
    Source("issues", "issues", {"state": "all", **_DESC}, gh.issues, gh.updated),
    Source("issue-events", "issues/events", {}, gh.label_events, _event_id),
    Source("comments", "issues/comments", _DESC, gh.comments, gh.updated),
    Source("pulls", "pulls", {"state": "all", **_DESC}, gh.pulls, gh.updated),
    Source("branches", "branches", {}, gh.branches, lambda _: None, newest_first=False),
)


Mark = tuple[str | None, str | None, int | None]


class SyncRunning(Unavailable):
    """Another sync of this repository holds the lock; this one did nothing."""


@dataclass
class _Sync:
    """One sync as it runs: its counts, and what was fetched but is not written yet — at
    most the current page of a listing, one page of each listing done, and the reviews and
    checks of their pull requests; never a listing's every page."""

    work: Work
    repo: str
    ready_label: str
    requests: int = 0
    not_modified: int = 0
    remaining: int | None = None
    reset: int | None = None
    seen: int = 0  # events read from GitHub
    skipped: int = 0  # items that could not be recorded as events
    stored: int = 0
    notifications: list[str] = field(default_factory=list)
    detail_left: int = MAX_DETAIL
    pending: list[TypedEvent] = field(default_factory=list)
    pending_seen: int = 0
    markers: list[TypedEvent] = field(default_factory=list)  # ready markers, new in this sync
    drafts: list[str] = field(default_factory=list)
    marked: set[str] = field(default_factory=set)
    # source -> (etag, cursor, the version it was read at: None when there was none), for
    # the listings read to their end whose watermark is not written yet
    marks: dict[str, Mark] = field(default_factory=dict)

    def saw(self, page: Any) -> None:
        self.requests += 1
        self.remaining = page.remaining if page.remaining is not None else self.remaining
        self.reset = page.reset if page.reset is not None else self.reset

    def add(self, events: Sequence[TypedEvent]) -> None:
        # An item this oms cannot record (too large, text that is not Unicode) is skipped
        # and counted: one odd item never stops every later sync.
        kept = [e for e in events if _encodable(e)]
        self.seen, self.pending_seen = self.seen + len(events), self.pending_seen + len(events)
        self.skipped += len(events) - len(kept)
        self.pending.extend(kept)

    def flush(self, last: bool = False) -> None:
        """Write what is pending, with the watermarks of the listings done, in ONE
        transaction; nothing when nothing is new (the watermarks wait for one that is). The
        `last` flush of a sync that wrote before also writes the watermarks left."""
        fresh = [*_new(self.work, self.pending), *self.markers]
        if fresh or (last and self.stored and self.marks):
            batch, stored = _project(self.work, self.repo, fresh, self.marks, self.drafts,
                                     self.pending_seen)  # fmt: skip
            self.stored += stored
            if stored or not fresh:
                self.marks = {}
            if batch is not None:
                self.notifications.append(batch)
        self.pending, self.markers, self.drafts, self.pending_seen = [], [], [], 0


def resolve_repo(work: Work, github_repo: str | None) -> str:
    """OWNER/NAME: the argument, else `[conductor] github_repo`, else the `origin` remote's
    URL when it is on github.com; else UsageError."""
    if github_repo:
        return checked_repo(github_repo)
    configured = work.loaded.policy.conductor.github_repo
    if configured:
        return checked_repo(configured)
    url = repo_config(work.repo, "remote.origin.url")
    m = _GITHUB_URL.match(url or "")
    if m is None:
        raise UsageError("no GitHub repository: pass --repo OWNER/NAME, set [conductor] "
                         "github_repo, or use an origin remote on github.com")  # fmt: skip
    return checked_repo(f"{m.group(1)}/{m.group(2)}")


def _watermarks(work: Work, repo: str) -> dict[str, Mark]:
    prefix = f"github:{repo}:"
    rows = work.db.read("SELECT source, etag, cursor, version FROM watermarks WHERE "
                        "substr(source, 1, ?) = ?", len(prefix), prefix)  # fmt: skip
    return {r["source"]: (r["etag"], r["cursor"], r["version"]) for r in rows}


def _listing(client: GitHub, sync: _Sync, src: Source, mark: Mark) -> None:
    """One newest-first listing, each page taken in (`_page`) and written before the next is
    asked for; nothing on a 304. Sets the listing's next watermark when it is read through."""
    etag, cursor, version = mark
    params = {**src.params, "per_page": PER_PAGE}
    page = client.get(f"/repos/{sync.repo}/{src.path}", etag=etag, params=params)
    sync.saw(page)
    if page.status == 304:
        sync.not_modified += 1
        return
    first_etag, pages, newest = page.etag, 1, cursor
    while True:
        batch = page.data if isinstance(page.data, list) else []
        _page(client, sync, src, batch)
        marks = [c for i in batch if isinstance(i, Mapping) and (c := src.cursor(i))]
        newest = max([newest, *marks], key=lambda c: c or "") if marks else newest
        if cursor is not None and any(c < cursor for c in marks):
            break  # reached what an earlier sync saw
        if page.next_url is None or pages >= MAX_PAGES:
            break
        sync.flush()  # this page is kept, whatever becomes of the next
        page = client.get(page.next_url)
        sync.saw(page)
        pages += 1
    # A listing whose later pages can change alone keeps no ETag past one page: it is read
    # again next time (its events are deduplicated by key, so nothing is written twice).
    kept = first_etag if src.newest_first or pages == 1 else None
    sync.marks[f"github:{sync.repo}:{src.name}"] = (kept, newest, version)


def _page(client: GitHub, sync: _Sync, src: Source, items: list[Any]) -> None:
    """One page's events, its ready issues' markers, and its changed PRs' reviews and
    checks (bounded), all pending until the next flush."""
    events = src.project(sync.repo, items)
    sync.add(events)
    if src.name == "issues":
        _mark_ready(sync, items)
    if src.name == "pulls":
        changed = _new(sync.work, [e for e in events if e.kind == "gh.pr"])
        for e in changed[: sync.detail_left]:
            _details(client, sync, e.body["number"], e.body.get("head_sha"))
        sync.detail_left = max(0, sync.detail_left - len(changed))


def _details(client: GitHub, sync: _Sync, number: int, sha: Any) -> None:
    """A changed pull request's reviews and its head commit's check runs (one page each)."""
    per_page = {"per_page": PER_PAGE}
    page = client.get(f"/repos/{sync.repo}/pulls/{number}/reviews", params=per_page)
    sync.saw(page)
    sync.add(gh.reviews(sync.repo, number, page.data))
    if isinstance(sha, str) and gh.SHA_RE.fullmatch(sha):
        page = client.get(f"/repos/{sync.repo}/commits/{sha}/check-runs", params=per_page)
        sync.saw(page)
        sync.add(gh.checks(sync.repo, sha, page.data))


def _mark_ready(sync: _Sync, items: list[Any]) -> None:
    """A ready issue not marked before: its text to a draft blob, its marker an event."""
    ready = [i for i in items if isinstance(i, Mapping) and gh.is_ready(i, sync.ready_label)
             and _number(i.get("number"))]  # fmt: skip
    unmarked = {e.key for e in _new(sync.work, [gh.ready(sync.repo, i, "") for i in ready])}
    for item in ready:
        mark = gh.key(sync.repo, f"ready:{item['number']}")
        if mark in unmarked and mark not in sync.marked:
            sync.marked.add(mark)  # once, even if a page repeats the issue
            sync.drafts.append(_draft(sync.work, sync.repo, item))
            mapped = sync.work.loaded.policy.conductor.goal_labels
            sync.markers.append(gh.ready(sync.repo, item, sync.drafts[-1], mapped))


def _fetch(client: GitHub, sync: _Sync) -> None:
    marks = _watermarks(sync.work, sync.repo)
    for src in SOURCES:
        _listing(client, sync, src, marks.get(f"github:{sync.repo}:{src.name}", (None, None, None)))
    sync.flush(last=True)


def _number(value: Any) -> bool:
    return type(value) is int and 0 < value < 2**31  # not a bool, not out of range


def _encodable(e: TypedEvent) -> bool:
    try:
        e.encoded()
    except (UsageError, ValueError):
        return False
    return True


def _unicode(text: str) -> str:
    """`text` with what is not Unicode (a lone surrogate from JSON) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _new(work: Work, events: Sequence[TypedEvent]) -> list[TypedEvent]:
    """The events (first of each key) whose key is not in the store yet."""
    first: dict[str, TypedEvent] = {}
    for e in events:
        first.setdefault(e.key, e)
    unique = list(first.values())
    seen: set[str] = set()
    keys = [e.key for e in unique]
    for i in range(0, len(keys), 500):
        chunk = keys[i : i + 500]
        marks = ",".join("?" * len(chunk))
        rows = work.db.read(f"SELECT key FROM events WHERE key IN ({marks})", *chunk)  # noqa: S608 # nosec B608 -- placeholders only
        seen.update(r["key"] for r in rows)
    return [e for e in unique if e.key not in seen]


def _draft(work: Work, repo: str, item: Mapping[str, Any]) -> str:
    """The issue's title and text as an immutable evidence blob (data, never a command)."""
    title = _unicode(item["title"]) if isinstance(item.get("title"), str) else ""
    text = _unicode(item["body"]) if isinstance(item.get("body"), str) else ""
    doc = {"repo": repo, "number": item["number"], "title": title, "body": text}
    return "sha256:" + work.store.blobs.put(bytes(rfc8785.dumps(doc)))


def _project(work: Work, repo: str, events: list[TypedEvent], marks: dict[str, Mark],
             drafts: Sequence[str], seen: int) -> tuple[str | None, int]:  # fmt: skip
    """ONE fenced transaction: the events, one notification, the watermarks, one entry;
    (the notification, how many events were new). (None, 0) when none was new after all.
    No events and some watermarks: the watermarks alone (the last flush of a sync)."""
    listed = [{"key": e.key, "kind": e.kind, "body": dict(e.body)} for e in events]
    water = {k: {"etag": v[0], "cursor": v[1]} for k, v in sorted(marks.items())}
    doc: dict[str, Any] = {"repo": repo, "events": listed, "watermarks": water}
    data = bytes(rfc8785.dumps(doc))
    blob = work.store.blobs.put(data)
    nonce = f"oms-ghsync-{blob[:48]}"
    try:
        return _projected(work, repo, events, marks, drafts, seen, blob, nonce)
    except (_NothingNew, NonceReplayed):
        return None, 0  # a concurrent sync stored them (or this very batch): nothing written


def _projected(work: Work, repo: str, events: list[TypedEvent], marks: dict[str, Mark],
               drafts: Sequence[str], seen: int, blob: str,
               nonce: str) -> tuple[str | None, int]:  # fmt: skip
    with work.fenced(nonce, "events.sync") as tx:
        keys = outbox.record(tx, events)
        if not keys and (events or not marks):
            raise _NothingNew
        batch = outbox.notify(tx, keys)  # None for watermarks alone
        # CAS on the version each was read at: a sync that committed meanwhile read GitHub
        # later, so its watermark stands (events are kept either way: they are facts).
        for source, (etag, cursor, read_at) in marks.items():
            tx.run("INSERT INTO watermarks (source, etag, cursor, version, updated) VALUES "
                   "(?, ?, ?, 1, ?) ON CONFLICT(source) DO UPDATE SET etag = excluded.etag, "
                   "cursor = excluded.cursor, version = version + 1, updated = excluded.updated "
                   "WHERE version IS ?", source, etag, cursor, tx.now, read_at)  # fmt: skip
        oid = batch or f"sha256:{blob}"
        tx.record = p.EventsProjected(object="events", id=oid, from_state=None,
                                      to_state="projected", version=1, nonce=nonce,
                                      detail={"source": "github", "repo": repo,
                                              "events_new": len(keys), "events_seen": seen,
                                              "batch": batch,
                                              "batch_blob": f"sha256:{blob}"})  # fmt: skip
        tx.target = oid
        tx.subject = f"oms-github:{repo}"
        tx.blobs = (blob, *(d.removeprefix("sha256:") for d in drafts))
    return batch, len(keys)


def _nonce(kind: str, *parts: object) -> str:
    digest = hashlib.sha256(json.dumps([kind, *parts]).encode()).hexdigest()
    return f"oms-gh{kind}-{digest[:40]}"


def _made(work: Work, nonce: str) -> str | None:
    """The object a fenced operation under `nonce` made, if it ran."""
    rows = work.db.read("SELECT object FROM transitions WHERE nonce = ?", nonce)
    return str(rows[0]["object"]) if rows else None


def standing_goal(work: Work, repo: str) -> str:
    """The repository's standing goal for ready issues: created once, found again by its
    deterministic nonce."""
    nonce = _nonce("goal", repo)
    found = _made(work, nonce)
    if found is not None:
        return found
    label = work.loaded.policy.conductor.ready_label
    try:
        return work.create_goal(f"GitHub issues of {repo} labelled {label}",
                                "never: a standing goal for ready issues", "until-empty",
                                nonce).id  # fmt: skip
    except NonceReplayed:
        found = _made(work, nonce)
        if found is None:
            raise
        return found


def _title(number: int, raw: str) -> str:
    line = " ".join(sanitize(raw, limit=MAX_TITLE_CHARS).split())
    return f"#{number} {line}".strip()[:MAX_TITLE_CHARS]


@dataclass(frozen=True)
class Placed:
    """Where a ready issue's ticket went: the goal its mapped label names, else the standing
    goal (`label` None), with the reason when a mapped goal could not take it."""

    ticket: str
    goal: str
    label: str | None
    reason: str | None

    def to_json(self) -> dict[str, str | None]:
        return {"ticket": self.ticket, "goal": self.goal, "label": self.label,
                "reason": self.reason}  # fmt: skip


def mapped_goal(work: Work, labels: Sequence[str]) -> tuple[str | None, str | None, str | None]:
    """(goal, label, reason): the open goal that `[conductor] goal_labels` (the trusted
    policy) names for one of `labels`; (None, None, reason) when a mapped goal cannot take
    the ticket; (None, None, None) when no label is mapped. Nothing else names a goal."""
    mapping = work.loaded.policy.conductor.goal_labels
    named = sorted({(mapping[x], x) for x in labels if x in mapping})
    if not named:
        return None, None, None
    if len({g for g, _ in named}) > 1:
        return None, None, "its labels map to more than one goal"
    goal, label = named[0]
    rows = work.db.read("SELECT state FROM goals WHERE id = ?", goal)
    if not rows:
        return None, None, f"goal {goal} of label {label} does not exist"
    if rows[0]["state"] != "open":
        return None, None, f"goal {goal} of label {label} is {rows[0]['state']}"
    return goal, label, None


def _add(work: Work, repo: str, number: int, labels: Sequence[str], title: str, text: bytes,
         nonce: str) -> Placed:  # fmt: skip
    """The ticket in its mapped goal, else in the standing goal with the reason recorded."""
    goal, label, reason = mapped_goal(work, labels)
    if goal is not None:
        try:
            t = work.add_ticket(
                goal, title, text, nonce, detail={"issue": number, "label": label}, wake=True
            )
            return Placed(t.id, goal, label, None)
        except WrongState:  # the goal closed meanwhile
            reason = f"goal {goal} of label {label} is no longer open"
    standing = standing_goal(work, repo)
    t = work.add_ticket(
        standing, title, text, nonce, detail={"issue": number, "reason": reason}, wake=True
    )
    return Placed(t.id, standing, None, reason)


def materialise(work: Work, repo: str) -> list[Placed]:
    """Each ready marker not yet a ticket becomes ONE pending ticket; those made now."""
    prefix = f"gh:{repo}:ready:"
    rows = work.db.read("SELECT key, body FROM events WHERE kind = 'gh.issue' AND "
                        "substr(key, 1, ?) = ? ORDER BY seq, key", len(prefix), prefix)  # fmt: skip
    made: list[Placed] = []
    for r in rows:
        body = json.loads(r["body"])
        number = int(body["number"])
        nonce = _nonce("ticket", repo, number)
        if _made(work, nonce) is not None:
            continue
        try:
            blob = str(body["draft_blob"]).removeprefix("sha256:")
            draft = json.loads(work.store.blobs.get(blob))
        except EntryNotFound:
            continue  # the draft blob is gone (a damaged store): no ticket from nothing
        text = str(draft.get("body") or "").encode()[:MAX_BODY_BYTES]
        title = _title(number, str(draft.get("title") or ""))
        labels = [x for x in body.get("labels") or () if isinstance(x, str)]
        try:
            made.append(_add(work, repo, number, labels, title, text, nonce))
        except NonceReplayed:
            continue  # made by a sync that raced this one
    return made


def sync_github(repo_dir: Path, github_repo: str | None = None, *, api_url: str | None = None,
                token: str | None = None,
                clock: Callable[[], float] = time.time) -> dict[str, Any]:  # fmt: skip
    """One sync; the JSON of `oms events sync github`. Pages are written as they arrive; a
    failure (GitHub's, a deadline, a foreign link) raises (exit 4) keeping what was written
    and moving no watermark of a listing not read through. A second sync of the same
    repository while one runs raises `SyncRunning` at once (exit 4)."""
    started = time.monotonic()
    work = Work.open(repo_dir)
    work.clock = clock
    try:
        repo = resolve_repo(work, github_repo)
        conductor = work.loaded.policy.conductor
        with _only_sync(work):
            sync = _Sync(work, repo, conductor.ready_label)
            with GitHub(api_url, token if token is not None else token_from_env(),
                        answer_s=conductor.github_answer_timeout_s,
                        until=started + conductor.github_sync_timeout_s) as client:  # fmt: skip
                _fetch(client, sync)
            placed = materialise(work, repo)
        return {"repo": repo, "requests": sync.requests, "not_modified": sync.not_modified,
                "events_new": sync.stored, "events_seen": sync.seen,
                "events_skipped": sync.skipped, "tickets": [x.ticket for x in placed],
                "placed": [x.to_json() for x in placed],
                "notification": sync.notifications[-1] if sync.notifications else None,
                "notifications": sync.notifications,
                "rate": {"remaining": sync.remaining, "reset": sync.reset}}  # fmt: skip
    finally:
        work.close()


@contextmanager
def _only_sync(work: Work) -> Iterator[None]:
    """One GitHub sync of a repository at a time: an flock on `github-sync.lock` in its
    state directory, released by the kernel when the holder dies (never stale)."""
    path = work.db.path.parent / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise Unavailable(f"cannot open the sync lock {LOCK_FILE}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SyncRunning("another `oms events sync github` is running for this "
                              "repository; nothing was done") from None  # fmt: skip
        yield
    finally:
        os.close(fd)
