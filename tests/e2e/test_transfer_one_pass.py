"""The transfer gate's one-pass pieces give what hashing afresh and building field by field
gave: the digests taken while reading, the manifest validated once as a whole, the payload
blob stored beside the signing, and the release payload built from the pack in place.

Real git repositories and real blob stores; the old
constructions are written out here as the reference each new one must equal byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.env import use_clean_git_here
from support.repos import git, make_repo

from evidence import StoreUnavailable, TamperDetected
from evidence.blobs import BlobStore
from gatekeeper.gates.transfer import clock
from gatekeeper.gates.transfer import preview as tx_preview
from gatekeeper.gates.transfer.autopilot import approving_rule, trusted_policy
from gatekeeper.gates.transfer.manifest import (
    Destination,
    Excluded,
    FindingRef,
    Item,
    Manifest,
    Redaction,
    Totals,
    Visibility,
)
from gatekeeper.gates.transfer.pack import PayloadPut
from gatekeeper.gates.transfer.release import payload_of
from gatekeeper.gates.transfer.select import Selected, Selection, choose
from gatekeeper.gates.transfer.visibility import visibility
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.repo.refs import current_branch, resolve_commit
from gatekeeper.repo.worktree import blob_id
from gatekeeper.scan import Finding
from policy import LoadedPolicy

FILES: dict[str, str | bytes] = {
    "src/app.py": "def parse(text):\n    return text.split()\n",
    "src/empty.py": "",
    "docs/caf\u00e9 guide.md": "# Guide\n\nRun the parser.\n",
    "data/latin1.txt": b"caf\xe9 au lait\n",  # not UTF-8: scanned as surrogate escapes
    "deep/a/b/c/d.txt": "deep\n" * 3000,
}


@pytest.fixture(autouse=True)
def _in_process_env(oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process gate calls see the same clean git environment as the subprocesses."""
    use_clean_git_here(oms_env, monkeypatch)


def _repo(tmp_path: Path, env: dict[str, str]) -> Path:
    repo = make_repo(tmp_path / "repo", FILES, env=env)
    os.chmod(repo / "src/app.py", 0o755)
    (repo / "src/app.py").write_text("def parse(text):\n    return text.split(',')\n")  # dirty
    (repo / "notes.txt").write_text("untracked\n")
    return repo


def _hash_object(repo: Path, rel: str, env: dict[str, str]) -> str:
    return git(repo, "hash-object", "--no-filters", "--", rel, env=env).strip()


def _selection(repo: Path, context: str = "repo", base: str | None = None) -> Selection:
    r = open_repo(repo)
    return choose(r, context, [], base, trusted_policy(r).policy.transfer)


# -- digests taken while reading ---------------------------------------------------------


def test_each_file_read_carries_the_digests_of_its_bytes(
    tmp_path: Path, oms_env: dict[str, str], oms_home: Path
) -> None:
    repo = _repo(tmp_path, oms_env)
    chosen = _selection(repo)
    assert sorted(s.path for s in chosen.selected) == sorted([*FILES, "README.md", "notes.txt"])
    for s in chosen.selected:
        assert s.source is s.data
        assert s.sha256 == hashlib.sha256(s.data).hexdigest()
        assert s.source_id == _hash_object(repo, s.path, oms_env)  # git's own blob id
        assert s.blob_id(len(s.source_id)) == s.source_id
        assert s.blob_id(64) == blob_id(s.data, 64)  # another object format: hashed afresh


def test_diff_items_carry_the_digest_of_the_diff_and_the_blob_id_of_the_file(
    tmp_path: Path, oms_env: dict[str, str], oms_home: Path
) -> None:
    repo = _repo(tmp_path, oms_env)
    base = git(repo, "rev-parse", "HEAD", env=oms_env).strip()
    (repo / "deep/a/b/c/d.txt").unlink()
    chosen = _selection(repo, "diff", base)
    by_path = {s.path: s for s in chosen.selected}
    assert sorted(by_path) == ["deep/a/b/c/d.txt", "src/app.py"]
    changed, deleted = by_path["src/app.py"], by_path["deep/a/b/c/d.txt"]
    assert changed.data.startswith(b"diff --git a/src/app.py b/src/app.py")
    assert changed.sha256 == hashlib.sha256(changed.data).hexdigest()
    assert changed.source_id == _hash_object(repo, "src/app.py", oms_env)
    assert deleted.source is None and deleted.source_id is None and deleted.blob_id(40) is None
    assert deleted.sha256 == hashlib.sha256(deleted.data).hexdigest()


