"""The data boundary: preview, approve, release, show, list.

Nothing leaves unseen: `preview` writes a signed manifest of exactly which bytes
would go where and why, scanned by both scanners; `approve` records a human's
yes read from the controlling terminal (or a bounded autopilot rule from the
default branch's policy); `release` writes the payload only against a matching,
unused, unexpired approval, after re-reading every byte and finding it unchanged.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from evidence import Draft, EvidenceStore, TamperDetected, state_root
from evidence.dsse import DsseError, sign_envelope, verify_envelope
from evidence.log import locked
from evidence.state import atomic_write, ensure_private_dir
from policy import LoadedPolicy, TransferPolicy

from ..errors import Blocked, UsageError
from ..git import Repo, git, open_repo, read_policy_at, resolve_commit
from ..result_gate import default_base, default_branch, scan_both
from ..scan import Finding, ScanItem, redact_lines
from ..text import sanitize
from .manifest import (
    PAYLOAD_TYPE,
    Destination,
    Excluded,
    FindingRef,
    Manifest,
    Redaction,
    Totals,
    Visibility,
)
from .select import Selected, candidates, read_files
from .tty import confirm_at_terminal


def _now() -> datetime:
    return datetime.now(UTC)


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_ts(s: str) -> datetime:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _transfers_dir(store: EvidenceStore) -> Path:
    d = store.dir.parent / "transfers"
    ensure_private_dir(d)
    return d


def trusted_policy(repo: Repo) -> LoadedPolicy:
    """Transfer limits and autopilot rules come from the default branch, not the worktree
    or the current branch, which an agent could edit."""
    return read_policy_at(repo.top, default_branch(repo.top))


def visibility(repo: Repo) -> Visibility:
    if git(repo.top, "status", "--porcelain", "--untracked-files=normal").strip():
        return Visibility(state="dirty")
    up = git(repo.top, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{u}", check=False)
    upstream = up.decode().strip()
    if not upstream:
        return Visibility(state="unpushed", upstream=None)
    ahead = git(repo.top, "rev-list", "--count", f"{upstream}..HEAD").decode().strip()
    state = "clean-pushed" if ahead == "0" else "unpushed"
    return Visibility(state=state, upstream=upstream)


def _parse_destination(to: str, kind: str) -> Destination:
    provider, sep, model = to.partition(":")
    if not sep or not provider or not model:
        raise UsageError("--to takes PROVIDER:MODEL, e.g. anthropic:claude-sonnet")
    return Destination.model_validate({"provider": provider, "model": model, "kind": kind})


def _select(repo: Repo, context: str, paths: list[str], base: str | None,
            tp: TransferPolicy) -> tuple[list[Selected], list[tuple[str, str]]]:  # fmt: skip
    if context == "none":
        return [], []
    files, excluded = candidates(repo.top, context, paths)
    if context == "diff":
        assert base is not None
        changed = git(repo.top, "diff", "--name-only", "-z", "--no-renames", base, "--")
        names = {p.decode("utf-8", "surrogateescape") for p in changed.split(b"\0") if p}
        selected = []
        for f in files:
            if f in names:
                diff = git(repo.top, "diff", "--no-ext-diff", "--no-textconv", "--no-color",
                           base, "--", f)  # fmt: skip
                if len(diff) > tp.max_file_bytes:
                    excluded.append((f, "diff over the size limit"))
                elif diff:
                    selected.append(Selected(f, diff))
        return selected, excluded
    selected, more = read_files(repo.top, files, tp.max_file_bytes)
    return selected, excluded + more


def _autopilot(tp: TransferPolicy, m: dict[str, Any]) -> str | None:
    """The first rule that approves this manifest, if any.

    Never with a finding that would leave: a blocked manifest never qualifies, and
    findings qualify only when every one was redacted and the re-scan was clean.
    """
    if m["blocked"] or (m["findings"] and not m["redactions"]):
        return None
    dest = f"{m['destination']['provider']}:{m['destination']['model']}"
    for rule in tp.autopilot:
        if (dest in rule.destinations and m["totals"]["bytes"] <= rule.max_bytes
                and m["context"] in rule.context
                and (not rule.require_clean_pushed
                     or m["visibility"]["state"] == "clean-pushed")):  # fmt: skip
            return rule.name
    return None


def _item(s: Selected, data: bytes, mode: str) -> dict[str, Any]:
    source = hashlib.sha256(s.data).hexdigest()
    sent = source if data is s.data else hashlib.sha256(data).hexdigest()
    return {"path": s.path, "bytes": len(data), "sha256": sent, "mode": mode,
            "source_sha256": source}  # fmt: skip


def packet(m: Manifest, digest: str) -> dict[str, Any]:
    """The approval packet: summary lines and the one command to copy. All sanitised."""
    d = m.destination
    risks = []
    if m.visibility.state == "dirty":
        risks.append("the worktree has uncommitted changes: what leaves is not in any commit")
    if m.visibility.state == "unpushed":
        risks.append("HEAD has commits not on its upstream: this code is not public yet")
    if m.redactions:
        lines = len({(r.path, r.line) for r in m.redactions})
        risks.append(f"{len(m.redactions)} secret finding(s) redacted ({lines} line(s) replaced)")
    summary = [
        f"destination: {d.provider}:{d.model} ({d.kind})",
        f"purpose: {m.purpose}",
        f"context: {m.context}; {m.totals.items} item(s), {m.totals.bytes} bytes; "
        f"{m.totals.excluded} path(s) excluded",
        f"repository: {m.branch or '(detached)'} at {m.head[:12]}, {m.visibility.state}"
        + (f" (upstream {m.visibility.upstream})" if m.visibility.upstream else ""),
        *[f"risk: {r}" for r in risks],
        f"expires: {m.expires}",
    ]
    if m.blocked:
        summary += [f"BLOCKED: {r}" for r in m.block_reasons]
    if m.autopilot_rule:
        summary.append(f"autopilot rule that applies: {m.autopilot_rule}")
    code = m.nonce[:8]
    return {
        "summary": [sanitize(s) for s in summary],
        "copyable_text_block": "" if m.blocked else f"oms transfer approve {digest} --code {code}",
    }


def preview(repo_dir: Path, to: str, purpose: str, context: str, paths: list[str],
            base_ref: str | None, redact: bool, kind: str = "api") -> dict[str, Any]:  # fmt: skip
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    key = store.key
    if context == "paths" and not paths:
        raise UsageError("--context paths needs at least one --path")
    if paths and context != "paths":
        raise UsageError("--path goes with --context paths")
    dest = _parse_destination(to, kind)
    loaded = trusted_policy(repo)
    tp = loaded.policy.transfer
    head = resolve_commit(repo.top, "HEAD")
    base = None
    if context == "diff":
        base = resolve_commit(repo.top, base_ref) if base_ref else default_base(repo.top, head)
    branch = git(repo.top, "symbolic-ref", "-q", "--short", "HEAD", check=False).decode().strip()
    selected, excluded = _select(repo, context, paths, base, tp)
    total = sum(len(s.data) for s in selected)
    block_reasons = []
    if total > tp.max_total_bytes:
        block_reasons.append(f"{total} bytes is over the transfer limit of {tp.max_total_bytes}")
    items_to_scan = [ScanItem.whole(s.path, s.data.decode("utf-8", "surrogateescape"))
                     for s in selected]  # fmt: skip
    items_to_scan.append(ScanItem.whole("<purpose>", purpose))
    findings, _ = scan_both(items_to_scan, loaded)
    allowed = set(loaded.policy.scanners.allow_fingerprints)
    findings = [f for f in findings if f.fingerprint not in allowed]
    redactions: list[Redaction] = []
    sent: list[tuple[Selected, bytes, str]] = []
    by_file: dict[str, list[Finding]] = {}
    for f in findings:
        by_file.setdefault(f.file, []).append(f)
    if by_file.get("<purpose>"):
        block_reasons.append("the purpose text itself contains a secret")
        purpose = "[oms: purpose withheld: it contains a secret]"
    for s in selected:
        fs = by_file.get(s.path, [])
        if fs and redact:
            text = redact_lines(s.data.decode("utf-8", "surrogateescape"), fs)
            data = text.encode("utf-8", "surrogateescape")
            redactions += [Redaction(rule=f.rule, path=f.file, line=f.line) for f in fs]
            sent.append((s, data, "redacted"))
        else:
            sent.append((s, s.data, "diff" if context == "diff" else "full"))
    if redact and redactions:
        again, _ = scan_both([ScanItem.whole(s.path, d.decode("utf-8", "surrogateescape"))
                              for s, d, mode in sent if mode == "redacted"], loaded)  # fmt: skip
        if [f for f in again if f.fingerprint not in allowed]:
            block_reasons.append("secrets remain after redaction")
    elif findings:
        block_reasons.append(f"{len(findings)} secret finding(s); use --redact to send with "
                             "those lines replaced")  # fmt: skip
    # The bytes that would leave, as one blob (one durable write however many files),
    # and only for a manifest that can be approved: a blocked one may hold secrets.
    pack = None if block_reasons else store.blobs.put(b"".join(d for _, d, _ in sent))
    now = _now()
    fields: dict[str, Any] = {
        "repo_id": repo.repo_id, "head": head, "branch": branch or None,
        "visibility": visibility(repo).model_dump(), "destination": dest.model_dump(),
        "purpose": purpose, "context": context, "base": base,
        "items": [_item(s, d, mode) for s, d, mode in sent],
        "paths": list(paths), "payload_blob": pack,
        "excluded": [Excluded(path=p, reason=r).model_dump() for p, r in excluded],
        "findings": [FindingRef(scanner=f.scanner, rule=f.rule, file=f.file, line=f.line,
                                fingerprint=f.fingerprint).model_dump() for f in findings],
        "redactions": [r.model_dump() for r in redactions],
        "totals": Totals(items=len(sent), bytes=sum(len(d) for _, d, _ in sent),
                         excluded=len(excluded), findings=len(findings),
                         redactions=len(redactions)).model_dump(),
        "blocked": bool(block_reasons),
        "block_reasons": block_reasons, "autopilot_rule": None,
        "policy_digest": loaded.digest, "created": _ts(now),
        "expires": _ts(now + timedelta(seconds=tp.manifest_ttl_s)),
        "nonce": secrets.token_hex(16),
    }  # fmt: skip
    fields["autopilot_rule"] = _autopilot(tp, fields)
    m = Manifest.model_validate(fields)
    canonical = m.canonical()
    digest = "sha256:" + hashlib.sha256(canonical).hexdigest()
    envelope = sign_envelope(PAYLOAD_TYPE, canonical, key.private, key.key_id)
    name = digest.removeprefix("sha256:")
    atomic_write(_transfers_dir(store) / f"{name}.dsse.json", json.dumps(envelope).encode())
    entry = store.append(Draft(
        kind="transfer.preview",
        subject=[{"name": "transfer-manifest", "digest": {"sha256": name}}],
        data={"digest": digest, "blocked": m.blocked,
              "destination": f"{dest.provider}:{dest.model}", "bytes": m.totals.bytes,
              "items": m.totals.items, "autopilot_rule": m.autopilot_rule},
        blobs=[pack] if pack else [], policy=loaded.digest,
    ))  # fmt: skip
    return {"digest": digest, "status": "blocked" if m.blocked else "previewed",
            "evidence_seq": entry.seq, "manifest": m.model_dump(mode="json"),
            "approval_packet": packet(m, digest)}  # fmt: skip


def _load(store: EvidenceStore, digest: str) -> Manifest:
    name = digest.removeprefix("sha256:")
    if len(name) != 64 or any(c not in "0123456789abcdef" for c in name):
        raise UsageError(f"not a manifest digest: {digest[:80]!r}")
    path = _transfers_dir(store) / f"{name}.dsse.json"
    try:
        envelope = json.loads(path.read_bytes())
        payload = verify_envelope(envelope, store.key.public)
    except FileNotFoundError:
        raise UsageError(f"no manifest {digest}") from None
    except (DsseError, ValueError):
        raise TamperDetected(f"manifest {digest} does not verify: the stored copy was altered"
                             ) from None  # fmt: skip
    m = Manifest.model_validate_json(payload)
    if m.digest() != f"sha256:{name}" or envelope.get("payloadType") != PAYLOAD_TYPE:
        raise TamperDetected(f"manifest {digest} does not match its digest")
    return m


def state_of(
    store: EvidenceStore, m: Manifest, digest: str, lines: list[bytes] | None = None
) -> dict[str, Any]:
    """The manifest's state from its evidence entries (`lines`: the log, if already read)."""
    key = digest.encode()
    entries = [json.loads(line) for line in (store.lines() if lines is None else lines)
               if b'"transfer.' in line and key in line]  # fmt: skip
    approvals = [e for e in entries if e["kind"] == "transfer.approve"]
    releases = [e for e in entries if e["kind"] == "transfer.release"]
    used = {r["data"]["approval_id"] for r in releases}
    now = _now()
    live = [a for a in approvals if a["data"]["approval_id"] not in used
            and _parse_ts(a["data"]["expires"]) > now]  # fmt: skip
    if m.blocked:
        status = "blocked"
    elif releases:
        status = "released"
    elif live:
        status = "approved"
    elif _parse_ts(m.expires) <= now or approvals:
        status = "expired"
    else:
        status = "previewed"
    return {"status": status, "approvals": approvals, "releases": releases, "live": live}


