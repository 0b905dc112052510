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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, cast, get_args

from evidence import Draft, EvidenceStore, SigningKey, state_root
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
    Manifest,
    Redaction,
)
from gatekeeper.gates.transfer.pack import PayloadPut
from gatekeeper.gates.transfer.packet import Packet, packet
from gatekeeper.gates.transfer.payloads import PreviewRecord, subject_of
from gatekeeper.gates.transfer.select import Selected, Selection, choose
from gatekeeper.gates.transfer.state import envelope_path
from gatekeeper.gates.transfer.visibility import visibility
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.repo.refs import current_branch, default_base, resolve_commit
from gatekeeper.scan import Finding, ScanItem
from gatekeeper.scan.policy import allow_by_path, scan_with_policy
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


Mode = Literal["full", "diff", "redacted"]


@dataclass(frozen=True)
class Sent:
    """One item as it would leave: what it was made from, its bytes and how, and their
    SHA-256 (the digest taken at read time, unless redaction changed the bytes)."""

    selected: Selected
    data: bytes
    mode: Mode
    sha256: str

    def item(self) -> dict[str, Any]:
        """The manifest item's fields (validated with the manifest, once)."""
        return {"path": self.selected.path, "bytes": len(self.data), "sha256": self.sha256,
                "mode": self.mode, "source_sha256": self.selected.sha256}  # fmt: skip


@dataclass(frozen=True)
class Outgoing:
    """What would leave after scanning: the items, the (maybe withheld) purpose, the
    scanners' findings not allowed by policy, the redactions and why it is blocked.

    The items are the files selected, in order, as `mode`, but for those in `redacted`
    (path -> their redacted bytes and the SHA-256 of those): `sent()` makes each item as
    it is read, so that no object per file is kept (10,000 more live objects right after
    the scanners would have the collector walk all the lines they split)."""

    selected: tuple[Selected, ...]
    mode: Literal["full", "diff"]
    redacted: Mapping[str, tuple[bytes, str]]
    purpose: str
    findings: tuple[Finding, ...]
    redactions: tuple[Redaction, ...]
    block_reasons: tuple[str, ...]

    def sent(self) -> Iterator[Sent]:
        for s in self.selected:
            if (r := self.redacted.get(s.path)) is not None:
                yield Sent(s, r[0], "redacted", r[1])
            else:
                yield Sent(s, s.data, self.mode, s.sha256)


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
    """The findings that block: the purpose text is not a path, so no path rule allows it."""
    report = scan_with_policy(items, loaded)
    files = [f for f in report.findings if f.file != PURPOSE_ITEM]
    purpose = [f for f in report.findings if f.file == PURPOSE_ITEM]
    found = [*allow_by_path(files, loaded.policy.scanners), *purpose]
    return [f for f in found if not f.allowed]


def scan_items(selected: list[Selected]) -> list[ScanItem]:
    """One scan item per file: the text scanned is `_text(s.data)`, and its key takes the
    SHA-256 taken when the bytes were read."""
    return [ScanItem.of_bytes(s.path, s.data, "surrogateescape", sha256=s.sha256)
            for s in selected]  # fmt: skip


def scan_outgoing(selected: list[Selected], scan: list[ScanItem], purpose: str, context: str,
                  redact: bool, loaded: LoadedPolicy) -> Outgoing:  # fmt: skip
    """Scan every item (`scan`: their scan items) and the purpose; redact or block on what
    the scanners find."""
    blocks = []
    total = sum(len(s.data) for s in selected)
    limit = loaded.policy.transfer.max_total_bytes
    if total > limit:
        blocks.append(f"{total} bytes is over the transfer limit of {limit}")
    findings = _unallowed([*scan, ScanItem.whole(PURPOSE_ITEM, purpose)], loaded)
    by_file: dict[str, list[Finding]] = {}
    for f in findings:
        by_file.setdefault(f.file, []).append(f)
    if by_file.get(PURPOSE_ITEM):
        blocks.append("the purpose text itself contains a secret")
        purpose = WITHHELD
    redactions: list[Redaction] = []
    redacted: dict[str, tuple[bytes, str]] = {}
    for s in selected:
        if (fs := by_file.get(s.path)) and redact:
            data = redact_lines(_text(s.data), fs).encode("utf-8", "surrogateescape")
            redactions += [Redaction(rule=f.rule, path=f.file, line=f.line) for f in fs]
            redacted[s.path] = (data, hashlib.sha256(data).hexdigest())
    if redact and redactions:
        again = [ScanItem.of_bytes(path, data, "surrogateescape", sha256=sha)
                 for path, (data, sha) in redacted.items()]  # fmt: skip
        if _unallowed(again, loaded):
            blocks.append("secrets remain after redaction")
    elif findings:
        blocks.append(f"{len(findings)} secret finding(s); use --redact to send with "
                      "those lines replaced")  # fmt: skip
    return Outgoing(tuple(selected), "diff" if context == "diff" else "full", redacted, purpose,
                    tuple(findings), tuple(redactions), tuple(blocks))  # fmt: skip


