"""Delivery of a READY_FOR_HUMAN ticket: non-force push and a draft PR over GitHub's REST
API, the body secret-scanned first, a fresh read-back.

Only a ticket that is `completed` on human hold, whose last finished verification decided
READY_FOR_HUMAN, is delivered, and only the exact commit that verification judged (its
receipt's commit, which the gate's `result` entry names as its candidate). The order is
fixed: the PR body is scanned by both scanners before anything leaves the machine (a
finding blocks, nothing is pushed or sent); the push runs from oms' own repository with
oms' transport rules (`gatekeeper.repo.remote.push`: no hook or config of the user's
repository runs) and is never forced; the commit's provenance attestation follows it as a
note in `refs/notes/oms`, merged with the remote's notes and pushed the same way (the PR
body says how to verify it); the draft PR is found (GET `pulls?head=`) or opened
(POST, `draft: true`); then the remote branch (ls-remote) and the PR (GET) are read back
fresh and must both point at the verified commit, the PR a draft. Each step is one fenced
`deliveries` transition (pushed -> pr-open -> confirmed | failed) with one `work.delivery`
entry; a confirmed delivery writes one request-only `slack.request` outbox row. Nothing
merges, tags or publishes. Delivering a confirmed commit again changes nothing.

Delivery resumes: asked again, a delivery that stopped (`pushed`, `pr-open`, `failed`)
takes the same steps from the start, each of which finds what is already done (a branch at
the verified commit is not pushed again, the branch's open PR is found, not duplicated) and
the same read-back decides. GitHub's transient failures (5xx, a reset connection) are
asked again within `gatekeeper.retry`'s bound; past it the row stays where it stopped and the
refusal names the command that resumes it.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from dataclasses import dataclass
from typing import Any, NoReturn

from evidence import EntryNotFound
from gatekeeper.errors import Blocked, NotFound, Unavailable, UsageError
from gatekeeper.integrations.formats import clean, markdown
from gatekeeper.integrations.formats.report import Report
from gatekeeper.repo.git import GitError, is_ancestor
from gatekeeper.repo.notes import NOTES_REF, verify_hint
from gatekeeper.repo.refs import default_branch_ref, valid_refname
from gatekeeper.repo.remote import ls_remote, push, remote_url
from gatekeeper.retry import RETRY, Retry, retried
from gatekeeper.scan.interface import ScanItem
from gatekeeper.scan.policy import scan_with_policy
from gatekeeper.work import payloads as p
from gatekeeper.work import provenance
from gatekeeper.work.events import outbox, slack
from gatekeeper.work.fence import NonceReplayed, StaleVersion, Work
from gatekeeper.work.github import (
    GitHub,
    GitHubUnavailable,
    Transient,
    checked_repo,
    token_from_env,
)
from gatekeeper.work.model import NONCE_RE

TITLE = "oms: READY_FOR_HUMAN {ticket}"
MAX_TITLE_SHOWN = 120
MAX_URL = 300
_GITHUB_URL = re.compile(r"(?:https://github\.com/|ssh://git@github\.com/|git@github\.com:)"
                         r"([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?")  # fmt: skip


class DeliveryFailed(Blocked):
    """The remote or GitHub does not show the verified commit as delivered (recorded `failed`)."""


class DeliveryStopped(Unavailable):
    """GitHub could not be reached or answered badly past the retry bound; the delivery
    stays where it stopped and resumes when asked again."""


RESUME = "oms ticket deliver {ticket}"


@dataclass(frozen=True)
class Ready:
    """What the ticket's last verification established: the commit and its verdict."""

    ticket: str
    title: str
    verification: str
    commit: str
    result_seq: int
    verdict: dict[str, Any]


