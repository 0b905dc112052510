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
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from evidence import Draft, EvidenceStore, TamperDetected, state_root
from evidence.dsse import DsseError, sign_envelope, verify_envelope
from evidence.log import locked
from evidence.state import atomic_write, ensure_private_dir
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import Blocked, UsageError
from gatekeeper.gates.transfer.manifest import (
    MAX_PURPOSE_CHARS,
    PAYLOAD_TYPE,
    Destination,
    Excluded,
    FindingRef,
    Manifest,
    Redaction,
    Totals,
    Visibility,
)
from gatekeeper.gates.transfer.select import (
    Selected,
    candidates,
    link_reason,
    name_exclusion,
    read_files,
    read_one,
)
from gatekeeper.gates.transfer.tty import confirm_at_terminal, wrap_exact
from gatekeeper.repo.fsread import FileRefused, LinkRefused, Missing, RepoFiles
from gatekeeper.repo.git import Repo, is_ancestor, open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import current_branch, default_base, default_branch, resolve_commit
from gatekeeper.repo.remote import remote_tip
from gatekeeper.repo.worktree import (
    REGULAR_MODES,
    TreeEntry,
    blob_id,
    index_entries,
    read_blobs,
    tree_entries,
    unified_diff,
)
from gatekeeper.scan import Finding, ScanItem
from gatekeeper.scan.policy import scan_with_policy
from gatekeeper.scan.redact import redact_lines
from gatekeeper.text import sanitize
from policy import LoadedPolicy, TransferPolicy


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


def _same_bytes(tree: dict[str, TreeEntry], s: Selected) -> bool:
    """The worktree bytes an item was made from are the blob at its path in `tree`
    (an item whose file is absent matches a tree without that path)."""
    entry = tree.get(s.path)
    if s.source is None:
        return entry is None
    return (entry is not None and entry.mode in REGULAR_MODES
            and blob_id(s.source, len(entry.oid)) == entry.oid)  # fmt: skip


def visibility(repo: Repo, items: Sequence[Selected]) -> Visibility:
    """Decided from the items' own bytes, never from `git status`.

    dirty: an item's bytes are not the blob at its path in HEAD, or the index hides or
    has not merged an entry (skip-worktree, assume-unchanged, a conflict); unpushed: no
    commit confirmed on the remote holds HEAD and every item's bytes at its path;
    clean-pushed otherwise. Recompute it at approve and at release (the lead wires it).
    """
    head = resolve_commit(repo.top, "HEAD")
    if any(e.hidden or e.stage for e in index_entries(repo)):
        return Visibility(state="dirty")
    head_tree = tree_entries(repo, head) if items else {}
    if not all(_same_bytes(head_tree, s) for s in items):
        return Visibility(state="dirty")
    tip = remote_tip(repo)
    if tip is None:
        return Visibility(state="unpushed", upstream=None)
    upstream, commit = tip
    confirmed = commit == head or is_ancestor(repo, head, commit)
    if confirmed and items and commit != head:
        remote_tree = tree_entries(repo, commit)
        confirmed = all(_same_bytes(remote_tree, s) for s in items)
    return Visibility(state="clean-pushed" if confirmed else "unpushed", upstream=upstream)


def _parse_destination(to: str, kind: str) -> Destination:
    provider, sep, model = to.partition(":")
    if not sep or not provider or not model:
        raise UsageError("--to takes PROVIDER:MODEL, e.g. anthropic:claude-sonnet")
    return Destination.model_validate({"provider": provider, "model": model, "kind": kind})


def _select(repo: Repo, context: str, paths: list[str], base: str | None,
            tp: TransferPolicy) -> tuple[list[Selected], list[tuple[str, str]]]:  # fmt: skip
    if context == "none":
        return [], []
    files, excluded = candidates(repo, context, paths)
    if context == "diff":
        assert base is not None
        return _select_diff(repo, files, base, tp.max_file_bytes, excluded)
    selected, more = read_files(repo.top, files, tp.max_file_bytes)
    return selected, excluded + more


Chosen = tuple[list[Selected], list[tuple[str, str]]]