@dataclass(frozen=True)
class Basis:
    """Where the items come from: the repository, HEAD, and what was asked for."""

    repo: Repo
    head: str
    destination: Destination
    context: Context
    paths: tuple[str, ...]
    base: str | None


def _manifest(b: Basis, out: Outgoing, chosen: Selection, pack: PayloadPut | None,
              loaded: LoadedPolicy) -> Manifest:  # fmt: skip
    """The manifest, validated once as a whole: its items, exclusions and findings come in
    as fields, not as models validated one by one first."""
    visible = visibility(b.repo, chosen.selected, chosen.index, b.head)
    excluded = chosen.excluded
    now = clock.now()
    tp = loaded.policy.transfer
    m = Manifest.model_validate({
        "repo_id": b.repo.repo_id, "head": b.head, "branch": current_branch(b.repo),
        "visibility": visible, "destination": b.destination, "purpose": out.purpose,
        "context": b.context, "paths": list(b.paths), "base": b.base,
        "items": [s.item() for s in out.sent()],
        "payload_blob": pack.digest() if pack else None,  # (waits for the hash only)
        "excluded": [{"path": p, "reason": r} for p, r in excluded],
        "findings": [{"scanner": f.scanner, "rule": f.rule, "file": f.file, "line": f.line,
                      "fingerprint": f.fingerprint} for f in out.findings],
        "redactions": list(out.redactions),
        "totals": {"items": len(out.selected), "bytes": sum(len(s.data) for s in out.sent()),
                   "excluded": len(excluded), "findings": len(out.findings),
                   "redactions": len(out.redactions)},
        "blocked": bool(out.block_reasons), "block_reasons": list(out.block_reasons),
        "autopilot_rule": None, "policy_digest": loaded.digest, "created": clock.stamp(now),
        "expires": clock.stamp(now + timedelta(seconds=tp.manifest_ttl_s)),
        "nonce": secrets.token_hex(16),
    })  # fmt: skip
    # The rule is judged on the finished manifest, then named in it (it is signed too).
    return m.model_copy(update={"autopilot_rule": approving_rule(tp, m)})


@dataclass(frozen=True)
class Sealed:
    """A signed manifest: its digest and DSSE envelope, from one computation of its
    canonical bytes (for the digest and the signature alike)."""

    digest: Sha256Digest
    envelope: bytes

    @classmethod
    def of(cls, m: Manifest, key: SigningKey) -> Sealed:
        canonical = m.canonical()
        envelope = sign_envelope(PAYLOAD_TYPE, canonical, key.private, key.key_id)
        return cls(Sha256Digest.of(canonical), json.dumps(envelope).encode())


def _record(store: EvidenceStore, repo: Repo, m: Manifest, sealed: Sealed, loaded: LoadedPolicy,
            requested_by: Sequence[Mapping[str, Any]] = ()) -> Previewed:  # fmt: skip
    """Keep the sealed manifest, then record its preview entry (its payload blob, if any,
    is stored already)."""
    digest = sealed.digest
    atomic_write(envelope_path(store, digest), sealed.envelope)
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
    chosen = choose(repo, context, paths, base, loaded.policy.transfer)
    scan = scan_items(chosen.selected)
    out = scan_outgoing(chosen.selected, scan, purpose, context, redact, loaded)
    if out.block_reasons:  # a blocked manifest keeps no payload: it may hold secrets
        del scan
        m = _manifest(basis, out, chosen, None, loaded)
        return _record(store, repo, m, Sealed.of(m, store.key), loaded, requested_by)
    # The bytes that would leave, as one blob (one durable write however many files),
    # stored while the manifest is built and signed, and before anything names it.
    with PayloadPut(store.blobs, [s.data for s in out.sent()]) as pack:
        # The lines the scanners split 100 MB of text into are freed while the payload is
        # stored: freeing millions of objects needs the GIL, joining and writing do not.
        del scan
        m = _manifest(basis, out, chosen, pack, loaded)
        sealed = Sealed.of(m, store.key)
        pack.stored()
    return _record(store, repo, m, sealed, loaded, requested_by)
