"""`oms transfer preview`: build, scan, sign and record the manifest of what would leave.

Nothing leaves here. The manifest names exactly which bytes would go where and why,
after both scanners read them (and the purpose); findings block unless `--redact`
replaced their lines and a re-scan is clean. It is signed as a DSSE envelope, its bytes
kept as one blob (only when it can be approved), and recorded as `transfer.preview`.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, cast, get_args

from evidence import Draft, EvidenceStore, state_root
from evidence.dsse import sign_envelope
from evidence.state import atomic_write
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import UsageError
from gatekeeper.gates.transfer import clock
from gatekeeper.gates.transfer.autopilot import approving_rule, trusted_policy
from gatekeeper.gates.transfer.manifest import (
    MAX_PURPOSE_CHARS,
    PAYLOAD_TYPE,
    Context,
    Destination,
    Excluded,
    FindingRef,
    Item,
    Manifest,
    Redaction,
    Totals,
    Visibility,
)
from gatekeeper.gates.transfer.packet import Packet, packet
from gatekeeper.gates.transfer.payloads import PreviewRecord, subject_of
from gatekeeper.gates.transfer.select import Selected, choose
from gatekeeper.gates.transfer.state import envelope_path
from gatekeeper.gates.transfer.visibility import visibility
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.repo.refs import current_branch, default_base, resolve_commit
from gatekeeper.scan import Finding, ScanItem
from gatekeeper.scan.policy import scan_with_policy
from gatekeeper.scan.redact import redact_lines
from policy import LoadedPolicy

PURPOSE_ITEM = "<purpose>"  # the scan item name of the purpose text
WITHHELD = "[oms: purpose withheld: it contains a secret]"


@dataclass(frozen=True)
class Previewed:
    """`oms transfer preview`: the signed manifest, its digest, packet and evidence seq."""

    digest: Sha256Digest
    manifest: Manifest
    evidence_seq: int
    approval_packet: Packet

    @property
    def status(self) -> Literal["blocked", "previewed"]:
        return "blocked" if self.manifest.blocked else "previewed"

    def to_json(self) -> dict[str, Any]:
        return {"digest": str(self.digest), "status": self.status,
                "evidence_seq": self.evidence_seq,
                "manifest": self.manifest.model_dump(mode="json"),
                "approval_packet": self.approval_packet.to_json()}  # fmt: skip


@dataclass(frozen=True)
class Outgoing:
    """What would leave after scanning: the items, the (maybe withheld) purpose, the
    scanners' findings not allowed by policy, the redactions and why it is blocked."""

    sent: tuple[tuple[Selected, bytes, Literal["full", "diff", "redacted"]], ...]
    purpose: str
    findings: tuple[Finding, ...]
    redactions: tuple[Redaction, ...]
    block_reasons: tuple[str, ...]

    def items(self) -> list[Item]:
        out = []
        for s, data, mode in self.sent:
            source = hashlib.sha256(s.data).hexdigest()
            sha = source if data is s.data else hashlib.sha256(data).hexdigest()
            out.append(Item(path=s.path, bytes=len(data), sha256=sha, mode=mode,
                            source_sha256=source))  # fmt: skip
        return out


def _check_request(purpose: str, context: str, paths: list[str]) -> None:
    if context == "paths" and not paths:
        raise UsageError("--context paths needs at least one --path")
    if paths and context != "paths":
        raise UsageError("--path goes with --context paths")
    if len(purpose) > MAX_PURPOSE_CHARS:
        raise UsageError(f"--purpose is longer than {MAX_PURPOSE_CHARS} characters")


def _destination(to: str, kind: str) -> Destination:
    provider, sep, model = to.partition(":")
    if not sep or not provider or not model:
        raise UsageError("--to takes PROVIDER:MODEL, e.g. anthropic:claude-sonnet")
    return Destination.model_validate({"provider": provider, "model": model, "kind": kind})


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _unallowed(items: list[ScanItem], loaded: LoadedPolicy) -> list[Finding]:
    return list(scan_with_policy(items, loaded).blocking)


def scan_outgoing(selected: list[Selected], purpose: str, context: str, redact: bool,
                  loaded: LoadedPolicy) -> Outgoing:  # fmt: skip
    """Scan every item and the purpose; redact or block on what the scanners find."""
    blocks = []
    total = sum(len(s.data) for s in selected)
    limit = loaded.policy.transfer.max_total_bytes
    if total > limit:
        blocks.append(f"{total} bytes is over the transfer limit of {limit}")
    scan = [ScanItem.whole(s.path, _text(s.data)) for s in selected]
    findings = _unallowed([*scan, ScanItem.whole(PURPOSE_ITEM, purpose)], loaded)
    by_file: dict[str, list[Finding]] = {}
    for f in findings:
        by_file.setdefault(f.file, []).append(f)
    if by_file.get(PURPOSE_ITEM):
        blocks.append("the purpose text itself contains a secret")
        purpose = WITHHELD
    redactions: list[Redaction] = []
    sent: list[tuple[Selected, bytes, Literal["full", "diff", "redacted"]]] = []
    for s in selected:
        fs = by_file.get(s.path, [])
        if fs and redact:
            data = redact_lines(_text(s.data), fs).encode("utf-8", "surrogateescape")
            redactions += [Redaction(rule=f.rule, path=f.file, line=f.line) for f in fs]
            sent.append((s, data, "redacted"))
        else:
            sent.append((s, s.data, "diff" if context == "diff" else "full"))
    if redact and redactions:
        again = [ScanItem.whole(s.path, _text(d)) for s, d, mode in sent if mode == "redacted"]
        if _unallowed(again, loaded):
            blocks.append("secrets remain after redaction")
    elif findings:
        blocks.append(f"{len(findings)} secret finding(s); use --redact to send with "
                      "those lines replaced")  # fmt: skip
    return Outgoing(tuple(sent), purpose, tuple(findings), tuple(redactions), tuple(blocks))