def _select_diff(repo: Repo, files: list[str], base: str, max_bytes: int,
                 excluded: list[tuple[str, str]]) -> Chosen:  # fmt: skip
    """Per-file diffs of `base` against the worktree bytes, for the selected names only.

    Each diff is built in Python from the base blob and the bytes read through fsread,
    so the exclusion list holds for the bytes: no pathspec, no repository diff driver.
    Tracked files and files of `base` count (as `git diff BASE`); untracked ones are not
    read, and a `base` file no longer in the index shows as deleted.
    """
    tree = tree_entries(repo, base)
    tracked = {e.path for e in index_entries(repo)}
    keep = [f for f in files if f in tracked]
    seen = {p for p, _ in excluded} | set(keep)
    for f in sorted(set(tree) - tracked):  # not in the index: deleted, its worktree unread
        if f in seen:
            continue
        why = name_exclusion(f)
        if why:
            excluded.append((f, why))
        else:
            keep.append(f)
    old_ids = {f: tree[f] for f in keep if f in tree}
    if bad := [f for f, e in old_ids.items() if e.mode not in REGULAR_MODES]:
        excluded += [(f, "not a regular file in the base") for f in bad]
        keep = [f for f in keep if f not in bad]
    blobs = read_blobs(repo, (old_ids[f].oid for f in keep if f in old_ids))
    selected = []
    with RepoFiles(repo.top) as wt:
        for f in sorted(keep):
            old = blobs[old_ids[f].oid] if f in old_ids else None
            try:
                selected += _diff_item(wt, f, old, max_bytes, f in tracked)
            except LinkRefused as exc:
                excluded.append((f, link_reason(repo.top, f, exc)))
            except FileRefused as exc:
                excluded.append((f, exc.reason))
    return selected, excluded


def _diff_item(wt: RepoFiles, f: str, old: bytes | None, max_bytes: int,
               tracked: bool) -> list[Selected]:  # fmt: skip
    """[the diff of `f`] ([] when unchanged); FileRefused with the reason it is excluded.
    An untracked path is compared as absent (as `git diff BASE` does): it is not read."""
    new: bytes | None = None
    try:
        new = read_one(wt, f, max_bytes) if tracked else None
    except Missing:
        pass
    if old is not None and b"\0" in old[:8192]:
        raise FileRefused(f, "binary")
    diff = unified_diff(f, old, new)
    if len(diff) > max_bytes:
        raise FileRefused(f, "diff over the size limit")
    return [Selected(f, diff, new)] if diff else []


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


def _clean(text: str) -> str:
    """One neutralised line, never cut: what a human approves is shown whole."""
    return sanitize(text, limit=sys.maxsize)


def _subject(digest: Sha256Digest) -> list[dict[str, Any]]:
    return [{"name": "transfer-manifest", "digest": {"sha256": digest.hex}}]


def _risks(m: Manifest) -> list[str]:
    risks = []
    if m.visibility.state == "dirty":
        risks.append("the worktree has uncommitted changes: what leaves is not in any commit")
    if m.visibility.state == "unpushed":
        risks.append("HEAD has commits not on its upstream: this code is not public yet")
    if m.redactions:
        lines = len({(r.path, r.line) for r in m.redactions})
        risks.append(f"{len(m.redactions)} secret finding(s) redacted ({lines} line(s) replaced)")
    return [f"risk: {r}" for r in risks]


def _repository_line(m: Manifest) -> str:
    upstream = f" (upstream {m.visibility.upstream})" if m.visibility.upstream else ""
    return (
        f"repository: {m.branch or '(detached)'} at {m.head[:12]}, {m.visibility.state}" + upstream
    )


def _context_line(m: Manifest) -> str:
    return (f"context: {m.context}; {m.totals.items} item(s), {m.totals.bytes} bytes; "
            f"{m.totals.excluded} path(s) excluded")  # fmt: skip


