"""Offline verification of a commit's provenance (`oms evidence verify --commit`),
docs/provenance.md.

Anyone with a clone can run it: no `$OMS_HOME` is needed (no key, no log, no `oms init`;
oms' own bare repository for the clone is a cache it makes). The commit's note in
`refs/notes/oms` holds one DSSE envelope per line; each is a candidate, and the commit is
verified when one passes every check, in order: `signature` (by a key the trusted policy
lists as a signer at the verdict's time), `statement`, `schema`, `subject`, `decision`,
`checkpoint` (signed by the same key, for the predicate's log), `inclusion` and, when the
policy asks, `contained`. The trusted policy is the default branch's (or `--policy-ref`),
never the commit's own.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from evidence import checkpoint as cp
from evidence.dsse import PAYLOAD_TYPE_INTOTO, DsseError, verify_envelope
from evidence.merkle import verify_inclusion
from evidence.verify import statement_problems
from gatekeeper.gates.signers import trusted_signer
from gatekeeper.repo.git import Repo, git, is_ancestor, open_repo
from gatekeeper.repo.notes import NOTES_REF, note_lines
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import default_branch_ref, read_ref, resolve_commit, write_ref
from gatekeeper.repo.remote import fetch_ref, remote_url
from policy import LoadedPolicy, Signer

PREDICATE = "https://oms.local/provenance/v1"  # the predicate type `oms evidence attest` signs
READY = "READY_FOR_HUMAN"  # gates.result.verdict.Decision.READY, not imported: verify stays light
SCHEMA_FILE = Path(__file__).with_name("provenance.schema.json")
FETCHED_REF = "refs/oms/fetched/notes"  # in oms' own repository: private to oms


@dataclass(frozen=True)
class Check:
    check: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "ok": self.ok, "detail": self.detail}


def verify_commit(repo_dir: Path, commit: str, fetch: str | None = None,
                  policy_ref: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The verification of `commit` as `--json` prints it: `verified` when one attestation
    in its note passes every check; else the checks of the candidate that got furthest."""
    repo = open_repo(repo_dir)
    sha = resolve_commit(repo, commit)
    notes = _fetch_notes(repo, fetch) if fetch is not None else None
    if policy_ref is None:
        policy_at = default_branch_ref(repo)[1]
    else:
        policy_at = resolve_commit(repo, policy_ref)
    loaded = read_policy_at(repo, policy_at)
    lines = note_lines(repo, sha, notes)
    best: tuple[list[Check], Signer | None] = (
        [Check("note", False, f"no provenance attestation for {sha}")], None)  # fmt: skip
    if lines:
        tree = git(repo, "rev-parse", "--verify", f"{sha}^{{tree}}").decode().strip()
        runs = [_candidate(line, sha, tree, loaded) for line in lines]
        note = Check("note", True, f"{len(lines)} attestation(s) in {NOTES_REF}")
        best = max(runs, key=lambda r: (all(c.ok for c in r[0]), sum(c.ok for c in r[0])))
        best = ([note, *best[0]], best[1])
    checks, signer = best
    verified = all(c.ok for c in checks)
    return {"commit": sha, "verified": verified,
            "signer": signer.name if verified and signer is not None else None,
            "attestations": len(lines), "checks": [c.to_json() for c in checks]}  # fmt: skip


def _fetch_notes(repo: Repo, remote: str) -> str | None:
    """The remote's `refs/notes/oms`, fetched into oms' private ref; the user's own notes ref
    follows only when it fast-forwards (never forced). The fetched tip, read for this check."""
    tip = fetch_ref(repo, remote_url(repo, remote), NOTES_REF, FETCHED_REF)
    if tip is None:
        return None
    old = read_ref(repo, NOTES_REF)
    if old != tip and (old is None or is_ancestor(repo, old, tip)):
        write_ref(repo, NOTES_REF, tip, old, f"oms evidence verify --fetch {remote}")
    return tip