def deliver_ticket(work: Work, ticket: str, nonce: str,
                   retry: Retry | None = None) -> dict[str, Any]:  # fmt: skip
    """Push `<branch_prefix><ticket>` at the ticket's verified commit to `[conductor] remote`
    (never forced), open (or find) its draft PR, read both back; `{"delivery": {...}}`.
    Refuses (exit 3) a ticket that is not completed with a READY_FOR_HUMAN verdict; resumes
    one whose delivery stopped. `retry` bounds GitHub's transient failures (`RETRY`)."""
    if not isinstance(nonce, str) or not NONCE_RE.fullmatch(nonce):
        raise UsageError("not a nonce (8-128 of A-Z a-z 0-9 . _ : -)")
    cp = work.loaded.policy.conductor
    if cp.remote is None:
        raise UsageError("[conductor] remote is not set in the policy: nowhere to deliver to")
    ready = ready_of(work, ticket)
    branch = f"{cp.branch_prefix}{ticket}"
    ref = f"refs/heads/{branch}"
    if not valid_refname(ref) or branch.startswith("-"):
        raise UsageError(f"not a valid delivery branch: {branch[:80]!r}")
    url = remote_url(work.repo, cp.remote, push=True)
    gh_repo = checked_repo(cp.github_repo or github_repo_of(url))
    before = _row(work, ticket)
    confirmed = (before["state"], before["commit_sha"]) if before is not None else None
    if before is not None and confirmed == ("confirmed", ready.commit):
        return {"delivery": {**_shown(before, gh_repo), "action": "unchanged"}}
    title = TITLE.format(ticket=ticket)
    body = pr_body(ready)
    scan_body(work, title, body, ready.title)  # before anything leaves the machine
    if work.db.read("SELECT 1 FROM nonces WHERE nonce = ?", nonce):  # before any push
        raise NonceReplayed(f"nonce {nonce} was used already; nothing changed")
    token = token_from_env()
    if token is None:
        raise Unavailable("no GitHub token ($GITHUB_TOKEN, $GH_TOKEN or `gh auth token`); "
                          "nothing pushed")  # fmt: skip
    steps = _Steps(work, ticket, ready.commit, cp.remote, branch, nonce, before)
    _push(work, steps, url, ref, ready.commit, branch)
    try:
        with GitHub(token=token, answer_s=cp.github_answer_timeout_s) as gh:
            pr = _find_or_open(gh, steps, gh_repo, branch, title, body, retry or RETRY)
            shown = _confirm(work, gh, steps, url, ref, gh_repo, pr, retry or RETRY)
    except GitHubUnavailable as exc:  # the row stays where it stopped: resumable
        raise DeliveryStopped(f"delivery of {ticket} stopped at `{steps.state}`: {exc.message}; "
                              f"resume with: {RESUME.format(ticket=ticket)}",
                              data={"delivery": {"ticket": ticket, "state": steps.state,
                                                 "resume": RESUME.format(ticket=ticket)}},
                              ) from None  # fmt: skip
    return {"delivery": {**shown, "action": "delivered"}}


# -- what is delivered ---------------------------------------------------------------------


def ready_of(work: Work, ticket: str) -> Ready:
    """The ticket's READY_FOR_HUMAN verification, its commit and verdict; Blocked else."""
    t = work.ticket(ticket)  # a checked id; NotFound
    if t.state != "completed" or not t.human_hold:
        raise Blocked(f"ticket {ticket} is {t.state}, not completed on human hold with a "
                      "READY_FOR_HUMAN verdict; nothing delivered")  # fmt: skip
    rows = work.db.read(
        "SELECT v.id, v.decision, v.outcome, r.commit_sha FROM verifications v "
        "JOIN receipts r ON r.id = v.receipt WHERE v.ticket = ? AND v.state = 'finished' "
        "ORDER BY v.created DESC, v.rowid DESC LIMIT 1", ticket)  # fmt: skip
    if not rows or rows[0]["decision"] != "READY_FOR_HUMAN":
        raise Blocked(f"the last verification of {ticket} did not decide READY_FOR_HUMAN; "
                      "nothing delivered")  # fmt: skip
    row = rows[0]
    commit = str(row["commit_sha"])
    seq = json.loads(row["outcome"] or "{}").get("result_seq")
    try:
        entry = work.store.entry(int(seq))
    except (TypeError, ValueError, NotFound, EntryNotFound):
        raise Blocked(f"the verdict of {ticket} is not in the evidence log; "
                      "nothing delivered") from None  # fmt: skip
    data = entry.data
    if (entry.kind != "result" or data.get("decision") != "READY_FOR_HUMAN"
            or data.get("candidate") != commit):  # fmt: skip
        raise Blocked(f"the recorded verdict of {ticket} (seq {seq}) is not READY_FOR_HUMAN on "
                      f"{commit[:12]}; nothing delivered")  # fmt: skip
    verdict = {"decision": data["decision"], "reasons": list(data.get("reasons") or ()),
               "commit": commit, "base": data.get("base", ""), "evidence_seq": entry.seq,
               "checks": list(data.get("checks") or ()),
               "protected_changes": list(data.get("protected") or ()),
               "findings": list(data.get("findings") or ())}  # fmt: skip
    return Ready(ticket, t.title, row["id"], commit, entry.seq, verdict)