def packet(m: Manifest, digest: Sha256Digest | str) -> dict[str, Any]:
    """The approval packet: summary lines and the one command to copy. All sanitised."""
    d = m.destination
    summary = [
        f"destination: {d.provider}:{d.model} ({d.kind})",
        f"purpose: {m.purpose}",
        _context_line(m),
        _repository_line(m),
        *_risks(m),
        f"expires: {m.expires}",
    ]
    if m.blocked:
        summary += [f"BLOCKED: {r}" for r in m.block_reasons]
    if m.autopilot_rule:
        summary.append(f"autopilot rule that applies: {m.autopilot_rule}")
    command = f"oms transfer approve {Sha256Digest.parse(digest)} --code {m.nonce[:8]}"
    return {
        "summary": [_clean(s) for s in summary],
        "copyable_text_block": "" if m.blocked else command,
    }


def prompt_lines(m: Manifest) -> list[str]:
    """What the terminal shows before it asks: everything that leaves as text, in full —
    the destination, the whole purpose (wrapped, no character dropped), every file that
    leaves, and every name the manifest itself carries. Each line neutralised."""
    d = m.destination
    lines = [
        _clean(f"destination: {d.provider}:{d.model} ({d.kind})"),
        f"purpose ({len(m.purpose)} characters, in full):",
        *["  " + chunk for chunk in wrap_exact(_clean(m.purpose))],
        _clean(_repository_line(m)),
        _context_line(m),
        *_risks(m),
        f"files that leave ({len(m.items)}):",
        *[f"  {_clean(i.path)} ({i.bytes} bytes, {i.mode})" for i in m.items],
    ]
    if m.paths:
        lines.append(f"asked for ({len(m.paths)}):")
        lines += [f"  {_clean(p)}" for p in m.paths]
    if m.excluded:
        lines.append(f"named in the manifest, content not sent ({len(m.excluded)}):")
        lines += [f"  {_clean(e.path)}: {_clean(e.reason)}" for e in m.excluded]
    lines.append(f"expires: {m.expires}")
    return lines


