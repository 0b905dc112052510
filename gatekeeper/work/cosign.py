"""Cosigners: parties that are not this machine cosign the log's checkpoints.

The trusted policy lists them (`[[evidence.cosigners]]`, `required`, `grace`). oms asks
each over the C2SP tlog-witness protocol (https://c2sp.org/tlog-witness): `POST
<url>/add-checkpoint` with `old` = the size that cosigner last cosigned and the RFC 6962
consistency proof from there to the latest checkpoint. It does so by `oms evidence
cosign`, and once after any other command that appended (never inside an append or a
hook: cli/render.py), where a failure is only a warning.

A witness that holds more entries than our log (409 with a larger size), or that cannot
get from what it cosigned to our checkpoint (422, or 409 at an equal size) has refused
this log: a rollback or a fork it can prove. The refusal is recorded (`cosign.json`) and
`oms evidence audit` reports the log not intact until that cosigner cosigns again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evidence import EvidenceStore, NotInitialised, TamperDetected, state_root
from evidence import checkpoint as cp
from evidence.cosign import (
    Cosigned,
    CosignerKey,
    CosignError,
    CosignState,
    Refusal,
    checkpoint_text,
    read_state,
    request_body,
    verify_cosignature,
    write_state,
)
from evidence.log import locked
from evidence.merkle import consistency_proof, leaf_hash, root_from_leaf_hashes
from evidence.store import GROWN, utc_now
from gatekeeper.errors import known_kind
from gatekeeper.gates.mark import find_mark, policy_commit
from gatekeeper.gates.records import open_store
from gatekeeper.repo.git import Repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.text import sanitize
from policy import Cosigner, EvidencePolicy

if TYPE_CHECKING:  # httpx only where a cosigner is asked (`after_command` runs after
    import httpx  # every command that appended, most with no cosigner to ask)

    from gatekeeper.gates.doctor import Extra  # the doctor's, where doctor asks (its imports)

TIMEOUT_S = 10.0  # `oms evidence cosign`: one whole answer per cosigner
AFTER_TIMEOUT_S = 3.0  # after another command: it has already answered its caller
MAX_ANSWER = 64 << 10
SIZE_TYPE = "text/x.tlog.size"
REMEDY = "oms evidence cosign"
CHECK = "cosign"
COSIGN_LOCK = "cosign.lock"

Status = Literal["cosigned", "refused", "rejected", "unreachable"]


@dataclass(frozen=True)
class CosignResult:
    """One cosigner's answer: cosigned (at `size`), refused this log (it holds
    `witness_size`), rejected the request (not this log or key, a bad cosignature), or
    unreachable."""

    cosigner: str
    status: Status
    detail: str
    size: int | None = None
    witness_size: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SyncReport:
    log_size: int
    required: int
    results: tuple[CosignResult, ...]

    @property
    def cosigned(self) -> int:
        return sum(r.status == "cosigned" for r in self.results)

    @property
    def exit_code(self) -> int:
        if any(r.status in ("refused", "rejected") for r in self.results):
            return 3
        return 4 if self.cosigned < self.required else 0

    def to_json(self) -> dict[str, Any]:
        return {"log_size": self.log_size, "required": self.required,
                "cosigned": self.cosigned,
                "cosigners": [r.to_json() for r in self.results]}  # fmt: skip


def trusted_evidence_policy(repo: Repo, *, record: bool = False) -> EvidencePolicy:
    """`[evidence]` of the default branch's trusted policy, never the worktree's. Only the
    explicit `oms evidence cosign` (`record`) may record a first-run mark, as a gate does;
    audit, doctor and the ask after a command only read: no mark, no cosigners named."""
    if record:
        return read_policy_at(repo.top, policy_commit(repo)).policy.evidence
    try:
        store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    except NotInitialised:
        mark = None
    else:
        mark = find_mark(store, repo)
    return read_policy_at(repo.top, mark.commit).policy.evidence if mark else EvidencePolicy()


def sync(repo_dir: Path, timeout: float = TIMEOUT_S) -> SyncReport:
    """`oms evidence cosign`: ask every cosigner the policy lists, record what they say."""
    repo, store = open_store(repo_dir)
    return sync_store(store, trusted_evidence_policy(repo, record=True), timeout)


@dataclass(frozen=True)
class _Log:
    checkpoint: cp.Checkpoint
    note: bytes
    leaves: list[bytes]


def _signed_log(store: EvidenceStore) -> _Log:
    checkpoint, note = store.latest_checkpoint()
    leaves = [leaf_hash(line) for line in store.lines()[: checkpoint.size]]
    if len(leaves) != checkpoint.size or root_from_leaf_hashes(leaves) != checkpoint.root:
        raise TamperDetected(
            "the signed checkpoint does not match the log; run `oms evidence audit`"
        )
    return _Log(checkpoint, note, leaves)


def sync_store(store: EvidenceStore, policy: EvidencePolicy, timeout: float) -> SyncReport:
    # One sync at a time (the state is read, then rewritten), under its own lock: appends
    # never wait for a cosigner's answer.
    with locked(store.dir, COSIGN_LOCK):
        log = _signed_log(store)
        state = read_state(store.dir)
        results = []
        for cosigner in policy.cosigners:
            result, state = _ask(cosigner, log, state, timeout)
            results.append(result)
        write_state(store.dir, state)
    return SyncReport(log.checkpoint.size, policy.required, tuple(results))


def _post(url: str, body: bytes, timeout: float) -> httpx.Response:
    import httpx

    from gatekeeper.work.http_deadline import Deadline, DeadlineTransport, proxy_for

    target = url.rstrip("/") + "/add-checkpoint"
    deadline = Deadline(time.monotonic() + timeout)
    transport = DeadlineTransport(deadline, proxy_for(target))
    with httpx.Client(transport=transport, timeout=timeout, follow_redirects=False,
                      trust_env=False) as client:  # fmt: skip
        return client.post(target, content=body, headers={"Content-Type": "text/plain"})


def _witness_size(answer: httpx.Response) -> int | None:
    text = answer.text[:40]
    kind = answer.headers.get("content-type", "").split(";")[0].strip()
    if kind == SIZE_TYPE and text.endswith("\n") and text[:-1].isdigit():
        return int(text[:-1])
    return None


def _ask(c: Cosigner, log: _Log, state: CosignState, timeout: float
         ) -> tuple[CosignResult, CosignState]:  # fmt: skip
    """One cosigner: from what it last cosigned; once more from the size a 409 names."""
    import httpx  # as in `_post`

    key = CosignerKey.parse(c.key)
    size = log.checkpoint.size
    held = state.cosigned.get(c.name)
    old = held.size if held is not None and held.key == c.key and held.size <= size else 0
    for attempt in (1, 2):
        try:
            answer = _post(c.url, request_body(old, consistency_proof(old, log.leaves), log.note),
                           timeout)  # fmt: skip
            body = answer.content[:MAX_ANSWER]
        except (httpx.HTTPError, OSError) as exc:
            return CosignResult(c.name, "unreachable", f"{type(exc).__name__}: {exc}"), state
        if answer.status_code == 200:
            return _cosigned(c, key, log, body, state)
        if answer.status_code == 409:
            witness = _witness_size(answer)
            if witness is None:
                return _rejected(c, "409 without a tree size"), state
            if witness > size:
                why = (
                    f"it cosigned {witness} entries but the log has {size}: the log was rolled back"
                )
                return _refused(c, 409, witness, size, why, state)
            if attempt == 2 or witness == old:
                why = f"at {witness} entries it cosigned another log than this one (a fork)"
                return _refused(c, 409, witness, size, why, state)
            old = witness
            continue
        if answer.status_code == 422:
            why = (
                f"our first {old} entries are not the ones it cosigned (consistency proof refused)"
            )
            return _refused(c, 422, old, size, why, state)
        return _rejected(
            c, f"HTTP {answer.status_code}: {body[:120].decode('utf-8', 'replace')}"
        ), state
    raise AssertionError("not reached")


def _rejected(c: Cosigner, detail: str) -> CosignResult:
    return CosignResult(c.name, "rejected", sanitize(detail.strip()))


def _refused(c: Cosigner, status: int, witness: int, size: int, why: str, state: CosignState
             ) -> tuple[CosignResult, CosignState]:  # fmt: skip
    refusal = Refusal(c.name, status, witness, size, why, utc_now())
    state = replace(state, refusals=(*state.refusals, refusal))
    return CosignResult(c.name, "refused", why, witness_size=witness), state


def _cosigned(c: Cosigner, key: CosignerKey, log: _Log, body: bytes, state: CosignState
              ) -> tuple[CosignResult, CosignState]:  # fmt: skip
    note = log.note.decode()
    try:
        got = verify_cosignature(key, checkpoint_text(note), body.decode("utf-8"))
    except (CosignError, UnicodeDecodeError) as exc:
        return _rejected(c, f"not counted: {exc}"), state
    size = log.checkpoint.size
    cosigned = {**state.cosigned, c.name: Cosigned(c.key, size, got.timestamp, note, got.line)}
    # It went from what it held to this log: its earlier refusals no longer stand.
    refusals = tuple(r for r in state.refusals if r.cosigner != c.name)
    return CosignResult(c.name, "cosigned", f"cosigned {size} entries", size=size), CosignState(
        cosigned, refusals
    )


# -- what audit and doctor report ----------------------------------------------------------


@dataclass(frozen=True)
class Coverage:
    """What the stored cosignatures (each verified again under the policy key) cover."""

    log_size: int
    required: int
    cosigners: tuple[dict[str, Any], ...]
    refusals: tuple[Refusal, ...]
    problems: tuple[str, ...]

    @property
    def covering(self) -> int:
        return sum(1 for c in self.cosigners if c["size"] == self.log_size)

    def required_size(self) -> int:
        """The size `required` cosigners have all cosigned (the log's, when none required)."""
        sizes = sorted((c["size"] or 0 for c in self.cosigners), reverse=True)
        return self.log_size if not self.required else sizes[self.required - 1]

    def to_json(self) -> dict[str, Any]:
        return {"required": self.required, "cosigned": self.covering >= self.required,
                "cosigners": list(self.cosigners),
                "refusals": [asdict(r) for r in self.refusals]}  # fmt: skip


def coverage(store: EvidenceStore, policy: EvidencePolicy, log_size: int) -> Coverage:
    state = read_state(store.dir)
    leaves = [leaf_hash(line) for line in store.lines()[:log_size]]
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for c in policy.cosigners:
        held = state.cosigned.get(c.name)
        size, when = _verified(store, c, held, leaves, problems)
        rows.append({"name": c.name, "size": size, "time": when})
    refusals = tuple(r for r in state.refusals if r.cosigner in {c.name for c in policy.cosigners})
    problems += [f"cosigner {r.cosigner} refused this log: {r.reason}" for r in refusals]
    return Coverage(log_size, policy.required, tuple(rows), refusals, tuple(problems))


def _verified(store: EvidenceStore, c: Cosigner, held: Cosigned | None, leaves: list[bytes],
              problems: list[str]) -> tuple[int | None, int | None]:  # fmt: skip
    """The size and time of a stored cosignature that verifies under the policy key over a
    checkpoint of this log; a problem when it covers more entries, or other ones."""
    if held is None or held.key != c.key:
        return None, None
    try:
        key = CosignerKey.parse(c.key)
        checkpoint = store.verify_note(held.note.encode())
        verify_cosignature(key, checkpoint_text(held.note), held.line)
    except (CosignError, cp.CheckpointError):
        return None, None  # not a cosignature by this key of this log: not counted
    if checkpoint.size > len(leaves):
        problems.append(f"cosigner {c.name} cosigned {checkpoint.size} entries but the log has "
                        f"{len(leaves)}: the log was rolled back")  # fmt: skip
    elif root_from_leaf_hashes(leaves[: checkpoint.size]) != checkpoint.root:
        problems.append(f"cosigner {c.name} cosigned other first {checkpoint.size} entries")
    return checkpoint.size, held.timestamp


def audit_json(repo_dir: Path, report: dict[str, Any]) -> dict[str, Any]:
    """The audit's report with `cosign` added; a refusal makes the log not intact."""
    try:
        repo, store = open_store(repo_dir, check_binding=False)
        policy = trusted_evidence_policy(repo)
    except Exception as exc:  # the log's own audit stands without the policy
        if known_kind(exc) is None:
            raise  # a bug is reported as one, not as a warning
        why = sanitize(f"cosignatures not checked: {str(exc).splitlines()[0]}")
        return {**report, "cosign": None, "warnings": [why]}
    if not policy.cosigners:
        return {**report, "cosign": None, "warnings": []}
    found = coverage(store, policy, report["entries"])
    warnings = []
    if found.covering < found.required:
        warnings.append(f"not yet cosigned: {found.covering} of {found.required} required "
                        f"cosigner(s) cover the log's {found.log_size} entries; "
                        f"{REMEDY}")  # fmt: skip
    out = {**report, "cosign": found.to_json(), "warnings": warnings}
    if found.problems and report["intact"]:
        out.update(intact=False, first_bad_seq=None, reason=found.problems[0])
    return out


def doctor_check(repo: Repo) -> Extra | None:
    """Not ready when `required` cosignatures lag the log by more than `grace` entries, or
    when a cosigner refused the log (tampered)."""
    from gatekeeper.gates.doctor import Extra

    try:
        policy = trusted_evidence_policy(repo)
        store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    except Exception:  # an unreadable policy or no log: their own sections say so
        return None
    if not policy.cosigners:
        return None
    try:
        found = coverage(store, policy, len(store.lines()))
    except Exception as exc:  # the doctor reports, never fails
        why = sanitize(str(exc))
        return Extra(name=CHECK, section={"ok": False, "error": why},
                     problems=(f"cosignatures cannot be checked: {why}",))  # fmt: skip
    section = {"ok": not found.problems, **found.to_json()}
    if found.problems:
        return Extra(name=CHECK, section=section, problems=found.problems[:1],
                     remedy="oms evidence audit", tampered=True)  # fmt: skip
    behind = found.log_size - found.required_size()
    if behind > policy.grace:
        problem = (
            f"the log has grown {behind} entries beyond its last required cosignature "
            f"(grace {policy.grace})"
        )
        return Extra(name=CHECK, section=section, problems=(problem,), remedy=REMEDY)
    if behind:  # within the grace: said, never "not ready"
        lag = f"not yet cosigned: {behind} entries past the last required cosignature; {REMEDY}"
        return Extra(name=CHECK, section=section, warnings=(lag,))
    return Extra(name=CHECK, section=section)


def after_command(repo_dir: Path | None) -> None:
    """Once a command that appended has answered: cosign if the policy names cosigners.
    Bounded; never raises; anything short of cosigned is one warning line on stderr."""
    try:
        repo, store = open_store(repo_dir or Path("."))
        if store.repo_id not in GROWN:
            return
        policy = trusted_evidence_policy(repo)
    except Exception:  # no readable policy names a cosigner: doctor and audit say why
        return
    if not policy.cosigners:
        return
    try:
        report = sync_store(store, policy, AFTER_TIMEOUT_S)
    except Exception as exc:  # after the answer: a warning, never a failure
        _warn([f"cosigning skipped: {str(exc).splitlines()[0] if str(exc) else exc!r}"])
        return
    _warn([f"cosigner {r.cosigner} {r.status}: {r.detail}; {REMEDY}"
           for r in report.results if r.status != "cosigned"])  # fmt: skip


def _warn(lines: Sequence[str]) -> None:
    for line in lines:
        print(sanitize(f"oms: warning: {line}"), file=sys.stderr)
