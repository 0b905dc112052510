"""One provenance attestation per READY verdict (`oms evidence attest`), docs/provenance.md.

An in-toto Statement v1 whose subjects are the commit (`gitCommit`) and its tree
(`gitTree`), with the predicate `PREDICATE` (schema: provenance.schema.json beside this
module, package data), exported through evidence's one DSSE exporter and signed with the
evidence key. It lives in `work` because it binds what three layers below it recorded: the
result gate's verdict, the agent run that made the commit, and the transfers (through the
dispatch that ran it).

Only digests, ids, versions, counts and policy-given names are bound: no commit message,
no model output, no test names. The serialised statement is still scanned with both
scanners, as a pull request body is, before anything is signed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import rfc8785

from evidence import Entry, EvidenceStore, Payload
from evidence.dsse import DsseError, verify_envelope
from evidence.export import Attestation, export_dsse
from evidence.merkle import leaf_hash, root_from_leaf_hashes
from gatekeeper.agent.payloads import AgentRunEnd, AgentRunStart, EgressRequest, TunnelConnection
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import Blocked
from gatekeeper.gates.records import open_store
from gatekeeper.gates.result.payloads import ResultRecord
from gatekeeper.gates.result.verdict import Decision
from gatekeeper.gates.transfer.payloads import ApprovalRecord, PreviewRecord, ReleaseRecord
from gatekeeper.repo.notes import NOTES_REF, add_note, note_line, note_lines, push_notes
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit
from gatekeeper.repo.remote import remote_url
from gatekeeper.scan.interface import ScanItem
from gatekeeper.scan.policy import scan_with_policy
from gatekeeper.work.payloads import DispatchRan, DispatchStarted
from gatekeeper.work.provenance_verify import PREDICATE

P = TypeVar("P", bound=Payload)
# What oms computed, left out of the scan only under these keys: a git object id, a hex
# SHA-256 (bare or `sha256:`), a base64 Merkle root.
_HASH = re.compile(r"(sha256:)?[0-9a-f]{64}|[0-9a-f]{40}|[A-Za-z0-9+/]{43}=")
_HASH_KEYS = frozenset({
    "gitCommit", "gitTree", "sha256", "base", "commit", "digest", "manifest", "root",
    "leaf_hash", "hashes", "plan_digest", "profile_digest", "mountinfo_digest", "tree_digest",
    "inventory_digest", "id",
})  # fmt: skip


class NoReadyVerdict(Blocked):
    """A commit with no READY_FOR_HUMAN verdict in the log: nothing to attest."""


def attest(repo_dir: Path, commit: str) -> dict[str, Any]:
    """The DSSE envelope attesting the latest READY verdict on `commit`; NoReadyVerdict
    (exit 3) when there is none, Blocked when the statement has a secret finding."""
    repo, store = open_store(repo_dir)
    sha = resolve_commit(repo, commit)
    entry, record = _latest_ready(store, sha)
    subjects = [{"name": "commit", "digest": {"gitCommit": sha}},
                {"name": "tree", "digest": {"gitTree": record.tree}}]  # fmt: skip

    def build(e: Entry, att: Attestation) -> tuple[str, dict[str, Any]]:
        predicate = provenance_predicate(store, e, record, att)
        _scan(repo.top, record, subjects, predicate)
        return PREDICATE, predicate

    return export_dsse(store, entry.seq, build, subjects)


def _latest_ready(store: EvidenceStore, sha: str) -> tuple[Entry, ResultRecord]:
    ready = [(e, r) for e, r in store.payloads(ResultRecord)
             if r.candidate == sha and r.decision == Decision.READY]  # fmt: skip
    if not ready:
        raise NoReadyVerdict(f"commit {sha[:12]} has no READY_FOR_HUMAN verdict in the log; "
                             "nothing to attest", data={"commit": sha})  # fmt: skip
    return ready[-1]


def attested_line(repo_dir: Path, commit: str) -> bytes:
    """The note line attesting `commit`'s latest READY verdict: the one its note holds
    already (signed by this log's key, for that verdict), else a new `attest`. A note is
    published again unchanged, as the log grows (a later inclusion proof would make the
    same verdict a new line), and a delivery resumed after its note was pushed pushes
    nothing new."""
    repo, store = open_store(repo_dir)
    sha = resolve_commit(repo, commit)
    seq = _latest_ready(store, sha)[0].seq
    for line in note_lines(repo, sha):
        if _attests(line, store, sha, seq):
            return line + b"\n"
    return note_line(attest(repo.top, sha))


def _attests(line: bytes, store: EvidenceStore, sha: str, seq: int) -> bool:
    """`line` is this key's provenance attestation of verdict `seq` on commit `sha`."""
    try:
        stmt = json.loads(verify_envelope(json.loads(line), store.key.public))
    except (ValueError, DsseError):  # another publisher's line, or not an envelope
        return False
    if not isinstance(stmt, dict) or stmt.get("predicateType") != PREDICATE:
        return False
    pred, subjects = stmt.get("predicate"), stmt.get("subject")
    verdict = pred.get("verdict") if isinstance(pred, dict) else None
    commit = {"name": "commit", "digest": {"gitCommit": sha}}
    return (isinstance(verdict, dict) and verdict.get("evidence_seq") == seq
            and isinstance(subjects, list) and commit in subjects)  # fmt: skip


@dataclass(frozen=True)
class Published:
    """`oms evidence publish`: the attestation in `commit`'s note, and where it went."""

    commit: str
    added: bool  # False: the note held this very line already
    pushed: str | None  # the remote `refs/notes/oms` was pushed to
    envelope_sha256: str  # of the note line
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"commit": self.commit, "ref": NOTES_REF, "added": self.added,
                "pushed": self.pushed, "envelope_sha256": self.envelope_sha256,
                "bytes": self.bytes}  # fmt: skip