def approve(repo_dir: Path, digest: str, code: str) -> dict[str, Any]:
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    m = _load(store, digest)
    if not secrets.compare_digest(code, m.nonce[:8]):
        raise Blocked("the code does not match this manifest; copy the command from its packet")
    if m.blocked:
        raise Blocked("a blocked manifest cannot be approved: " + "; ".join(m.block_reasons))
    if _parse_ts(m.expires) <= _now():
        raise Blocked("the manifest has expired; preview again")
    st = state_of(store, m, digest)
    if st["releases"]:
        raise Blocked("this manifest was already released; preview again")
    if st["live"]:
        raise Blocked("this manifest already has an unused approval")
    tp = trusted_policy(repo).policy.transfer
    rule = _autopilot(tp, m.model_dump(mode="json"))
    if rule is not None:
        approver = {"kind": "policy", "name": f"policy:{rule}"}
    else:
        summary = packet(m, digest)["summary"]
        user = confirm_at_terminal(summary)  # refuses (Blocked) without a terminal or a yes
        approver = {"kind": "human", "name": user["name"], "uid": user["uid"]}
    now = _now()
    data = {
        "digest": digest,
        "approval_id": secrets.token_hex(16),
        "approver": approver,
        "time": _ts(now),
        "expires": _ts(now + timedelta(seconds=tp.approval_ttl_s)),
    }
    entry = store.append(
        Draft(
            kind="transfer.approve",
            data=data,
            subject=[
                {"name": "transfer-manifest", "digest": {"sha256": digest.removeprefix("sha256:")}}
            ],
        )
    )
    return {**data, "evidence_seq": entry.seq, "status": "approved"}  # fmt: skip