def pr_body(ready: Ready) -> str:
    """The verdict's markdown (the result gate's job-summary page) under a short header; the
    ticket's title is untrusted: one line, bounded, escaped."""
    head = [f"oms delivers ticket `{ready.ticket}` at the commit its result gate judged "
            f"READY_FOR_HUMAN: `{ready.commit}`.", "",
            f"Ticket title: {clean.md(ready.title, MAX_TITLE_SHOWN)}", "",
            "This is a draft: a human reviews and merges it; oms never does.", "",
            verify_hint(ready.commit), ""]  # fmt: skip
    page = markdown.result_page(Report("result", ready.verdict, 0))
    return "\n".join([*head, *page])


def scan_body(work: Work, title: str, body: str, raw_title: str) -> None:
    """Both scanners over what would be sent, and over the ticket's title as it was before
    markdown escaping (an escaped secret still renders as itself); a finding the policy
    does not allow blocks."""
    items = [ScanItem.of_bytes("pull-request.md", f"{title}\n\n{body}".encode()),
             ScanItem.of_bytes("ticket-title.txt", raw_title.encode())]  # fmt: skip
    report = scan_with_policy(items, work.loaded)
    if report.blocking:
        rules = sorted({f.rule for f in report.blocking})
        raise Blocked(f"the pull request text has {len(report.blocking)} secret finding(s) "
                      f"({', '.join(rules)[:120]}); nothing pushed or sent",
                      data={"findings": [f.fingerprint for f in report.blocking]})  # fmt: skip


def github_repo_of(url: str) -> str:
    m = _GITHUB_URL.fullmatch(url)
    if m is None:
        raise UsageError("the delivery remote is not on github.com; set [conductor] github_repo")
    return m.group(1)


# -- the deliveries row ----------------------------------------------------------------------


def _row(work: Work, ticket: str) -> sqlite3.Row | None:
    rows = work.db.read("SELECT * FROM deliveries WHERE ticket = ?", ticket)
    return rows[0] if rows else None


def _shown(row: sqlite3.Row | dict[str, Any], gh_repo: str) -> dict[str, Any]:
    return {"ticket": row["ticket"], "state": row["state"], "version": row["version"],
            "commit": row["commit_sha"], "remote": row["remote"], "branch": row["branch"],
            "github_repo": gh_repo, "pr": row["pr_number"], "pr_url": row["pr_url"],
            "reason": row["reason"]}  # fmt: skip