def _candidate(line: bytes, sha: str, tree: str,
               loaded: LoadedPolicy) -> tuple[list[Check], Signer | None]:  # fmt: skip
    """The checks of one note line, stopping where nothing further can be read."""
    try:
        envelope = json.loads(line)
    except ValueError:
        return [Check("signature", False, "the note line is not a JSON DSSE envelope")], None
    signed = _signature(envelope, loaded)
    if isinstance(signed, Check):
        return [signed], None
    payload, key = signed
    stmt, problems = statement_problems(payload)
    if envelope.get("payloadType") != PAYLOAD_TYPE_INTOTO:
        problems.append(f"payloadType is not {PAYLOAD_TYPE_INTOTO}")
    if stmt is not None and not problems and stmt.get("predicateType") != PREDICATE:
        problems.append(f"predicateType is {str(stmt.get('predicateType'))[:80]!r}, "
                        f"not {PREDICATE}")  # fmt: skip
    at = _verdict_time(stmt)
    window = trusted_signer(loaded, key, at) if at is not None else None
    checks = [Check("signature", window is not None and window.trusted,
                    window.reason if window is not None else
                    "the statement names no verdict time (predicate.verdict.time)")]  # fmt: skip
    if problems or stmt is None:
        return [*checks, Check("statement", False, "; ".join(problems))], None
    checks.append(Check("statement", True, f"in-toto Statement v1 of {PREDICATE}"))
    predicate = stmt["predicate"]
    schema = _schema_problem(predicate)
    checks.append(Check("schema", schema is None, schema or "the predicate matches its schema"))
    if schema is not None:
        return checks, None
    verdict = predicate["verdict"]
    checks += [_subject(stmt["subject"], sha, tree),
               Check("decision", verdict["decision"] == READY,
                     f"the verdict is {verdict['decision']}")]  # fmt: skip
    checks += _membership(verdict, key)
    if loaded.policy.trust.require_contained:
        contained = predicate["contained"] is True and "run" in predicate
        checks.append(Check("contained", contained, "the commit came from a contained run"
                            if contained else "the policy requires a contained `oms agent "
                            "run` commit; this one was not made by one"))  # fmt: skip
    return checks, window.signer if window is not None else None


def _signature(envelope: object,
               loaded: LoadedPolicy) -> Check | tuple[bytes, bytes]:  # fmt: skip
    """The payload and the raw key of the first listed signer whose signature verifies (the
    envelope's keyid is a hint, never consulted), or the failed `signature` check."""
    signers = loaded.policy.trust.signers
    if not signers:
        return Check("signature", False, f"{loaded.origin} lists no [trust] signers")
    if not isinstance(envelope, dict):
        return Check("signature", False, "the note line is not a DSSE envelope")
    for signer in signers:
        try:
            public = Ed25519PublicKey.from_public_bytes(signer.public_raw)
            return verify_envelope(envelope, public), signer.public_raw
        except DsseError:
            continue
    return Check("signature", False, f"signed by no key in [trust] signers of {loaded.origin} "
                 "(never listed, or removed: revoked)")  # fmt: skip


def _verdict_time(stmt: dict[str, Any] | None) -> datetime | None:
    try:
        at = datetime.fromisoformat(stmt["predicate"]["verdict"]["time"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None
    return at if at.tzinfo is not None else None


def _schema_problem(predicate: object) -> str | None:
    import jsonschema  # only here: the one verify path that needs it

    schema = json.loads(SCHEMA_FILE.read_text())
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(predicate))  # fmt: skip
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"predicate {where}: {error.message[:200]}"


def _subject(subjects: list[dict[str, Any]], sha: str, tree: str) -> Check:
    digests = [s.get("digest") or {} for s in subjects]
    commits = {d.get("gitCommit") for d in digests if "gitCommit" in d}
    trees = {d.get("gitTree") for d in digests if "gitTree" in d}
    ok = commits == {sha} and trees == {tree} and all(len(d) == 1 for d in digests)
    shown = ", ".join(sorted(str(c)[:12] for c in commits)) or "none"
    return Check("subject", ok, f"the subjects are commit {sha[:12]} and its tree" if ok else
                 f"the attestation is about commit {shown}, not {sha} (or not its tree "
                 f"{tree[:12]})")  # fmt: skip


def _membership(verdict: dict[str, Any], key: bytes) -> list[Check]:
    """`checkpoint`: the note is signed by the signer's key under the predicate's log name,
    for that log; `inclusion`: the verdict's leaf is at `evidence_seq` under its root."""
    log = verdict["log"]
    public = Ed25519PublicKey.from_public_bytes(key)
    try:
        signed = cp.verify_signed_checkpoint(verdict["checkpoint"].encode(), log, public,
                                             origin=log)  # fmt: skip
    except cp.CheckpointError as exc:
        return [Check("checkpoint", False, str(exc)),
                Check("inclusion", False, "no verified checkpoint to prove against")]  # fmt: skip
    checks = [Check("checkpoint", True, f"signed checkpoint of {log} at size {signed.size}")]
    proof = verdict["inclusion_proof"]
    seq, size = proof["log_index"], proof["tree_size"]
    try:
        path = [bytes.fromhex(h) for h in proof["hashes"]]
        ok = (seq == verdict["evidence_seq"] and size == signed.size
              and base64.b64decode(proof["root"], validate=True) == signed.root
              and verify_inclusion(seq, size, bytes.fromhex(proof["leaf_hash"]), path,
                                   signed.root))  # fmt: skip
    except (ValueError, binascii.Error):
        ok = False
    detail = (f"entry {seq} is in the log's first {size} entries" if ok else
              f"the inclusion proof of entry {seq} (verdict seq {verdict['evidence_seq']}) "
              f"does not verify against the checkpoint's root at size {signed.size}")  # fmt: skip
    return [*checks, Check("inclusion", ok, detail)]