def publish(repo_dir: Path, commit: str, remote: str | None = None) -> Published:
    """`commit`'s attestation (`attest`) added to its note in the user's `refs/notes/oms`,
    and with `remote`, that ref merged with the remote's and pushed (never forced). A remote
    oms will not push to, or no READY verdict, is refused before anything is written."""
    repo, _ = open_store(repo_dir)
    sha = resolve_commit(repo, commit)
    if remote is not None:
        remote_url(repo, remote, push=True)
    line = attested_line(repo.top, sha)
    added = add_note(repo, sha, line)
    if remote is not None:
        push_notes(repo, remote)
    return Published(sha, added, remote, hashlib.sha256(line).hexdigest(), len(line))


def provenance_predicate(store: EvidenceStore, entry: Entry, record: ResultRecord,
                         att: Attestation) -> dict[str, Any]:  # fmt: skip
    """The predicate for the verdict `entry` (`record`); its input is the entry line.
    Runs and transfers are read only from the entries before the verdict, which the
    export has verified as part of the signed log."""
    tests = record.tests
    log = _Before(store, entry.seq)
    run = _run_of(log, record.candidate)
    out: dict[str, Any] = {
        "version": 1,
        "verdict": {"decision": record.decision.value, "evidence_seq": entry.seq,
                    "time": entry.time, "entry": att.descriptor(), **att.membership},
        "base": record.base,
        "policy": {"commit": record.policy_commit, "digest": record.policy_digest},
        "plan_digest": record.plan_digest,
        "profile_digest": record.profile_digest,
        "toolchains": [{"name": t.name, "kind": t.kind, "id": t.id, "tree_digest": t.tree_digest}
                       for t in record.toolchains or ()],
        "scanners": [s.model_dump(mode="json") for s in record.scanners or ()],
        "tests": None if tests is None else {
            "inventory_digest": _digest(tests.model_dump(mode="json")),
            "counts": [c.model_dump(mode="json") for c in tests.counts],
        },
        "contained": run is not None,
    }  # fmt: skip
    if run is not None:
        out["run"] = _run_facts(log, *run)
        out["transfers"] = _transfers(log, run[1])
    return out


def _digest(value: dict[str, Any]) -> str:
    return str(Sha256Digest.of(rfc8785.dumps(value)))


@dataclass(frozen=True)
class _Before:
    """The typed entries of the log before seq `end`."""

    store: EvidenceStore
    end: int

    def payloads(self, model: type[P]) -> list[tuple[Entry, P]]:
        return [(e, r) for e, r in self.store.payloads(model) if e.seq < self.end]