class _Steps:
    """The delivery's transitions, each fenced under expected-version CAS; the first under
    the caller's nonce, the later ones under nonces derived from it."""

    def __init__(self, work: Work, ticket: str, commit: str, remote: str, branch: str,
                 nonce: str, before: sqlite3.Row | None) -> None:  # fmt: skip
        self.work, self.ticket, self.commit, self.remote, self.branch = (
            work, ticket, commit, remote, branch)  # fmt: skip
        self.nonce = nonce
        self.n = 0
        self.version = int(before["version"]) if before is not None else 0
        self.state: str | None = before["state"] if before is not None else None
        self.pr: int | None = None
        self.pr_url: str | None = None

    def _nonce(self) -> str:
        self.n += 1
        if self.n == 1:
            return self.nonce
        return f"dlv-{hashlib.sha256(self.nonce.encode()).hexdigest()[:32]}-{self.n}"

    def move(self, state: str, reason: str | None = None) -> None:
        nonce = self._nonce()
        with self.work.fenced(nonce, f"delivery.{state}") as tx:
            row = tx.one("SELECT version, state FROM deliveries WHERE ticket = ?", self.ticket)
            now = int(row["version"]) if row is not None else 0
            if now != self.version:
                raise StaleVersion(f"the delivery of {self.ticket} changed meanwhile (version "
                                   f"{now}, not {self.version}); nothing changed")  # fmt: skip
            version = now + 1
            if row is None:
                tx.run("INSERT INTO deliveries (ticket, version, state, commit_sha, remote, "
                       "branch, pr_number, pr_url, reason, created, updated) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", self.ticket, version, state,
                       self.commit, self.remote, self.branch, self.pr, self.pr_url, reason,
                       tx.now, tx.now)  # fmt: skip
            else:
                tx.run("UPDATE deliveries SET version = ?, state = ?, commit_sha = ?, remote = ?, "
                       "branch = ?, pr_number = ?, pr_url = ?, reason = ?, updated = ? "
                       "WHERE ticket = ?", version, state, self.commit, self.remote,
                       self.branch, self.pr, self.pr_url, reason, tx.now, self.ticket)  # fmt: skip
            if state == "confirmed" and self.pr is not None:
                slack.request_delivered(tx, self.ticket, self.pr, self.commit)
            outbox.notify_change(tx, "work.delivery", f"work:delivery:{self.ticket}@{version}",
                                 {"ticket": self.ticket, "delivery": state, "version": version,
                                  "pr": self.pr})  # fmt: skip
            tx.record = p.DeliveryRecorded(
                object="delivery", id=self.ticket, ticket=self.ticket, from_state=self.state,
                to_state=state, version=version, nonce=nonce,
                detail={"commit": self.commit, "remote": self.remote, "branch": self.branch,
                        "pr": self.pr, "reason": reason})  # fmt: skip
            tx.target = self.ticket
            tx.subject = f"oms-ticket:{self.ticket}"
        self.version, self.state = version, state

    def fail(self, reason: str,
             exc: type[Blocked] | type[Unavailable] = DeliveryFailed) -> NoReturn:  # fmt: skip
        """Record `failed` with `reason`, then raise `exc` with it; a read-back that could
        not be made (Unavailable) names the command that resumes the delivery."""
        self.move("failed", reason[:300])
        shown = {"ticket": self.ticket, "state": "failed", "reason": reason}
        if issubclass(exc, Unavailable):
            reason = f"{reason[:300]}; resume with: {RESUME.format(ticket=self.ticket)}"
        raise exc(f"delivery of {self.ticket} failed: {reason}"[:400], data={"delivery": shown})


# -- the steps -------------------------------------------------------------------------------


def _push(work: Work, steps: _Steps, url: str, ref: str, commit: str, branch: str) -> None:
    """The verified commit onto the branch, never forced: a remote branch the commit does not
    contain is refused before the push; the remote itself refuses a race."""
    there = ls_remote(work.repo, url, ref)
    if there != commit:
        if there is not None and not _contains(work, there, commit):
            steps.fail(f"the remote branch {branch} is at {there[:12]}, which the "
                       f"verified commit {commit[:12]} does not contain; oms never forces "
                       "a push")  # fmt: skip
        try:
            push(work.repo, steps.remote, commit, branch)
        except GitError as exc:
            steps.fail(f"the remote refused the push of {branch} (never forced): "
                       f"{exc.message[:160]}")  # fmt: skip
    _push_note(work, steps, commit)
    steps.move("pushed")