def test_visibility_from_the_carried_ids_is_what_hashing_afresh_decides(
    tmp_path: Path, oms_env: dict[str, str], oms_home: Path
) -> None:
    repo = _repo(tmp_path, oms_env)
    r = open_repo(repo)
    assert visibility(r, _selection(repo).selected).state == "dirty"
    git(repo, "add", "-A", env=oms_env)
    git(repo, "commit", "-q", "-m", "all", env=oms_env)
    chosen = _selection(repo)
    afresh = [Selected(s.path, s.data, s.source, "0" * 64, None) for s in chosen.selected]
    assert visibility(r, chosen.selected, chosen.index).state == "unpushed"
    assert visibility(r, afresh).state == "unpushed"  # no carried id: each blob id computed


# -- the manifest, validated once ----------------------------------------------------------


def _old_manifest(b: tx_preview.Basis, out: tx_preview.Outgoing,
                  excluded: list[tuple[str, str]], visible: Visibility, pack: str | None,
                  loaded: LoadedPolicy) -> Manifest:  # fmt: skip
    """The construction the preview used before: each item hashed afresh and validated as a
    model, then the manifest of models, then the autopilot rule copied in."""
    now = clock.now()
    tp = loaded.policy.transfer
    items = []
    for s in out.sent():
        source = hashlib.sha256(s.selected.data).hexdigest()
        sha = source if s.data is s.selected.data else hashlib.sha256(s.data).hexdigest()
        items.append(Item(path=s.selected.path, bytes=len(s.data), sha256=sha, mode=s.mode,
                          source_sha256=source))  # fmt: skip
    m = Manifest(
        repo_id=b.repo.repo_id, head=b.head, branch=current_branch(b.repo), visibility=visible,
        destination=b.destination, purpose=out.purpose, context=b.context, paths=list(b.paths),
        base=b.base, items=items, payload_blob=pack,
        excluded=[Excluded(path=p, reason=r) for p, r in excluded],
        findings=[FindingRef(scanner=f.scanner, rule=f.rule, file=f.file, line=f.line,
                             fingerprint=f.fingerprint) for f in out.findings],
        redactions=list(out.redactions),
        totals=Totals(items=len(items), bytes=sum(i.bytes for i in items),
                      excluded=len(excluded), findings=len(out.findings),
                      redactions=len(out.redactions)),
        blocked=bool(out.block_reasons), block_reasons=list(out.block_reasons),
        autopilot_rule=None, policy_digest=loaded.digest, created=clock.stamp(now),
        expires=clock.stamp(now + timedelta(seconds=tp.manifest_ttl_s)),
        nonce=secrets.token_hex(16),
    )  # fmt: skip
    return m.model_copy(update={"autopilot_rule": approving_rule(tp, m)})


AUTOPILOT = """version = 1

[[transfer.autopilot]]
name = "any"
destinations = ["anthropic:claude"]
max_bytes = 100000000
context = ["repo", "diff", "paths", "none"]
require_clean_pushed = false
"""


def _outgoing(chosen: Selection, blocked: bool) -> tx_preview.Outgoing:
    """Every field of the manifest filled: full and redacted items, findings, redactions."""
    first = chosen.selected[0]
    redacted = first.data + b"[oms: line redacted]\n"
    finding = Finding("gitleaks", "generic-api-key", first.path, 2, "f" * 64, "***")
    redaction = Redaction(rule=finding.rule, path=first.path, line=2)
    reasons = ("1 secret finding(s); use --redact to send with those lines replaced",)
    sha = hashlib.sha256(redacted).hexdigest()
    return tx_preview.Outgoing(
        tuple(chosen.selected), "full", {first.path: (redacted, sha)}, "review \u202e the parser",
        (finding,), (redaction,), reasons if blocked else (),
    )  # fmt: skip


@pytest.fixture
def fixed_clock_and_nonce(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock, "now", lambda: datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC))
    monkeypatch.setattr(secrets, "token_hex", lambda n: "5e" * n)


@pytest.mark.parametrize("blocked", [False, True], ids=["previewed", "blocked"])
def test_the_manifest_is_byte_identical_to_the_item_by_item_construction(
    tmp_path: Path, oms_env: dict[str, str], oms_home: Path, fixed_clock_and_nonce: None,
    blocked: bool,
) -> None:  # fmt: skip
    repo = make_repo(tmp_path / "repo", {**FILES, "oms.toml": AUTOPILOT}, env=oms_env)
    (repo / "src/app.py").write_text("def parse(text):\n    return text.split(',')\n")
    r: Repo = open_repo(repo)
    loaded = trusted_policy(r)
    chosen = _selection(repo)
    chosen.excluded.append(("odd\nname", "secret-looking name"))
    out = _outgoing(chosen, blocked)
    dest = Destination(provider="anthropic", model="claude", kind="api")
    basis = tx_preview.Basis(r, resolve_commit(repo, "HEAD"), dest, "repo", (), None)
    visible = visibility(r, chosen.selected)
    pack_digest = hashlib.sha256(b"".join(s.data for s in out.sent())).hexdigest()
    old = _old_manifest(basis, out, chosen.excluded, visible, None if blocked else pack_digest,
                        loaded)  # fmt: skip
    if blocked:
        new = tx_preview._manifest(basis, out, chosen, None, loaded)
    else:
        with PayloadPut(BlobStore(tmp_path / "blobs"), [s.data for s in out.sent()]) as pack:
            new = tx_preview._manifest(basis, out, chosen, pack, loaded)
    assert new.canonical() == old.canonical()
    assert new.digest() == old.digest() and new == old
    assert (new.autopilot_rule, new.blocked) == ((None, True) if blocked else ("any", False))
    assert new.items[0].mode == "redacted" and new.findings and new.redactions and new.excluded