def _payload(m: Manifest, store: EvidenceStore) -> bytes:
    """The release format: the manifest's canonical JSON on one line, then for each item a
    JSON header line {"path","bytes","sha256","mode"} followed by exactly that many bytes
    and a newline."""
    pack = store.blobs.get(m.payload_blob) if m.payload_blob else b""
    parts = [m.canonical(), b"\n"]
    at = 0
    for item in m.items:
        data = pack[at : at + item.bytes]
        at += item.bytes
        if hashlib.sha256(data).hexdigest() != item.sha256:
            raise TamperDetected(f"stored payload of {m.digest()} does not match its manifest")
        head = {k: v for k, v in item.model_dump().items() if k != "source_sha256"}
        parts += [json.dumps(head, sort_keys=True).encode(), b"\n", data, b"\n"]
    return b"".join(parts)


def release(repo_dir: Path, digest: str, out: str | None) -> tuple[dict[str, Any], bytes]:
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    with locked(_transfers_dir(store), "lock"):
        m = _load(store, digest)
        st = state_of(store, m, digest)
        if m.blocked:
            raise Blocked("a blocked manifest is never released")
        if st["releases"]:
            raise Blocked(f"{digest} was already released; one manifest, one release")
        if not st["live"]:
            raise Blocked(f"no unused, unexpired approval for {digest} (none, or it expired)")
        approval = st["live"][0]["data"]
        head = resolve_commit(repo.top, "HEAD")
        if head != m.head:
            raise Blocked(f"HEAD moved since the preview ({m.head[:12]} -> {head[:12]})")
        tp = trusted_policy(repo).policy.transfer
        base = m.base
        selected, _ = _select(repo, m.context, m.paths, base, tp)
        now_paths = sorted(s.path for s in selected)
        then_paths = sorted(i.path for i in m.items)
        if now_paths != then_paths:
            raise Blocked("the files changed since the preview (added or removed): preview again")
        for s, item in zip(sorted(selected, key=lambda x: x.path),
                           sorted(m.items, key=lambda x: x.path), strict=True):  # fmt: skip
            if hashlib.sha256(s.data).hexdigest() != item.source_sha256:
                raise Blocked(f"{sanitize(item.path)} changed since the preview: preview again")
        payload = _payload(m, store)
        entry = store.append(Draft(kind="transfer.release", data={
            "digest": digest, "approval_id": approval["approval_id"],
            "payload_sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload),
            "out": "stdout" if out in (None, "-") else "file"},
            subject=[{"name": "transfer-manifest",
                      "digest": {"sha256": digest.removeprefix("sha256:")}}]))  # fmt: skip
    return {"digest": digest, "status": "released", "evidence_seq": entry.seq,
            "approval_id": approval["approval_id"], "payload_bytes": len(payload),
            "payload_sha256": hashlib.sha256(payload).hexdigest()}, payload  # fmt: skip


def show(repo_dir: Path, digest: str) -> dict[str, Any]:
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    m = _load(store, digest)
    st = state_of(store, m, digest)
    return {"digest": digest, "status": st["status"], "manifest": m.model_dump(mode="json"),
            "approval_packet": packet(m, digest),
            "approvals": [a["data"] for a in st["approvals"]],
            "releases": [r["data"] for r in st["releases"]]}  # fmt: skip


def list_transfers(repo_dir: Path) -> dict[str, Any]:
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    rows = []
    lines = store.lines()  # read once, not once per manifest
    for line in lines:
        if b'"kind":"transfer.preview"' in line:
            e = json.loads(line)
            digest = e["data"]["digest"]
            try:
                m = _load(store, digest)
                status = state_of(store, m, digest, lines)["status"]
            except (TamperDetected, UsageError) as exc:
                status = f"unverifiable: {exc}"
            rows.append(
                {
                    "digest": digest,
                    "status": status,
                    "time": e["time"],
                    "destination": e["data"]["destination"],
                    "bytes": e["data"]["bytes"],
                }
            )
    return {"transfers": rows}  # fmt: skip