def _push_note(work: Work, steps: _Steps, commit: str) -> None:
    """The commit's provenance attestation in its note, `refs/notes/oms` merged with the
    remote's and pushed to the same remote, never forced. Resumed, the note holds that
    verdict's line already (`provenance.attested_line`): nothing new is pushed."""
    try:
        provenance.publish(work.repo.top, commit, steps.remote)
    except GitError as exc:
        steps.fail(f"the remote refused the push of {NOTES_REF} (never forced): "
                   f"{exc.message[:160]}")  # fmt: skip


def _contains(work: Work, old: str, new: str) -> bool:
    try:
        return is_ancestor(work.repo, old, new)
    except GitError:  # the remote's commit is not even known here
        return False


def _pr_fields(data: Any) -> tuple[int, str | None, str | None, bool, str | None]:
    """(number, url, head sha, draft, state) of a PR object as GitHub sends it; data only."""
    if not isinstance(data, dict) or not isinstance(data.get("number"), int):
        raise GitHubUnavailable("GitHub answered with something that is not a pull request")
    got = data.get("head")
    head: dict[str, Any] = got if isinstance(got, dict) else {}
    url = data.get("html_url")
    shown = url if isinstance(url, str) and url.startswith("https://") and url.isprintable() \
        and len(url) <= MAX_URL else None  # fmt: skip
    sha = head.get("sha") if isinstance(head.get("sha"), str) else None
    state = data.get("state") if isinstance(data.get("state"), str) else None
    return data["number"], shown, sha, data.get("draft") is True, state


def _find_or_open(gh: GitHub, steps: _Steps, gh_repo: str, branch: str, title: str,
                  body: str, retry: Retry) -> int:  # fmt: skip
    """The branch's open PR, else a new draft one. A try that failed transiently looks again
    first: the lost answer to a POST may have opened the PR."""
    owner = gh_repo.split("/", 1)[0]
    _, base = _base(steps.work)

    def once() -> Any:
        page = gh.get(f"/repos/{gh_repo}/pulls",
                      params={"head": f"{owner}:{branch}", "state": "open"})  # fmt: skip
        found = [d for d in (page.data if isinstance(page.data, list) else [])
                 if isinstance(d, dict) and isinstance(d.get("head"), dict)
                 and d["head"].get("ref") == branch]  # fmt: skip
        if found:
            return found[0]
        return gh.post(f"/repos/{gh_repo}/pulls", {"title": title, "head": branch, "base": base,
                                                   "body": body, "draft": True})  # fmt: skip

    number, url, _, _, _ = _pr_fields(retried(retry, once, Transient))
    steps.pr, steps.pr_url = number, url
    steps.move("pr-open")
    return number


def _base(work: Work) -> tuple[str, str]:
    ref, _ = default_branch_ref(work.repo)
    return ref, ref.removeprefix("refs/heads/")


def _confirm(work: Work, gh: GitHub, steps: _Steps, url: str, ref: str, gh_repo: str,
             number: int, retry: Retry) -> dict[str, Any]:  # fmt: skip
    """A fresh read-back of the remote branch and the PR: both at the verified commit, the PR
    an open draft; `confirmed`, else `failed` with the reason."""
    commit = steps.commit
    there = ls_remote(work.repo, url, ref)
    try:
        got = retried(retry, lambda: gh.get(f"/repos/{gh_repo}/pulls/{number}"), Transient)
        _, _, head, draft, state = _pr_fields(got.data)
    except GitHubUnavailable as exc:
        steps.fail(f"the pull request #{number} could not be read back: {exc.message}",
                   Unavailable)  # fmt: skip
    if there is None:
        steps.fail(f"the remote branch {steps.branch} could not be read back", Unavailable)
    if there != commit:
        steps.fail(f"the remote branch {steps.branch} is at {str(there)[:12]}, not {commit[:12]}")
    if head != commit:
        steps.fail(f"pull request #{number} has head {clean.md(head or 'none', 40)}, not "
                   f"{commit[:12]}")  # fmt: skip
    if not draft or state != "open":
        steps.fail(f"pull request #{number} is not an open draft")
    steps.move("confirmed")
    row = _row(work, steps.ticket)
    assert row is not None
    return _shown(row, gh_repo)
