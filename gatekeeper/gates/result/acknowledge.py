"""A human's acknowledgement that one FAILED verdict's weakened tests are legitimate.

`oms evidence acknowledge SEQ` shows the test issues of the `result` entry SEQ at the
controlling terminal and records a `result.ack` entry when the human types yes: bound
to that commit and that verdict's seq, naming exactly its issues. The next gate on the
same commit accepts those issues (and only those) and records the ack's seq in its own
`result` entry, which uses it up: a second gate, or a second acknowledgement of the
same verdict, finds it spent. Never through MCP or an agent: only a terminal answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from evidence import Draft, EvidenceStore, Payload, state_root
from gatekeeper.errors import Blocked, UsageError
from gatekeeper.gates.result.payloads import ResultRecord
from gatekeeper.gates.result.verdict import Decision, TestIssue
from gatekeeper.repo.git import open_repo
from gatekeeper.text import sanitize

IssueKey = tuple[str, str | None, str | None, str]
QUESTION = b"Accept these test changes for this commit, once? Type 'yes' to accept: "
HEADER = "oms: a FAILED verdict's test changes ask for your acknowledgement"


class Acknowledger(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    name: str
    uid: int


class ResultAck(Payload):
    """`result.ack`: a human accepted the test issues of verdict `verdict_seq`, once."""

    KIND: ClassVar[str] = "result.ack"
    repo_id: str
    commit: str
    verdict_seq: int
    issues: tuple[TestIssue, ...]
    by: Acknowledger


class Acknowledged(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    seq: int
    verdict_seq: int
    commit: str
    issues: int
    by: str

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _spent(store: EvidenceStore) -> tuple[set[int], set[int]]:
    """(ack seqs a gate used, verdict seqs already acknowledged)."""
    used = {r.tests.acknowledged for _, r in store.payloads(ResultRecord)
            if r.tests is not None and r.tests.acknowledged is not None}  # fmt: skip
    acked = {a.verdict_seq for _, a in store.payloads(ResultAck)}
    return used, acked


def usable_ack(store: EvidenceStore, commit: str,
               keys: Sequence[IssueKey]) -> tuple[int, set[IssueKey]] | None:  # fmt: skip
    """The newest unused acknowledgement for `commit` that covers any of `keys`."""
    used, _ = _spent(store)
    for entry, ack in reversed(store.payloads(ResultAck)):
        if ack.commit != commit or entry.seq in used:
            continue
        covered = {i.key for i in ack.issues}
        if covered & set(keys):
            return entry.seq, covered
    return None


def _open_issues(record: ResultRecord) -> tuple[TestIssue, ...]:
    if record.tests is None:
        return ()
    return tuple(i for i in record.tests.issues if i.accepted is None)


def prompt_lines(seq: int, record: ResultRecord, issues: Sequence[TestIssue]) -> list[str]:
    lines = [f"verdict {seq}: {record.decision.value} for commit {record.candidate}",
             f"base {record.base}", ""]  # fmt: skip
    lines += [f"  - {sanitize(i.reason(), 400)}" for i in issues]
    return [*lines, "", "The next gate on this commit will accept exactly these, once."]


def acknowledge(repo_dir: Path, seq: int, ask: Callable[[list[str], bytes], Any]) -> Acknowledged:
    """Show verdict `seq`'s open test issues at the terminal (`ask`), and record the
    human's yes as a `result.ack` entry. Blocked when there is nothing to acknowledge,
    it was acknowledged already, or no human said yes."""
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    entry = store.entry(seq)
    if entry.kind != ResultRecord.KIND:
        raise UsageError(f"entry {seq} is {entry.kind!r}, not a result gate's verdict")
    record = ResultRecord.of(entry)
    issues = _open_issues(record)
    if record.decision != Decision.FAILED or not issues:
        raise Blocked(f"verdict {seq} has no weakened tests to acknowledge")
    if seq in _spent(store)[1]:
        raise Blocked(f"verdict {seq} was acknowledged already; an acknowledgement is single-use")
    who = ask(prompt_lines(seq, record, issues), QUESTION)
    by = Acknowledger(name=str(who.name), uid=int(who.uid))
    payload = ResultAck(repo_id=repo.repo_id, commit=record.candidate, verdict_seq=seq,
                        issues=issues, by=by)  # fmt: skip
    subject = [{"name": f"git+file://{repo.top}", "digest": {"gitCommit": record.candidate}}]
    ack = store.append(Draft.of(payload, subject=subject, policy=entry.policy))
    return Acknowledged(seq=ack.seq, verdict_seq=seq, commit=record.candidate,
                        issues=len(issues), by=by.name)  # fmt: skip