def preview(repo_dir: Path, to: str, purpose: str, context: str, paths: list[str],
            base_ref: str | None, redact: bool, kind: str = "api") -> dict[str, Any]:  # fmt: skip
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    key = store.key
    if context == "paths" and not paths:
        raise UsageError("--context paths needs at least one --path")
    if paths and context != "paths":
        raise UsageError("--path goes with --context paths")
    if len(purpose) > MAX_PURPOSE_CHARS:
        raise UsageError(f"--purpose is longer than {MAX_PURPOSE_CHARS} characters")
    dest = _parse_destination(to, kind)
    loaded = trusted_policy(repo)
    tp = loaded.policy.transfer
    head = resolve_commit(repo.top, "HEAD")
    base = None
    if context == "diff":
        base = resolve_commit(repo.top, base_ref) if base_ref else default_base(repo.top, head)
    branch = current_branch(repo)
    selected, excluded = _select(repo, context, paths, base, tp)
    total = sum(len(s.data) for s in selected)
    block_reasons = []
    if total > tp.max_total_bytes:
        block_reasons.append(f"{total} bytes is over the transfer limit of {tp.max_total_bytes}")
    items_to_scan = [ScanItem.whole(s.path, s.data.decode("utf-8", "surrogateescape"))
                     for s in selected]  # fmt: skip
    items_to_scan.append(ScanItem.whole("<purpose>", purpose))
    findings = scan_with_policy(items_to_scan, loaded).blocking
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
        again = scan_with_policy([ScanItem.whole(s.path, d.decode("utf-8", "surrogateescape"))
                              for s, d, mode in sent if mode == "redacted"], loaded)  # fmt: skip
        if again.blocking:
            block_reasons.append("secrets remain after redaction")
    elif findings:
        block_reasons.append(f"{len(findings)} secret finding(s); use --redact to send with "
                             "those lines replaced")  # fmt: skip
    # The bytes that would leave, as one blob (one durable write however many files),
    # and only for a manifest that can be approved: a blocked one may hold secrets.
    pack = None if block_reasons else store.blobs.put(b"".join(d for _, d, _ in sent))
    now = _now()
    fields: dict[str, Any] = {
        "repo_id": repo.repo_id, "head": head, "branch": branch,
        "visibility": visibility(repo, selected).model_dump(), "destination": dest.model_dump(),
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
    digest = Sha256Digest.of(canonical)
    envelope = sign_envelope(PAYLOAD_TYPE, canonical, key.private, key.key_id)
    atomic_write(_transfers_dir(store) / f"{digest.hex}.dsse.json", json.dumps(envelope).encode())
    # The worktree is recorded here, not in the manifest (which leaves): it is how a
    # copied approval command finds the repository from any directory.
    entry = store.append(Draft(
        kind="transfer.preview", subject=_subject(digest),
        data={"digest": str(digest), "worktree": str(repo.top), "blocked": m.blocked,
              "destination": f"{dest.provider}:{dest.model}", "bytes": m.totals.bytes,
              "items": m.totals.items, "autopilot_rule": m.autopilot_rule},
        blobs=[pack] if pack else [], policy=loaded.digest,
    ))  # fmt: skip
    return {"digest": str(digest), "status": "blocked" if m.blocked else "previewed",
            "evidence_seq": entry.seq, "manifest": m.model_dump(mode="json"),
            "approval_packet": packet(m, digest)}  # fmt: skip


def _load(store: EvidenceStore, digest: Sha256Digest) -> Manifest:
    path = _transfers_dir(store) / f"{digest.hex}.dsse.json"
    try:
        envelope = json.loads(path.read_bytes())
        payload = verify_envelope(envelope, store.key.public)
    except FileNotFoundError:
        raise UsageError(f"no manifest {digest}") from None
    except (DsseError, ValueError):
        raise TamperDetected(f"manifest {digest} does not verify: the stored copy was altered"
                             ) from None  # fmt: skip
    m = Manifest.model_validate_json(payload)
    if m.digest() != digest or envelope.get("payloadType") != PAYLOAD_TYPE:
        raise TamperDetected(f"manifest {digest} does not match its digest")
    if m.repo_id != store.repo_id:
        raise TamperDetected(f"manifest {digest} is stored under a repository it does not name")
    return m


# -- finding the manifest and its repository from the digest alone ---------------------


@dataclass(frozen=True)
class Located:
    """A verified manifest, the store that holds it and the repository it names."""

    repo: Repo
    store: EvidenceStore
    manifest: Manifest
    digest: Sha256Digest


def _store_holding(root: Path, digest: Sha256Digest) -> EvidenceStore:
    """The one repository under the state root whose transfers hold this manifest."""
    found = sorted(root.glob(f"repos/*/transfers/{digest.hex}.dsse.json"))
    if not found:
        raise UsageError(f"no manifest {digest} under {root}")
    if len(found) > 1:
        raise TamperDetected(f"manifest {digest} is stored under {len(found)} repositories; "
                             "pass --repo")  # fmt: skip
    return EvidenceStore.open(root, found[0].parent.parent.name)


def _cwd_repo() -> Repo | None:
    try:
        return open_repo(Path.cwd())
    except (UsageError, OSError):
        return None


def _recorded_repo(store: EvidenceStore, digest: Sha256Digest) -> Repo:
    """The worktree the manifest was previewed in (from its preview entry), if it is still
    the repository the manifest names."""
    previews = _matching(_entries(store.lines()), "transfer.preview", digest)
    where = previews[-1]["data"].get("worktree") if previews else None
    if not isinstance(where, str):
        raise UsageError(f"no worktree recorded for {digest}; pass --repo")
    try:
        repo = open_repo(Path(where))
    except UsageError:
        raise UsageError(f"the repository of {digest} is no longer at {where}; pass --repo"
                         ) from None  # fmt: skip
    if repo.repo_id != store.repo_id:
        raise UsageError(f"{where} is no longer the repository of {digest}; pass --repo")
    return repo


def locate(repo_dir: Path | None, digest_text: str | Sha256Digest) -> Located:
    """The manifest named by a digest. With `repo_dir`, in that repository; without, in
    the one repository of the state root that holds it — the current directory's when it
    is that repository, else the worktree the preview recorded."""
    digest = Sha256Digest.parse(digest_text)
    if repo_dir is not None:
        repo = open_repo(repo_dir)
        store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
        return Located(repo, store, _load(store, digest), digest)
    store = _store_holding(state_root(), digest)
    m = _load(store, digest)
    here = _cwd_repo()
    repo = here if here and here.repo_id == store.repo_id else _recorded_repo(store, digest)
    # Found by the digest alone; now bound to the repository as every other open is.
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    return Located(repo, store, m, digest)


# -- state, derived from parsed evidence entries ---------------------------------------


def _entries(lines: list[bytes]) -> list[dict[str, Any]]:
    """Every log line parsed once; transfer state is read from these, never from raw text."""
    out = []
    for seq, line in enumerate(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            raise TamperDetected(f"evidence entry {seq} is not JSON") from None
        if isinstance(entry, dict):
            out.append(entry)
    return out


def _matching(
    entries: list[dict[str, Any]], kind: str, digest: Sha256Digest
) -> list[dict[str, Any]]:
    """Entries of exactly this kind whose `data.digest` is exactly this (normalised) digest."""
    want = str(digest)
    return [e for e in entries if e.get("kind") == kind and isinstance(e.get("data"), dict)
            and e["data"].get("digest") == want]  # fmt: skip


@dataclass(frozen=True)
class TransferState:
    status: str
    approvals: tuple[dict[str, Any], ...]
    releases: tuple[dict[str, Any], ...]
    live: tuple[dict[str, Any], ...]  # approvals neither used by a release nor expired


def state_of(m: Manifest, digest: Sha256Digest, entries: list[dict[str, Any]]) -> TransferState:
    """The manifest's state from its evidence entries (`entries`: the parsed log)."""
    approvals = _matching(entries, "transfer.approve", digest)
    releases = _matching(entries, "transfer.release", digest)
    used = {r["data"].get("approval_id") for r in releases}
    now = _now()
    live = [a for a in approvals if a["data"].get("approval_id") not in used
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
    return TransferState(status, tuple(approvals), tuple(releases), tuple(live))


def _state(at: Located) -> TransferState:
    return state_of(at.manifest, at.digest, _entries(at.store.lines()))


# -- approve ---------------------------------------------------------------------------


def _check_unapproved(at: Located) -> None:
    st = _state(at)
    if st.releases:
        raise Blocked("this manifest was already released; preview again")
    if st.live:
        raise Blocked("this manifest already has an unused approval")


def _check_approvable(at: Located, code: str) -> None:
    m = at.manifest
    if not secrets.compare_digest(code.encode(), m.nonce[:8].encode()):
        raise Blocked("the code does not match this manifest; copy the command from its packet")
    if m.blocked:
        raise Blocked("a blocked manifest cannot be approved: " + "; ".join(m.block_reasons))
    if _parse_ts(m.expires) <= _now():
        raise Blocked("the manifest has expired; preview again")
    _check_unapproved(at)


def _approver(m: Manifest, tp: TransferPolicy) -> dict[str, Any]:
    rule = _autopilot(tp, m.model_dump(mode="json"))
    if rule is not None:
        return {"kind": "policy", "name": f"policy:{rule}"}
    user = confirm_at_terminal(prompt_lines(m))  # refuses (Blocked) without a terminal or a yes
    return {"kind": "human", "name": user["name"], "uid": user["uid"]}


def approve(repo_dir: Path | None, digest: str | Sha256Digest, code: str) -> dict[str, Any]:
    """Record one approval of one manifest: at most one live approval per manifest, even
    when two approvals race (checked again under the transfers lock after the prompt)."""
    at = locate(repo_dir, digest)
    _check_approvable(at, code)
    tp = trusted_policy(at.repo).policy.transfer
    _check_unchanged(at, tp)
    approver = _approver(at.manifest, tp)
    with locked(_transfers_dir(at.store), "lock"):
        _check_unapproved(at)
        now = _now()
        data = {
            "digest": str(at.digest),
            "approval_id": secrets.token_hex(16),
            "approver": approver,
            "time": _ts(now),
            "expires": _ts(now + timedelta(seconds=tp.approval_ttl_s)),
        }
        entry = at.store.append(Draft(kind="transfer.approve", data=data,
                                      subject=_subject(at.digest)))  # fmt: skip
    return {**data, "evidence_seq": entry.seq, "status": "approved"}


# -- release ---------------------------------------------------------------------------


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


def _live_approval(at: Located) -> dict[str, Any]:
    st = _state(at)
    if at.manifest.blocked:
        raise Blocked("a blocked manifest is never released")
    if st.releases:
        raise Blocked(f"{at.digest} was already released; one manifest, one release")
    if not st.live:
        raise Blocked(f"no unused, unexpired approval for {at.digest} (none, or it expired)")
    approval: dict[str, Any] = st.live[0]["data"]
    return approval


def _check_unchanged(at: Located, tp: TransferPolicy) -> None:
    """HEAD, every selected file and the repository's visibility (recomputed from those
    bytes) are as they were at the preview. Run at approve and again at release."""
    repo, m = at.repo, at.manifest
    head = resolve_commit(repo.top, "HEAD")
    if head != m.head:
        raise Blocked(f"HEAD moved since the preview ({m.head[:12]} -> {head[:12]})")
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
    now = visibility(repo, selected)
    if now.state != m.visibility.state:
        raise Blocked(f"the repository went from {m.visibility.state} to {now.state} since the "
                      "preview: preview again")  # fmt: skip


def release(
    repo_dir: Path | None, digest: str | Sha256Digest, out: str | None
) -> tuple[dict[str, Any], bytes]:
    at = locate(repo_dir, digest)
    with locked(_transfers_dir(at.store), "lock"):
        approval = _live_approval(at)
        _check_unchanged(at, trusted_policy(at.repo).policy.transfer)
        payload = _payload(at.manifest, at.store)
        payload_sha256 = hashlib.sha256(payload).hexdigest()
        entry = at.store.append(Draft(kind="transfer.release", data={
            "digest": str(at.digest), "approval_id": approval["approval_id"],
            "payload_sha256": payload_sha256, "bytes": len(payload),
            "out": "stdout" if out in (None, "-") else "file"},
            subject=_subject(at.digest)))  # fmt: skip
    return {"digest": str(at.digest), "status": "released", "evidence_seq": entry.seq,
            "approval_id": approval["approval_id"], "payload_bytes": len(payload),
            "payload_sha256": payload_sha256}, payload  # fmt: skip


# -- show, list ------------------------------------------------------------------------


def show(repo_dir: Path | None, digest: str | Sha256Digest) -> dict[str, Any]:
    at = locate(repo_dir, digest)
    st = _state(at)
    return {"digest": str(at.digest), "status": st.status,
            "manifest": at.manifest.model_dump(mode="json"),
            "approval_packet": packet(at.manifest, at.digest),
            "approvals": [a["data"] for a in st.approvals],
            "releases": [r["data"] for r in st.releases]}  # fmt: skip


def _row(store: EvidenceStore, preview_entry: dict[str, Any],
         entries: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    data = preview_entry["data"]
    raw = data.get("digest")
    try:
        digest = Sha256Digest.parse(raw if isinstance(raw, str) else "")
        if str(digest) != raw:  # oms stores only the normalised form
            raise TamperDetected(f"preview entry names {digest} in another form")
        status = state_of(_load(store, digest), digest, entries).status
    except (TamperDetected, UsageError) as exc:
        status = f"unverifiable: {exc}"
    return {"digest": raw, "status": status, "time": preview_entry.get("time"),
            "destination": data.get("destination"), "bytes": data.get("bytes")}  # fmt: skip


def list_transfers(repo_dir: Path) -> dict[str, Any]:
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    entries = _entries(store.lines())  # parsed once, not once per manifest
    previews = [e for e in entries if e.get("kind") == "transfer.preview"
                and isinstance(e.get("data"), dict)]  # fmt: skip
    return {"transfers": [_row(store, e, entries) for e in previews]}