def _run_of(log: _Before, sha: str) -> tuple[AgentRunStart, Entry] | None:
    """The contained run that made `sha`: the latest `agent.run.end` whose collected
    candidate is exactly this commit (oms committed and fetched it outside the sandbox),
    with its `agent.run.start`. A commit amended, rebased or made outside is not one."""
    ends = [e for e, r in log.payloads(AgentRunEnd) if r.candidate == sha]
    if not ends:
        return None
    end = ends[-1]
    run_id = AgentRunEnd.of(end).run_id
    starts = [r for _, r in log.payloads(AgentRunStart) if r.run_id == run_id]
    return (starts[-1], end) if starts else None


def _run_facts(log: _Before, start: AgentRunStart, end: Entry) -> dict[str, Any]:
    """The run, and its egress ledger: an RFC 6962 root over the leaf hashes (as in the
    log's own tree) of the run's `agent.egress` and `agent.tunnel` entries, in log order."""
    ledger = sorted([e.seq for e, r in log.payloads(EgressRequest) if r.run_id == start.run_id]
                    + [e.seq for e, r in log.payloads(TunnelConnection)
                       if r.run_id == start.run_id])  # fmt: skip
    lines = log.store.lines()
    root = root_from_leaf_hashes([leaf_hash(lines[s]) for s in ledger])
    return {
        "run_id": start.run_id, "agent": start.agent, "cli_version": start.cli_version,
        "profile_digest": start.profile_digest, "mountinfo_digest": start.mountinfo_digest,
        "egress": start.egress, "base": start.base, "end_seq": end.seq,
        "egress_ledger": {"count": len(ledger), "root": root.hex(), "seqs": ledger},
    }  # fmt: skip


def _transfers(log: _Before, end: Entry) -> list[dict[str, Any]]:
    """The transfers the run was given: the manifest its dispatch named (a dispatch whose
    recorded agent run is this one), with each approval and whether a human or an
    autopilot rule gave it."""
    dispatches = {r.id for _, r in log.payloads(DispatchRan)
                  if r.detail.get("agent_run_seq") == end.seq}  # fmt: skip
    digests = sorted({str(r.detail["transfer"]) for _, r in log.payloads(DispatchStarted)
                      if r.id in dispatches and r.detail.get("transfer")})  # fmt: skip
    return [_transfer(log, d) for d in digests]


def _transfer(log: _Before, digest: str) -> dict[str, Any]:
    approvals = [{"by": "human" if a.approver.kind == "human" else "autopilot",
                  "name": a.approver.name, "time": a.time, "expires": a.expires}
                 for _, a in log.payloads(ApprovalRecord) if str(a.digest) == digest]  # fmt: skip
    rules = [p.autopilot_rule for _, p in log.payloads(PreviewRecord)
             if str(p.digest) == digest and p.autopilot_rule]  # fmt: skip
    released = any(str(r.digest) == digest for _, r in log.payloads(ReleaseRecord))
    return {"manifest": digest, "approvals": approvals,
            "autopilot_rule": rules[-1] if rules else None, "released": released}  # fmt: skip


def _scan(top: Path, record: ResultRecord, subjects: list[dict[str, Any]],
          predicate: dict[str, Any]) -> None:  # fmt: skip
    """Both scanners over the statement's text, with the verdict's policy, as over a pull
    request body. Digests and oms' own signed checkpoint are left out: oms computed them,
    and the entropy rules flag every hash; every other string is scanned."""
    text = "\n".join(_texts({"subject": subjects, "predicate": predicate}))
    loaded = read_policy_at(top, record.policy_commit)
    report = scan_with_policy([ScanItem.of_bytes("provenance.json", text.encode())], loaded)
    if report.blocking:
        rules = sorted({f.rule for f in report.blocking})
        raise Blocked(f"the provenance attestation has {len(report.blocking)} secret "
                      f"finding(s) ({', '.join(rules)[:120]}); nothing signed",
                      data={"findings": [f.fingerprint for f in report.blocking]})  # fmt: skip


def _texts(value: object, key: str = "") -> Iterator[str]:
    """`{"key": "value"}` (quoted as in the statement: entropy rules look at quoted strings)
    for each string leaf but the checkpoint note and a hash under a key that holds one (a
    hash-shaped string anywhere else is scanned)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k != "checkpoint":
                yield from _texts(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v, key)
    elif isinstance(value, str) and not (key in _HASH_KEYS and _HASH.fullmatch(value)):
        yield json.dumps({key: value})