@dataclass(frozen=True)
class Basis:
    """Where the items come from: the repository, HEAD, and what was asked for."""

    repo: Repo
    head: str
    destination: Destination
    context: Context
    paths: tuple[str, ...]
    base: str | None


def _manifest(b: Basis, out: Outgoing, excluded: list[tuple[str, str]], visible: Visibility,
              pack: str | None, loaded: LoadedPolicy) -> Manifest:  # fmt: skip
    now = clock.now()
    tp = loaded.policy.transfer
    m = Manifest(
        repo_id=b.repo.repo_id, head=b.head, branch=current_branch(b.repo), visibility=visible,
        destination=b.destination, purpose=out.purpose, context=b.context, paths=list(b.paths),
        base=b.base, items=out.items(), payload_blob=pack,
        excluded=[Excluded(path=p, reason=r) for p, r in excluded],
        findings=[FindingRef(scanner=f.scanner, rule=f.rule, file=f.file, line=f.line,
                             fingerprint=f.fingerprint) for f in out.findings],
        redactions=list(out.redactions),
        totals=Totals(items=len(out.sent), bytes=sum(len(d) for _, d, _ in out.sent),
                      excluded=len(excluded), findings=len(out.findings),
                      redactions=len(out.redactions)),
        blocked=bool(out.block_reasons), block_reasons=list(out.block_reasons),
        autopilot_rule=None, policy_digest=loaded.digest, created=clock.stamp(now),
        expires=clock.stamp(now + timedelta(seconds=tp.manifest_ttl_s)),
        nonce=secrets.token_hex(16),
    )  # fmt: skip
    # The rule is judged on the finished manifest, then named in it (it is signed too).
    return m.model_copy(update={"autopilot_rule": approving_rule(tp, m)})


def _record(store: EvidenceStore, repo: Repo, m: Manifest, loaded: LoadedPolicy,
            requested_by: Sequence[Mapping[str, Any]] = ()) -> Previewed:  # fmt: skip
    """Sign and keep the manifest, then record its preview entry."""
    key = store.key
    canonical = m.canonical()
    digest = Sha256Digest.of(canonical)
    envelope = sign_envelope(PAYLOAD_TYPE, canonical, key.private, key.key_id)
    atomic_write(envelope_path(store, digest), json.dumps(envelope).encode())
    d = m.destination
    record = PreviewRecord(digest=digest, worktree=str(repo.top), blocked=m.blocked,
                           destination=f"{d.provider}:{d.model}", bytes=m.totals.bytes,
                           items=m.totals.items, autopilot_rule=m.autopilot_rule)  # fmt: skip
    blobs = [m.payload_blob] if m.payload_blob else []
    subject = [*subject_of(digest), *requested_by]
    entry = store.append(Draft.of(record, subject=subject, blobs=blobs, policy=loaded.digest))
    return Previewed(digest, m, entry.seq, packet(m, digest))


def _context(context: str) -> Context:
    if context not in get_args(Context):
        raise UsageError(f"--context is one of {', '.join(get_args(Context))}")
    return cast(Context, context)


def preview(repo_dir: Path, to: str, purpose: str, context: str, paths: list[str],
            base_ref: str | None, redact: bool, kind: str = "api",
            requested_by: Sequence[Mapping[str, Any]] = ()) -> Previewed:  # fmt: skip
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    store.key  # noqa: B018 -- fail before reading anything when the key is gone
    _check_request(purpose, context, paths)
    dest = _destination(to, kind)
    loaded = trusted_policy(repo)
    head = resolve_commit(repo.top, "HEAD")
    base = None
    if context == "diff":
        base = resolve_commit(repo.top, base_ref) if base_ref else default_base(repo.top, head)
    basis = Basis(repo, head, dest, _context(context), tuple(paths), base)
    selected, excluded = choose(repo, context, paths, base, loaded.policy.transfer)
    out = scan_outgoing(selected, purpose, context, redact, loaded)
    # The bytes that would leave, as one blob (one durable write however many files),
    # and only for a manifest that can be approved: a blocked one may hold secrets.
    pack = None if out.block_reasons else store.blobs.put(b"".join(d for _, d, _ in out.sent))
    m = _manifest(basis, out, excluded, visibility(repo, selected), pack, loaded)
    return _record(store, repo, m, loaded, requested_by)