# -- the payload blob, stored beside the signing ---------------------------------------------


def test_the_payload_blob_is_stored_under_the_digest_the_manifest_names(tmp_path: Path) -> None:
    parts = [os.urandom(n) for n in (0, 1, 10_000, 3 << 20)]
    blobs = BlobStore(tmp_path / "blobs")
    with PayloadPut(blobs, parts) as pack:
        digest = pack.digest()
        assert pack.stored() == digest
    assert digest == hashlib.sha256(b"".join(parts)).hexdigest()
    assert blobs.get(digest) == b"".join(parts)
    assert stat.S_IMODE(blobs.path(digest).stat().st_mode) == 0o400


def test_leaving_the_payload_block_waits_for_the_put(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    with PayloadPut(blobs, [b"x" * (8 << 20)]) as pack:
        digest = pack.digest()
    assert blobs.check(digest) is None  # present and intact once the block is left


def test_a_payload_that_cannot_be_stored_refuses_as_the_store_does(tmp_path: Path) -> None:
    (tmp_path / "blobs").write_text("a file where the blob directory should be")
    with PayloadPut(BlobStore(tmp_path / "blobs"), [b"payload"]) as pack:
        assert pack.digest() == hashlib.sha256(b"payload").hexdigest()
        with pytest.raises(StoreUnavailable):
            pack.stored()


def test_a_preview_whose_payload_cannot_be_stored_keeps_and_records_nothing(
    tmp_path: Path, oms_env: dict[str, str], oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gatekeeper.gates import records

    repo = make_repo(tmp_path / "repo", FILES, env=oms_env)
    records.init(repo)

    def refuse(self: BlobStore, data: bytes) -> str:
        raise StoreUnavailable("cannot write the blob (test)")

    monkeypatch.setattr(BlobStore, "put", refuse)
    with pytest.raises(StoreUnavailable):
        tx_preview.preview(repo, "anthropic:claude", "p", "repo", [], None, False)
    assert list(oms_home.glob("repos/*/transfers/*.dsse.json")) == []  # no signed manifest
    (log,) = oms_home.glob("repos/*/evidence/log.jsonl")
    assert b"transfer.preview" not in log.read_bytes()


# -- the release payload, from the pack in place ------------------------------------------


def _old_payload(m: Manifest, pack: bytes) -> bytes:
    """The release payload as it was built before: a copy of each item, a model dump each."""
    parts = [m.canonical(), b"\n"]
    at = 0
    for item in m.items:
        data = pack[at : at + item.bytes]
        at += item.bytes
        assert hashlib.sha256(data).hexdigest() == item.sha256
        head = item.model_dump(exclude={"source_sha256"})
        parts += [json.dumps(head, sort_keys=True).encode(), b"\n", data, b"\n"]
    return b"".join(parts)


def _packed_manifest(parts: list[bytes]) -> tuple[Manifest, bytes]:
    from support.manifests import manifest

    items = [{"path": f"d/\u00e9{i}\n.txt", "bytes": len(p), "mode": "full",
              "sha256": hashlib.sha256(p).hexdigest(), "source_sha256": "0" * 64}
             for i, p in enumerate(parts)]  # fmt: skip
    return manifest(items=items, context="repo"), b"".join(parts)


def test_the_release_payload_is_byte_identical_to_the_item_by_item_construction() -> None:
    m, pack = _packed_manifest([b"", b"a\n", os.urandom(5000), b"\xff\xfe\x00 binary-ish"])
    assert payload_of(m, pack, m.canonical()) == _old_payload(m, pack)


def test_a_pack_that_does_not_match_its_items_is_refused_at_release() -> None:
    m, pack = _packed_manifest([b"one\n", b"two\n"])
    with pytest.raises(TamperDetected):
        payload_of(m, pack[:-1] + b"X", m.canonical())
    with pytest.raises(TamperDetected):
        payload_of(m, pack[:-1], m.canonical())
