"""The evidence store: append-only, hash-chained, checkpointed, verifiable offline.

Driven both through the library (`evidence.EvidenceStore`, `audit`, `prove`,
`export_dsse`) and through the real `oms` CLI where the exit code or the JSON
contract is what matters. Every test has its own `$OMS_HOME` (see conftest.py).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import importlib
import json
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from evidence import (
    Draft,
    EvidenceStore,
    StoreUnavailable,
    TamperDetected,
    TornTail,
    export_dsse,
    load_key,
    prove,
    repo_id_for,
)
from evidence import checkpoint as cp
from evidence.audit import audit

OmsJson = Callable[..., tuple[int, dict[str, Any]]]

EXIT_OK, EXIT_USAGE, EXIT_BLOCKED, EXIT_UNAVAILABLE = 0, 2, 3, 4


@dataclass
class Repo:
    path: Path
    repo_id: str
    store: EvidenceStore
    init: dict[str, Any]


@pytest.fixture
def repo(git_repo: Path, oms_home: Path) -> Repo:
    """A git repository with its evidence store initialised (through the library, which is
    what `oms init` calls; `test_cli_init_*` pins that the CLI picks the same store)."""
    repo_id = repo_id_for(git_repo / ".git")
    store, created = EvidenceStore.init(oms_home, repo_id, git_repo / ".git")
    assert created
    return Repo(git_repo, repo_id, store, {"repo_id": repo_id, "key_id": store.key.key_id})


@pytest.fixture
def lib_store(oms_home: Path) -> EvidenceStore:
    """A store made through the library only (no git needed)."""
    store, created = EvidenceStore.init(oms_home, "rlibrarytest")
    assert created
    return store


def add_notes(store: EvidenceStore, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        store.append(Draft(kind="note", data={"message": f"note {i}"}))


def log_bytes(store: EvidenceStore) -> bytes:
    return store.log_path.read_bytes()


def write_lines(store: EvidenceStore, lines: list[bytes]) -> None:
    store.log_path.write_bytes(b"".join(line + b"\n" for line in lines))


def tree_snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for directories)."""
    snap: dict[str, bytes | None] = {}
    for p in sorted(root.rglob("*")):
        snap[str(p.relative_to(root))] = None if p.is_dir() else p.read_bytes()
    return snap


def cli_audit(oms_json: OmsJson, repo: Repo) -> tuple[int, dict[str, Any]]:
    return oms_json(["evidence", "audit", "--repo", repo.path])


def assert_tampered(oms_json: OmsJson, repo: Repo, seq: int | None) -> dict[str, Any]:
    code, out = cli_audit(oms_json, repo)
    assert code == EXIT_BLOCKED, out
    assert out["intact"] is False
    assert out["first_bad_seq"] == seq, out
    assert out["reason"]
    return out


def assert_intact(oms_json: OmsJson, repo: Repo, entries: int) -> dict[str, Any]:
    code, out = cli_audit(oms_json, repo)
    assert code == EXIT_OK, out
    assert out["intact"] is True
    assert out["entries"] == entries
    assert out["checkpoint_size"] == entries
    assert out["witness_size"] == entries
    return out


# -- init, permissions ----------------------------------------------------------


def test_cli_init_creates_the_store_and_is_idempotent(
    git_repo: Path, oms_json: OmsJson, oms_home: Path
) -> None:
    code, first = oms_json(["init", "--repo", git_repo])
    assert code == EXIT_OK, first
    assert first["created"] is True
    assert first["entries"] == 2  # the genesis entry, and the trusted mark at main's tip
    assert first["repo_id"] == repo_id_for(git_repo / ".git")
    assert first["state_root"] == str(oms_home)
    store = EvidenceStore.open(oms_home, first["repo_id"])
    assert first["key_id"] == store.key.key_id
    key_file = oms_home / "keys" / "ed25519.pem"
    key_before = key_file.read_bytes()
    code, _ = oms_json(["evidence", "note", "-m", "first", "--repo", git_repo])
    assert code == EXIT_OK
    log_before = log_bytes(store)
    checkpoint_before = store.checkpoint_path.read_bytes()

    code, again = oms_json(["init", "--repo", git_repo])
    assert code == EXIT_OK
    assert again["created"] is False
    assert again["repo_id"] == first["repo_id"]
    assert again["key_id"] == first["key_id"]
    assert again["entries"] == 3  # no second mark: the log has one
    assert key_file.read_bytes() == key_before
    assert log_bytes(store) == log_before
    assert store.checkpoint_path.read_bytes() == checkpoint_before


def test_library_init_is_idempotent(lib_store: EvidenceStore, oms_home: Path) -> None:
    add_notes(lib_store, 2)
    before = log_bytes(lib_store)
    again, created = EvidenceStore.init(oms_home, lib_store.repo_id)
    assert created is False
    assert again.key.key_id == lib_store.key.key_id
    assert log_bytes(again) == before
    assert audit(again).intact


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_state_root_evidence_dirs_and_key_are_private_and_blobs_read_only(
    repo: Repo, oms_json: OmsJson, oms_home: Path, tmp_path: Path
) -> None:
    attachment = tmp_path / "report.txt"
    attachment.write_bytes(b"attached bytes\n")
    code, out = oms_json(
        ["evidence", "note", "-m", "with blob", "--attach", attachment, "--repo", repo.path]
    )
    assert code == EXIT_OK, out
    (digest,) = out["blobs"]
    assert digest == hashlib.sha256(b"attached bytes\n").hexdigest()

    assert _mode(oms_home) == 0o700
    assert _mode(oms_home / "keys") == 0o700
    assert _mode(oms_home / "keys" / "ed25519.pem") == 0o600
    assert _mode(repo.store.dir) == 0o700
    assert _mode(repo.store.witness_path.parent) == 0o700
    for f in (repo.store.log_path, repo.store.checkpoint_path, repo.store.witness_path):
        assert _mode(f) == 0o600, f
    blob = repo.store.blobs.path(digest)
    assert blob.read_bytes() == b"attached bytes\n"
    assert _mode(blob) & 0o222 == 0, "blobs must be read-only"
    assert _mode(blob) & 0o077 == 0
    assert _mode(blob.parent) == 0o700


def test_an_existing_state_root_that_is_too_open_is_tightened(
    git_repo: Path, oms_json: OmsJson, oms_home: Path
) -> None:
    oms_home.mkdir(mode=0o755)
    os.chmod(oms_home, 0o755)
    code, _ = oms_json(["init", "--repo", git_repo])
    assert code == EXIT_OK
    assert _mode(oms_home) == 0o700


def test_every_directory_under_the_state_root_is_private(
    repo: Repo, oms_json: OmsJson, oms_home: Path, tmp_path: Path
) -> None:
    attachment = tmp_path / "a.txt"
    attachment.write_bytes(b"x")
    code, _ = oms_json(["evidence", "note", "-m", "b", "--attach", attachment, "--repo", repo.path])
    assert code == EXIT_OK
    dirs = [oms_home, *(p for p in oms_home.rglob("*") if p.is_dir())]
    loose = {str(d.relative_to(oms_home)): oct(_mode(d)) for d in dirs if _mode(d) != 0o700}
    assert loose == {}


# -- every byte of the log is covered --------------------------------------------


def _flip_every_byte(
    store: EvidenceStore,
) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes, str]], int]:
    """Change each byte of the log in turn (XOR 0x01, and to a newline), audit, restore.

    Returns (changes audit called intact, changes audit raised on, changes tried).
    """
    original = log_bytes(store)
    missed: list[tuple[int, bytes]] = []
    crashed: list[tuple[int, bytes, str]] = []
    tried = 0
    with open(store.log_path, "r+b") as f:

        def mutate_and_audit(offset: int, new: bytes) -> None:
            nonlocal tried
            f.seek(offset)
            f.write(new)
            f.flush()
            try:
                if audit(store).intact:
                    missed.append((offset, new))
            except Exception as exc:  # not "intact", but not a report either
                crashed.append((offset, new, f"{type(exc).__name__}: {exc}"))
            f.seek(offset)
            f.write(original[offset : offset + 1])
            f.flush()
            tried += 1

        for offset, byte in enumerate(original):
            mutate_and_audit(offset, bytes([byte ^ 0x01]))
            if byte != 0x0A:
                mutate_and_audit(offset, b"\n")
    assert log_bytes(store) == original
    assert audit(store).intact
    assert tried > 2 * len(original) - 10
    return missed, crashed, tried


def test_every_single_byte_change_to_the_log_is_detected(lib_store: EvidenceStore) -> None:
    add_notes(lib_store, 3)
    assert audit(lib_store).intact
    missed, crashed, _ = _flip_every_byte(lib_store)
    assert missed == []
    assert crashed == []  # reported as not intact, never raised (the CLI would say "internal")


def test_a_line_that_is_not_json_is_reported_as_tampering_at_its_seq(
    repo: Repo, oms_json: OmsJson
) -> None:
    add_notes(repo.store, 3)
    lines = repo.store.lines()
    lines[1] = b"{#" + lines[1][2:]
    write_lines(repo.store, lines)
    assert_tampered(oms_json, repo, 1)


def test_a_fresh_store_with_no_entries_audits_intact(git_repo: Path, oms_json: OmsJson) -> None:
    assert oms_json(["init", "--repo", git_repo])[0] == EXIT_OK
    code, out = oms_json(["evidence", "audit", "--repo", git_repo])
    assert code == EXIT_OK, out
    assert out["intact"] is True
    assert out["entries"] == 2  # the genesis entry and the trusted mark, signed
    assert out["checkpoint_size"] == 2 and out["witness_size"] == 2


def _first_line_of_second_chunk(data: bytes) -> int:
    """Where evidence.audit splits a log in two for its workers: after the largest power
    of two of lines below the total, RFC 6962's split (computed here independently)."""
    n = data.count(b"\n")
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def _reline(lines: list[bytes], index: int, **changes: Any) -> bytes:
    obj = json.loads(lines[index])
    obj.update(changes)
    return rfc8785.dumps(obj)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the parallel audit needs two CPUs")
def test_the_parallel_audit_checks_the_joins_between_chunks(
    lib_store: EvidenceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Force the multi-worker path on a small log (its threshold is an internal constant).
    for name in ("evidence.chaincheck", "evidence.audit"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "PARALLEL_BYTES"):
            monkeypatch.setattr(module, "PARALLEL_BYTES", 0)
            break
    else:
        pytest.skip("no PARALLEL_BYTES switch found in evidence.chaincheck or evidence.audit")
    add_notes(lib_store, 40)
    original = lib_store.lines()
    b = _first_line_of_second_chunk(log_bytes(lib_store))
    assert b == 32
    report = audit(lib_store)
    assert report.intact and report.entries == 41

    cases: dict[str, tuple[list[bytes], int | None]] = {
        "deleted first line of chunk 2": ([*original[:b], *original[b + 1 :]], b),
        "swapped across the join": (
            [*original[: b - 1], original[b], original[b - 1], *original[b + 1 :]],
            b - 1,
        ),
        # Canonical, correct seq and prev, but its hash no longer matches the next prev:
        # the entry reported is the one that changed.
        "rewritten last line of chunk 1": (
            [*original[: b - 1], _reline(original, b - 1, data={"x": 1}), *original[b:]],
            b - 1,
        ),
        "wrong seq on the first line of chunk 2": (
            [*original[:b], _reline(original, b, seq=b + 100), *original[b + 1 :]],
            b,
        ),
        "non-canonical first line of chunk 2": (
            [*original[:b], _with_spaces(original[b]), *original[b + 1 :]],
            b,
        ),
    }
    for name, (lines, first_bad) in cases.items():
        write_lines(lib_store, lines)
        report = audit(lib_store)
        assert not report.intact, name
        assert report.first_bad_seq == first_bad, (name, report)
    write_lines(lib_store, original)
    assert audit(lib_store).intact


# -- reshaped logs ----------------------------------------------------------------


def _reorder_keys(line: bytes) -> bytes:
    obj = json.loads(line)
    return json.dumps(dict(reversed(list(obj.items()))), separators=(",", ":")).encode()


def _with_spaces(line: bytes) -> bytes:
    return json.dumps(json.loads(line), sort_keys=True).encode()


def _escaped_letter(line: bytes) -> bytes:
    assert b'"note"' in line
    return line.replace(b'"note"', b'"no\\u0074e"', 1)  # same JSON value, other bytes


@pytest.mark.parametrize("reshape", [_with_spaces, _reorder_keys, _escaped_letter])
def test_a_valid_but_non_canonical_json_line_is_tampering_at_its_seq(
    repo: Repo, oms_json: OmsJson, reshape: Callable[[bytes], bytes]
) -> None:
    add_notes(repo.store, 3)
    lines = repo.store.lines()
    changed = reshape(lines[1])
    assert changed != lines[1]
    assert json.loads(changed) == json.loads(lines[1])  # the meaning is unchanged
    lines[1] = changed
    write_lines(repo.store, lines)
    out = assert_tampered(oms_json, repo, 1)
    assert "canonical" in out["reason"]


def _delete(lines: list[bytes]) -> list[bytes]:
    return [lines[0], *lines[2:]]


def _duplicate(lines: list[bytes]) -> list[bytes]:
    return [lines[0], lines[1], lines[1], *lines[2:]]


def _swap(lines: list[bytes]) -> list[bytes]:
    return [lines[0], lines[2], lines[1], lines[3]]


def _truncate(lines: list[bytes]) -> list[bytes]:
    return lines[:-1]


def _empty(lines: list[bytes]) -> list[bytes]:
    return []


@pytest.mark.parametrize(
    ("reshape", "first_bad"),
    [(_delete, 1), (_duplicate, 2), (_swap, 1), (_truncate, 4), (_empty, 0)],
    ids=["deleted", "duplicated", "swapped", "truncated", "emptied"],
)
def test_deleted_duplicated_swapped_and_truncated_lines_are_detected(
    repo: Repo, oms_json: OmsJson, reshape: Callable[[list[bytes]], list[bytes]], first_bad: int
) -> None:
    add_notes(repo.store, 4)
    write_lines(repo.store, reshape(repo.store.lines()))
    out = assert_tampered(oms_json, repo, first_bad)
    if reshape is _truncate:
        assert "removed or the log was rolled back" in out["reason"]


def test_a_truncated_log_refuses_further_appends(repo: Repo, oms_json: OmsJson) -> None:
    add_notes(repo.store, 3)
    write_lines(repo.store, repo.store.lines()[:-1])
    (repo.store.dir / "tree.json").unlink()
    before = log_bytes(repo.store)
    code, out = oms_json(["evidence", "note", "-m", "after truncation", "--repo", repo.path])
    assert code == EXIT_BLOCKED, out
    assert out["error"]["kind"] == "tampered"
    assert log_bytes(repo.store) == before


# -- rollback of the whole evidence directory --------------------------------------


def _roll_back(repo: Repo, tmp_path: Path) -> bytes:
    """Two notes, a copy, two more notes, restore the copy. Returns the restored log."""
    add_notes(repo.store, 2)
    saved = tmp_path / "evidence-copy"
    shutil.copytree(repo.store.dir, saved)
    add_notes(repo.store, 2, start=2)
    shutil.rmtree(repo.store.dir)
    shutil.copytree(saved, repo.store.dir)
    restored = log_bytes(repo.store)
    assert len(repo.store.lines()) == 3  # genesis and two notes
    # The restored directory is self-consistent: log and checkpoint agree.
    checkpoint = cp.parse_signed_checkpoint(repo.store.checkpoint_path.read_bytes())[0]
    assert checkpoint.size == 3
    return restored


def test_a_rolled_back_evidence_directory_is_caught_by_the_witness(
    repo: Repo, oms_json: OmsJson, tmp_path: Path, oms_home: Path
) -> None:
    restored = _roll_back(repo, tmp_path)
    assert repo.store.witness_path == oms_home / "witness" / repo.repo_id
    out = assert_tampered(oms_json, repo, 3)
    assert "witness" in out["reason"]
    assert out["checkpoint_size"] == 3

    code, refused = oms_json(
        ["evidence", "note", "-m", "on top of a rollback", "--repo", repo.path]
    )
    assert code == EXIT_BLOCKED, refused
    assert refused["error"]["kind"] == "tampered"
    assert log_bytes(repo.store) == restored


def test_a_rollback_with_the_witness_deleted_is_not_laundered_by_an_append(
    repo: Repo, oms_json: OmsJson, tmp_path: Path
) -> None:
    restored = _roll_back(repo, tmp_path)
    repo.store.witness_path.unlink()
    assert cli_audit(oms_json, repo)[0] == EXIT_BLOCKED  # "the witness checkpoint is missing"
    code, _ = oms_json(["evidence", "note", "-m", "after rollback", "--repo", repo.path])
    assert code == EXIT_BLOCKED
    assert log_bytes(repo.store) == restored
    assert not repo.store.witness_path.exists()  # no new witness signed over the rollback
    assert cli_audit(oms_json, repo)[0] == EXIT_BLOCKED


def test_init_does_not_re_sign_a_log_whose_checkpoints_were_deleted(
    repo: Repo, oms_json: OmsJson
) -> None:
    add_notes(repo.store, 3)
    repo.store.checkpoint_path.unlink()
    repo.store.witness_path.unlink()
    code, out = oms_json(["init", "--repo", repo.path])
    assert code == EXIT_BLOCKED, out
    assert not repo.store.checkpoint_path.exists()
    assert not repo.store.witness_path.exists()
    assert cli_audit(oms_json, repo)[0] == EXIT_BLOCKED


def _forge_entry_1(store: EvidenceStore, message: str) -> None:
    """Rewrite entry 1 and re-link entry 2 (the last) so that the hash chain looks fine."""
    lines = store.lines()
    forged = json.loads(lines[1])
    forged["data"] = {"message": message}
    lines[1] = rfc8785.dumps(forged)
    relinked = json.loads(lines[2])
    relinked["prev"] = hashlib.sha256(lines[1]).hexdigest()
    lines[2] = rfc8785.dumps(relinked)
    write_lines(store, lines)


@pytest.mark.parametrize(
    "forgery",
    ["longer-entry", "same-length-entry-cache-kept", "same-length-entry-cache-deleted"],
)
def test_a_rewritten_entry_is_not_laundered_by_a_later_append(
    repo: Repo, oms_json: OmsJson, forgery: str
) -> None:
    add_notes(repo.store, 2)
    before = log_bytes(repo.store)
    # "note 0" -> "note X" keeps every byte offset, so the size-keyed tree.json cache
    # still matches; a longer message does not.
    _forge_entry_1(repo.store, "note X" if forgery.startswith("same") else "never happened")
    assert (len(log_bytes(repo.store)) == len(before)) is forgery.startswith("same")
    if forgery.endswith("cache-deleted"):
        (repo.store.dir / "tree.json").unlink()
    assert_tampered(oms_json, repo, None)  # the hash chain is consistent: the root catches it

    # The append proves the witnessed bytes (the extent the witness signs), so even a
    # same-length rewrite with the frontier cache intact is refused, nothing appended.
    tampered = log_bytes(repo.store)
    code, _ = oms_json(["evidence", "note", "-m", "an honest note", "--repo", repo.path])
    assert code == EXIT_BLOCKED
    assert log_bytes(repo.store) == tampered
    assert cli_audit(oms_json, repo)[0] == EXIT_BLOCKED


# -- blobs and checkpoints ----------------------------------------------------------


@pytest.mark.parametrize("damage", ["modified", "deleted", "emptied"])
def test_a_modified_or_deleted_blob_is_detected(
    repo: Repo, oms_json: OmsJson, tmp_path: Path, damage: str
) -> None:
    add_notes(repo.store, 1)
    attachment = tmp_path / "log.txt"
    attachment.write_bytes(b"build output " * 100)
    code, out = oms_json(
        ["evidence", "note", "-m", "b", "--attach", attachment, "--repo", repo.path]
    )
    assert code == EXIT_OK
    add_notes(repo.store, 1, start=5)
    assert assert_intact(oms_json, repo, 4)["blobs_checked"] == 1

    blob = repo.store.blobs.path(out["blobs"][0])
    if damage == "deleted":
        blob.unlink()
    else:
        os.chmod(blob, 0o600)
        blob.write_bytes(b"build 0utput " * 100 if damage == "modified" else b"")
        os.chmod(blob, 0o400)
    result = assert_tampered(oms_json, repo, out["seq"])
    assert out["blobs"][0] in result["reason"]


@pytest.mark.parametrize("which", ["checkpoint", "witness"])
def test_a_checkpoint_re_signed_by_another_key_is_detected(
    repo: Repo, oms_json: OmsJson, oms_home: Path, which: str
) -> None:
    add_notes(repo.store, 3)
    path = repo.store.checkpoint_path if which == "checkpoint" else repo.store.witness_path
    body, _ = cp.parse_signed_checkpoint(path.read_bytes())

    # Control: the same body signed again by the real key verifies.
    path.write_bytes(cp.sign_checkpoint(body, repo.store.origin, load_key(oms_home).private))
    assert_intact(oms_json, repo, 4)

    path.write_bytes(cp.sign_checkpoint(body, repo.store.origin, Ed25519PrivateKey.generate()))
    out = assert_tampered(oms_json, repo, None)
    assert "signature" in out["reason"]


def test_a_deleted_checkpoint_is_detected(repo: Repo, oms_json: OmsJson) -> None:
    add_notes(repo.store, 2)
    repo.store.checkpoint_path.unlink()
    out = assert_tampered(oms_json, repo, None)
    assert "checkpoint is missing" in out["reason"]


# -- the signing key ---------------------------------------------------------------


def _remove_key(key: Path) -> None:
    key.unlink()


def _open_key(key: Path) -> None:
    os.chmod(key, 0o644)


def _corrupt_key(key: Path) -> None:
    key.write_bytes(b"-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n")


def _ec_key(key: Path) -> None:
    pem = generate_private_key(SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    key.write_bytes(pem)


def _symlinked_key(key: Path) -> None:
    real = key.with_name("real.pem")
    key.rename(real)
    key.symlink_to(real)


@pytest.mark.parametrize(
    "break_key",
    [_remove_key, _open_key, _corrupt_key, _ec_key, _symlinked_key],
    ids=["missing", "mode-0644", "corrupt-pem", "not-ed25519", "symlink"],
)
def test_a_missing_or_unusable_key_appends_nothing(
    repo: Repo,
    oms_json: OmsJson,
    oms_home: Path,
    tmp_path: Path,
    break_key: Callable[[Path], None],
) -> None:
    add_notes(repo.store, 2)
    before = log_bytes(repo.store)
    blobs_before = tree_snapshot(repo.store.blobs.root) if repo.store.blobs.root.exists() else {}
    break_key(oms_home / "keys" / "ed25519.pem")
    attachment = tmp_path / "a.txt"
    attachment.write_bytes(b"would be a blob")

    code, out = oms_json(
        ["evidence", "note", "-m", "n", "--attach", attachment, "--repo", repo.path]
    )
    assert code == EXIT_UNAVAILABLE, out
    assert out["error"]["kind"] == "unavailable"
    assert "key" in out["error"]["message"]
    assert log_bytes(repo.store) == before
    now = tree_snapshot(repo.store.blobs.root) if repo.store.blobs.root.exists() else {}
    assert now == blobs_before

    # Without the key nothing can be verified either: audit fails closed, not "intact".
    code, out = cli_audit(oms_json, repo)
    assert code == EXIT_UNAVAILABLE, out


# -- full disk, read-only state ---------------------------------------------------


@pytest.mark.parametrize("headroom", [0, 10], ids=["no-byte-fits", "ten-bytes-fit"])
def test_a_full_disk_appends_nothing_and_leaves_the_log_intact(
    repo: Repo,
    run_oms: Callable[..., subprocess.CompletedProcess[str]],
    parse_json: Any,
    oms_json: OmsJson,
    headroom: int,
) -> None:
    # RLIMIT_FSIZE makes write() fail with EFBIG (Python ignores SIGXFSZ) exactly as a
    # full disk would; with headroom a partial line is written first and must be cut back.
    add_notes(repo.store, 3)
    before = log_bytes(repo.store)
    limit = len(before) + headroom

    def full_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = run_oms(
        ["evidence", "note", "-m", "does not fit", "--repo", repo.path, "--json"],
        preexec_fn=full_disk,
    )
    assert proc.returncode == EXIT_UNAVAILABLE, (proc.stdout, proc.stderr)
    out = parse_json(proc)
    assert out["error"]["kind"] == "unavailable"
    assert log_bytes(repo.store) == before
    assert_intact(oms_json, repo, 4)
    code, _ = oms_json(["evidence", "note", "-m", "fits now", "--repo", repo.path])
    assert code == EXIT_OK
    assert_intact(oms_json, repo, 5)


BWRAP = Path("/usr/bin/bwrap")


def _bwrap_works() -> bool:
    if not BWRAP.exists():
        return False
    probe = subprocess.run(
        [str(BWRAP), "--dev-bind", "/", "/", "--", "true"], capture_output=True, check=False
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _bwrap_works(), reason="needs a working /usr/bin/bwrap")
def test_a_read_only_state_root_appends_nothing(
    repo: Repo, oms_env: dict[str, str], oms_home: Path, parse_json: Any, oms_json: OmsJson
) -> None:
    add_notes(repo.store, 2)
    before = tree_snapshot(oms_home)
    proc = subprocess.run(
        [
            str(BWRAP),
            "--dev-bind", "/", "/",
            "--ro-bind", str(oms_home), str(oms_home),
            "--",
            sys.executable, "-m", "gatekeeper",
            "evidence", "note", "-m", "read-only", "--repo", str(repo.path), "--json",
        ],
        env=oms_env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert proc.returncode == EXIT_UNAVAILABLE, (proc.stdout, proc.stderr)
    out = parse_json(proc)
    assert out["error"]["kind"] == "unavailable"
    assert tree_snapshot(oms_home) == before
    assert_intact(oms_json, repo, 3)


# -- crashes and concurrency --------------------------------------------------------

WORKER = r"""
import sys
from pathlib import Path
from evidence import Draft, EvidenceError, EvidenceStore

root, repo_id = sys.argv[1], sys.argv[2]
proc, count, pad = (int(x) for x in sys.argv[3:6])
store = EvidenceStore.open(Path(root), repo_id)
for i in range(count):
    try:
        entry = store.append(Draft(kind="note", data={"p": proc, "i": i, "pad": "x" * pad}))
    except EvidenceError as exc:
        print("refused", type(exc).__name__, flush=True)
        sys.exit(5)
    print(entry.seq, proc, i, flush=True)
"""


def _start_workers(
    store: EvidenceStore, env: dict[str, str], n: int, count: int, pad: int
) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                str(store.root),
                store.repo_id,
                *map(str, (p, count, pad)),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(n)
    ]


def _acks(stdout: str) -> list[tuple[int, int, int]]:
    """(seq, proc, i) for every complete acknowledgement line."""
    acks = []
    complete = stdout[: stdout.rfind("\n") + 1]
    for line in complete.splitlines():
        if line.startswith("refused"):
            continue
        seq, p, i = (int(x) for x in line.split())
        acks.append((seq, p, i))
    return acks


def test_sigkill_mid_append_loses_no_acknowledged_entry(
    lib_store: EvidenceStore, oms_env: dict[str, str]
) -> None:
    rng = random.Random(1234)
    procs = _start_workers(lib_store, oms_env, 4, 100_000, 20_000)
    deadline = time.monotonic() + 30
    while log_bytes(lib_store).count(b"\n") < 20 and time.monotonic() < deadline:
        time.sleep(0.02)  # let them get going (interpreter start-up) before the kills
    for proc in rng.sample(procs, len(procs)):
        time.sleep(rng.uniform(0.05, 0.4))
        proc.send_signal(signal.SIGKILL)
    acks: list[tuple[int, int, int]] = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=30)
        assert proc.returncode in (-signal.SIGKILL, 5), proc.returncode
        acks += _acks(stdout)
    assert acks, "no append was acknowledged before the kills; the test proved nothing"

    store = EvidenceStore.open(lib_store.root, lib_store.repo_id)
    store.repair()
    report = audit(store)
    assert report.intact, report
    lines = store.lines()
    assert len({seq for seq, _, _ in acks}) == len(acks)
    for seq, p, i in acks:
        data = json.loads(lines[seq])["data"]
        assert (data.get("p"), data.get("i")) == (p, i), seq
    # The store still takes appends afterwards.
    assert store.append(Draft(kind="note", data={"after": "crash"})).seq == len(lines)
    assert audit(store).intact


@pytest.fixture
def fast_store(tmp_path: Path) -> Iterator[EvidenceStore]:
    """A library store on tmpfs when there is one: the concurrency test is about the lock,
    and 400 appends of three fsyncs each take seconds on a busy disk. Falls back to tmp_path."""
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(prefix="oms-test-", dir=shm)) if shm.is_dir() else tmp_path
    try:
        store, _ = EvidenceStore.init(base / "oms-state", "rconcurrency")
        yield store
    finally:
        if base != tmp_path:
            shutil.rmtree(base, ignore_errors=True)


def test_eight_concurrent_appenders_build_one_linear_chain(
    fast_store: EvidenceStore, oms_env: dict[str, str]
) -> None:
    lib_store = fast_store
    procs = _start_workers(lib_store, oms_env, 8, 50, 0)
    acks: list[tuple[int, int, int]] = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        acks += _acks(stdout)
    report = audit(lib_store)
    assert report.intact, report
    assert report.entries == 401  # and the genesis entry
    assert sorted(seq for seq, _, _ in acks) == list(range(1, 401))
    assert sorted((p, i) for _, p, i in acks) == [(p, i) for p in range(8) for i in range(50)]
    lines = lib_store.lines()
    prev = "0" * 64
    for seq, line in enumerate(lines):
        obj = json.loads(line)
        assert obj["seq"] == seq
        assert obj["prev"] == prev
        prev = hashlib.sha256(line).hexdigest()
    for seq, p, i in acks:
        assert json.loads(lines[seq])["data"] == {"p": p, "i": i, "pad": ""}


# -- torn tail and repair ------------------------------------------------------------


def test_a_torn_last_line_blocks_appends_until_repair_quarantines_exactly_it(
    repo: Repo, oms_json: OmsJson
) -> None:
    add_notes(repo.store, 2)
    complete = log_bytes(repo.store)
    torn = complete.split(b"\n")[1][: len(complete) // 4]  # half a line, no newline
    with open(repo.store.log_path, "ab") as f:
        f.write(torn)

    code, report = cli_audit(oms_json, repo)
    assert code == EXIT_BLOCKED
    assert report["intact"] is False
    assert report["first_bad_seq"] == 3
    assert report["torn_tail_bytes"] == len(torn)
    assert "torn" in report["reason"]

    code, refused = oms_json(["evidence", "note", "-m", "refused", "--repo", repo.path])
    assert code == EXIT_UNAVAILABLE, refused
    assert "torn" in refused["error"]["message"]
    assert log_bytes(repo.store) == complete + torn

    code, repaired = oms_json(["evidence", "repair", "--repo", repo.path])
    assert code == EXIT_OK, repaired
    assert repaired["repaired"] is True
    assert repaired["quarantined_bytes"] == len(torn)
    assert repaired["seq"] == 3
    (quarantine,) = repo.store.dir.glob("quarantine-*")
    assert quarantine.read_bytes() == torn
    assert log_bytes(repo.store).startswith(complete)  # no complete entry was touched

    code, entry = oms_json(["evidence", "show", "3", "--repo", repo.path])
    assert code == EXIT_OK
    assert entry["kind"] == "repair"
    assert entry["data"] == {
        "quarantined_bytes": len(torn),
        "quarantined_entries": 0,
        "quarantine_file": quarantine.name,
    }
    assert entry["blobs"] == [hashlib.sha256(torn).hexdigest()]
    assert repo.store.blobs.get(entry["blobs"][0]) == torn

    assert assert_intact(oms_json, repo, 4)["blobs_checked"] == 1
    code, _ = oms_json(["evidence", "note", "-m", "accepted again", "--repo", repo.path])
    assert code == EXIT_OK


def test_repair_on_a_clean_log_does_nothing(repo: Repo, oms_json: OmsJson) -> None:
    add_notes(repo.store, 3)
    before = tree_snapshot(repo.store.dir)
    code, out = oms_json(["evidence", "repair", "--repo", repo.path])
    assert code == EXIT_OK
    assert out["repaired"] is False
    assert out["quarantined_bytes"] == 0
    assert tree_snapshot(repo.store.dir) == before
    assert_intact(oms_json, repo, 4)


def test_library_append_refuses_a_torn_tail(lib_store: EvidenceStore) -> None:
    add_notes(lib_store, 1)
    with open(lib_store.log_path, "ab") as f:
        f.write(b'{"v":1,"se')
    before = log_bytes(lib_store)
    with pytest.raises(TornTail):
        lib_store.append(Draft(kind="note"))
    assert log_bytes(lib_store) == before
    assert lib_store.repair()["quarantined_bytes"] == len(b'{"v":1,"se')
    assert audit(lib_store).intact


# -- library appends ---------------------------------------------------------------


def test_append_many_appends_a_linked_batch_under_one_checkpoint(lib_store: EvidenceStore) -> None:
    add_notes(lib_store, 2)
    entries = lib_store.append_many([Draft(kind="note", data={"n": n}) for n in range(3)])
    assert [e.seq for e in entries] == [3, 4, 5]
    lines = lib_store.lines()
    for e in entries:
        assert e.prev == hashlib.sha256(lines[e.seq - 1]).hexdigest()
        assert lines[e.seq] == e.line()
    checkpoint, _ = lib_store.latest_checkpoint()
    assert checkpoint.size == 6
    assert audit(lib_store).intact


def test_a_batch_with_one_bad_draft_appends_nothing(lib_store: EvidenceStore) -> None:
    add_notes(lib_store, 1)
    before = log_bytes(lib_store)
    with pytest.raises(StoreUnavailable, match="not stored"):
        lib_store.append_many(
            [Draft(kind="note"), Draft(kind="note", blobs=["ab" * 32])]  # blob never stored
        )
    with pytest.raises(StoreUnavailable, match="limit"):
        lib_store.append_many([Draft(kind="note"), Draft(kind="note", data={"x": "y" * 70_000})])
    assert log_bytes(lib_store) == before
    assert audit(lib_store).intact


# -- proofs and export ---------------------------------------------------------------


def _rfc9162_verify(index: int, size: int, leaf: bytes, proof: list[bytes], root: bytes) -> bool:
    """RFC 9162 section 2.1.3.2, written independently of evidence.merkle."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = hashlib.sha256(b"\x01" + p + r).digest()
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = hashlib.sha256(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def _public_key(oms_json: OmsJson, repo: Repo) -> tuple[Ed25519PublicKey, dict[str, Any]]:
    code, info = oms_json(["evidence", "key", "--repo", repo.path])
    assert code == EXIT_OK
    public = serialization.load_pem_public_key(info["public_key_pem"].encode())
    assert isinstance(public, Ed25519PublicKey)
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert info["key_id"] == hashlib.sha256(raw).hexdigest()
    return public, info


def test_prove_gives_a_verified_inclusion_proof_that_checks_independently(
    repo: Repo, oms_json: OmsJson
) -> None:
    add_notes(repo.store, 6)  # with the genesis entry, 7 in all
    public, info = _public_key(oms_json, repo)
    line = repo.store.lines()[2]
    code, out = oms_json(["evidence", "prove", "2", "--repo", repo.path])
    assert code == EXIT_OK, out
    assert out["verified"] is True
    assert out["seq"] == 2 and out["tree_size"] == 7
    leaf = hashlib.sha256(b"\x00" + line).digest()
    assert out["leaf_hash"] == leaf.hex()
    checkpoint = cp.verify_signed_checkpoint(out["checkpoint"].encode(), info["note_name"], public)
    assert checkpoint.size == 7
    assert base64.b64encode(checkpoint.root).decode() == out["root"]
    proof = [bytes.fromhex(p) for p in out["proof"]]
    assert len(proof) == 3
    assert _rfc9162_verify(2, 7, leaf, proof, checkpoint.root)
    assert not _rfc9162_verify(3, 7, leaf, proof, checkpoint.root)

    code, out = oms_json(["evidence", "prove", "7", "--repo", repo.path])
    assert code == EXIT_USAGE
    assert out["error"]["kind"] == "not_found"


def test_prove_of_a_modified_entry_is_not_verified(repo: Repo, oms_json: OmsJson) -> None:
    add_notes(repo.store, 4)
    lines = repo.store.lines()
    lines[2] = lines[2].replace(b"note 1", b"note X")
    write_lines(repo.store, lines)
    code, out = oms_json(["evidence", "prove", "2", "--repo", repo.path])
    assert code == EXIT_BLOCKED, out
    assert out["error"]["kind"] == "tampered"


def test_library_prove_verifies_every_entry(lib_store: EvidenceStore) -> None:
    add_notes(lib_store, 10)  # 11 entries with the genesis entry
    checkpoint, _ = lib_store.latest_checkpoint()
    for seq, line in enumerate(lib_store.lines()):
        out = prove(lib_store, seq)
        assert out["verified"] is True
        leaf = hashlib.sha256(b"\x00" + line).digest()
        proof = [bytes.fromhex(p) for p in out["proof"]]
        assert _rfc9162_verify(seq, 11, leaf, proof, checkpoint.root)


def test_exported_dsse_envelope_verifies_with_securesystemslib(
    repo: Repo, oms_json: OmsJson
) -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    add_notes(repo.store, 3)
    public, info = _public_key(oms_json, repo)
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    key = SSlibKey(info["key_id"], "ed25519", "ed25519", {"public": raw.hex()})

    code, out = oms_json(["evidence", "export", "1", "--dsse", "--repo", repo.path])
    assert code == EXIT_OK, out
    envelope = out["envelope"]
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    verified = Envelope.from_dict(copy.deepcopy(envelope)).verify([key], 1)
    assert info["key_id"] in verified

    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    line = repo.store.lines()[1]
    assert {
        "name": f"oms-evidence/{repo.repo_id}/1",
        "digest": {"sha256": hashlib.sha256(line).hexdigest()},
    } in statement["subject"]
    assert statement["predicate"]["entry"] == json.loads(line)

    forged = copy.deepcopy(envelope)
    statement["predicate"]["entry"]["data"] = {"message": "forged"}
    forged["payload"] = base64.b64encode(rfc8785.dumps(statement)).decode()
    with pytest.raises(VerificationError):
        Envelope.from_dict(forged).verify([key], 1)
    other_raw = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    other = SSlibKey(info["key_id"], "ed25519", "ed25519", {"public": other_raw.hex()})
    with pytest.raises(VerificationError):
        Envelope.from_dict(copy.deepcopy(envelope)).verify([other], 1)


def test_export_of_an_invalid_entry_is_refused_as_tampering(repo: Repo, oms_json: OmsJson) -> None:
    add_notes(repo.store, 2)
    write_lines(repo.store, [b'{"v":1}', repo.store.lines()[1]])
    code, shown = oms_json(["evidence", "show", "0", "--repo", repo.path])
    assert code == EXIT_BLOCKED and shown["error"]["kind"] == "tampered"
    code, out = oms_json(["evidence", "export", "0", "--dsse", "--repo", repo.path])
    assert code == EXIT_BLOCKED, out
    assert out["error"]["kind"] == "tampered"


def test_library_export_dsse_names_the_entry_line(lib_store: EvidenceStore) -> None:
    from evidence.dsse import verify_envelope

    add_notes(lib_store, 2)
    env = export_dsse(lib_store, 0)
    statement = json.loads(verify_envelope(env, lib_store.key.public))
    digests = [s["digest"].get("sha256") for s in statement["subject"]]
    assert hashlib.sha256(lib_store.lines()[0]).hexdigest() in digests


# -- worktrees -------------------------------------------------------------------------


def test_worktrees_and_subdirectories_share_one_log(
    repo: Repo, oms_json: OmsJson, run_git: Callable[..., str], tmp_path: Path
) -> None:
    worktree = tmp_path / "second-worktree"
    run_git(repo.path, "worktree", "add", "-q", "-b", "side", str(worktree))
    code, out = oms_json(["init", "--repo", worktree])
    assert code == EXIT_OK
    assert out["repo_id"] == repo.repo_id
    assert out["created"] is False

    sub = repo.path / "pkg" / "inner"
    sub.mkdir(parents=True)
    assert oms_json(["init", "--repo", sub])[1]["repo_id"] == repo.repo_id

    assert oms_json(["evidence", "note", "-m", "from main", "--repo", repo.path])[0] == EXIT_OK
    # The genesis entry, the trusted mark `oms init` found missing, the note.
    assert oms_json(["evidence", "audit", "--repo", worktree])[1]["entries"] == 3
    assert oms_json(["evidence", "note", "-m", "from worktree", "--repo", worktree])[0] == EXIT_OK
    code, out = oms_json(["evidence", "audit", "--repo", repo.path])
    assert code == EXIT_OK and out["entries"] == 4


def test_separate_repositories_get_separate_logs(
    repo: Repo, oms_json: OmsJson, run_git: Callable[..., str], tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    run_git(other, "init", "-q")
    code, out = oms_json(["init", "--repo", other])
    assert code == EXIT_OK
    assert out["repo_id"] != repo.repo_id
    assert out["key_id"] == repo.init["key_id"]  # one key per state root
    oms_json(["evidence", "note", "-m", "x", "--repo", other])
    assert oms_json(["evidence", "audit", "--repo", repo.path])[1]["entries"] == 1


# -- the command contract --------------------------------------------------------------


@pytest.fixture
def not_a_repo(tmp_path: Path) -> Path:
    d = tmp_path / "plain-dir"
    d.mkdir()
    return d


ERROR_CASES = {
    "show-missing-entry": (["evidence", "show", "999"], True, EXIT_USAGE, "not_found"),
    "not-a-git-repo": (["evidence", "audit"], "plain", EXIT_USAGE, "usage"),
    "init-not-a-git-repo": (["init"], "plain", EXIT_USAGE, "usage"),
    "repo-does-not-exist": (["evidence", "audit"], "missing", EXIT_USAGE, "usage"),
    "note-before-init": (["evidence", "note", "-m", "x"], False, EXIT_UNAVAILABLE, "unavailable"),
    "audit-before-init": (["evidence", "audit"], False, EXIT_UNAVAILABLE, "unavailable"),
    "seq-not-a-number": (["evidence", "show", "abc"], True, EXIT_USAGE, "usage"),
    "unknown-command": (["evidence", "frobnicate"], True, EXIT_USAGE, "usage"),
}


def _error_args(
    case: str, git_repo: Path, not_a_repo: Path, tmp_path: Path, oms_home: Path
) -> tuple[list[Any], int, str]:
    args, where, code, kind = ERROR_CASES[case]
    if where is True:
        # what `oms init` does
        EvidenceStore.init(oms_home, repo_id_for(git_repo / ".git"), git_repo / ".git")
        target: Path = git_repo
    elif where is False:
        target = git_repo
    elif where == "plain":
        target = not_a_repo
    else:
        target = tmp_path / "no-such-dir"
    return [*args, "--repo", target], code, kind


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_are_one_json_object_with_the_matching_exit_code(
    case: str,
    git_repo: Path,
    not_a_repo: Path,
    tmp_path: Path,
    oms_home: Path,
    run_oms: Callable[..., subprocess.CompletedProcess[str]],
    parse_json: Any,
) -> None:
    args, code, kind = _error_args(case, git_repo, not_a_repo, tmp_path, oms_home)
    proc = run_oms([*args, "--json"])
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    out = parse_json(proc)
    assert out["ok"] is False
    assert out["error"]["kind"] == kind
    assert out["error"]["message"] and "\n" not in out["error"]["message"]
    assert proc.stderr == ""


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_without_json_are_one_line_on_stderr(
    case: str,
    git_repo: Path,
    not_a_repo: Path,
    tmp_path: Path,
    oms_home: Path,
    run_oms: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    args, code, kind = _error_args(case, git_repo, not_a_repo, tmp_path, oms_home)
    proc = run_oms(args)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"oms: {kind}: ")
    assert "Traceback" not in proc.stderr


def test_note_before_init_creates_nothing(
    git_repo: Path, oms_json: OmsJson, oms_home: Path
) -> None:
    code, out = oms_json(["evidence", "note", "-m", "too early", "--repo", git_repo])
    assert code == EXIT_UNAVAILABLE
    assert "oms init" in out["error"]["message"]
    assert not (oms_home / "repos").exists()


def test_successful_commands_print_exactly_one_json_object(
    repo: Repo, oms_json: OmsJson, tmp_path: Path
) -> None:
    code, out = oms_json(["evidence", "note", "-m", "hello\x1b[31m", "--repo", repo.path])
    assert code == EXIT_OK and out["seq"] == 1 and out["kind"] == "note"
    code, shown = oms_json(["evidence", "show", "1", "--repo", repo.path])
    assert code == EXIT_OK
    # Stored as data, verbatim, in the versioned note payload.
    assert shown["data"] == {"v": 1, "message": "hello\x1b[31m", "attachment": None}
    assert shown["prev"] == hashlib.sha256(repo.store.lines()[0]).hexdigest()
    for args in (["evidence", "audit"], ["evidence", "key"], ["evidence", "repair"]):
        code, _ = oms_json([*args, "--repo", repo.path])
        assert code == EXIT_OK, args


def test_release_status_is_always_not_stable(oms_json: OmsJson) -> None:
    code, out = oms_json(["release", "status"])
    assert code == EXIT_OK
    assert out["status"] == "not_stable"
    assert out["ok"] is True
    assert len(out) == 3  # ok, the exit code (checked by oms_json) and status: nothing else


def test_the_oms_console_script_is_the_same_cli(oms_env: dict[str, str], parse_json: Any) -> None:
    oms = Path(sys.executable).with_name("oms")
    if not oms.exists():
        pytest.skip(f"no console script at {oms}")
    proc = subprocess.run(
        [str(oms), "release", "status", "--json"], env=oms_env, capture_output=True, text=True
    )
    assert proc.returncode == 0
    assert parse_json(proc)["status"] == "not_stable"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the parallel audit needs two CPUs")
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 17, 33])
def test_the_parallel_audit_combines_both_halves_into_the_signed_root(
    lib_store: EvidenceStore, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    import evidence.chaincheck as chaincheck

    monkeypatch.setattr(chaincheck, "PARALLEL_BYTES", 0)
    add_notes(lib_store, n - 1)  # n entries with the genesis entry
    chunks = chaincheck.check_whole_lines(str(lib_store.log_path), log_bytes(lib_store))
    assert [c.count for c in chunks] == [
        _first_line_of_second_chunk(log_bytes(lib_store)),
        n - _first_line_of_second_chunk(log_bytes(lib_store)),
    ]
    assert audit(lib_store).intact
    # A checkpoint over the same size but another root must fail the combined-root path.
    from evidence.checkpoint import Checkpoint, sign_checkpoint

    bad = sign_checkpoint(
        Checkpoint(lib_store.origin, n, b"\x00" * 32), lib_store.origin, lib_store.key.private
    )
    lib_store.checkpoint_path.write_bytes(bad)
    report = audit(lib_store)
    assert not report.intact and "root does not match" in (report.reason or "")


# -- intact means signed: the pending checkpoint, interrupted appends, foreign lines ----


def _next_line(store: EvidenceStore, **data: Any) -> bytes:
    """A well-formed entry line that continues the chain (seq, prev) as oms would write it:
    only a signed checkpoint tells it apart from one of oms' own."""
    lines = store.lines()
    obj = {
        "v": 1, "seq": len(lines), "prev": hashlib.sha256(lines[-1]).hexdigest(),
        "time": "2026-01-01T00:00:00.000000Z", "kind": "note", "subject": [],
        "data": data or {"message": "not written by oms"}, "blobs": [], "policy": None,
    }  # fmt: skip
    return rfc8785.dumps(obj)


def _append_raw(store: EvidenceStore, data: bytes) -> None:
    with open(store.log_path, "ab") as f:
        f.write(data)


def test_a_foreign_complete_line_is_refused_by_append_and_audit_and_repair_quarantines_it(
    repo: Repo, oms_json: OmsJson
) -> None:
    add_notes(repo.store, 2)
    foreign = _next_line(repo.store)
    _append_raw(repo.store, foreign + b"\n")
    before = log_bytes(repo.store)

    code, refused = oms_json(["evidence", "note", "-m", "on top", "--repo", repo.path])
    assert code == EXIT_BLOCKED, refused
    assert refused["error"]["kind"] == "tampered"
    assert log_bytes(repo.store) == before  # nothing appended, nothing signed over it
    assert cp.parse_signed_checkpoint(repo.store.witness_path.read_bytes())[0].size == 3

    out = assert_tampered(oms_json, repo, 3)
    assert "no signed checkpoint" in out["reason"]
    code, exported = oms_json(["evidence", "export", "3", "--dsse", "--repo", repo.path])
    assert code == EXIT_BLOCKED and exported["error"]["kind"] == "tampered"

    code, repaired = oms_json(["evidence", "repair", "--repo", repo.path])
    assert code == EXIT_OK, repaired
    assert repaired["quarantined_entries"] == 1 and repaired["seq"] == 3
    (quarantine,) = repo.store.dir.glob("quarantine-*")
    assert quarantine.read_bytes() == foreign + b"\n"
    assert_intact(oms_json, repo, 4)
    assert oms_json(["evidence", "note", "-m", "after", "--repo", repo.path])[0] == EXIT_OK


def test_a_forged_pending_checkpoint_does_not_get_a_foreign_line_adopted(
    lib_store: EvidenceStore,
) -> None:
    from evidence.pending import Pending, log_extension

    add_notes(lib_store, 1)
    foreign = _next_line(lib_store) + b"\n"
    lines = [*lib_store.lines(), foreign[:-1]]
    data = log_bytes(lib_store) + foreign
    root = root_from_leaves(lines)
    offset = len(log_bytes(lib_store))
    ext = log_extension(len(data), hashlib.sha256(data).hexdigest())
    body = cp.Checkpoint(lib_store.origin, len(lines), root, (ext,))
    other = Ed25519PrivateKey.generate()  # the right shape, the wrong key
    note = cp.sign_checkpoint(body, lib_store.origin, other)
    lib_store.pending_path.write_bytes(Pending(offset, note, foreign).encode())
    _append_raw(lib_store, foreign)
    with pytest.raises(TamperDetected, match="not covered"):
        add_notes(lib_store, 1)
    assert log_bytes(lib_store) == data
    report = audit(lib_store)
    assert not report.intact and report.first_bad_seq == 2


def root_from_leaves(lines: list[bytes]) -> bytes:
    from evidence.merkle import root_from_leaf_hashes

    return root_from_leaf_hashes([hashlib.sha256(b"\x00" + x).digest() for x in lines])


KILL_SCRIPT = r"""
import os, signal, sys
from pathlib import Path
import evidence.store as st
from evidence import Draft, EvidenceStore

root, repo_id, kill_at = sys.argv[1], sys.argv[2], sys.argv[3]
real_write, real_append = st.atomic_write, st.append_lines
writes = []

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def atomic_write(path, data, **kw):
    writes.append(path.name)
    if kill_at == f"before-write-{len(writes)}":
        die()
    real_write(path, data, **kw)
    if kill_at == f"after-write-{len(writes)}":
        die()

def append_lines(path, lines):
    if kill_at == "mid-lines":  # a short write, as a SIGKILL in write(2) leaves it
        with open(path, "ab") as f:
            f.write(b"\n".join(lines)[: len(lines[0]) // 2])
        die()
    real_append(path, lines)
    if kill_at == "after-lines":
        die()

st.atomic_write, st.append_lines = atomic_write, append_lines
store = EvidenceStore.open(Path(root), repo_id)
store.append_many([Draft(kind="note", data={"killed": kill_at, "i": i}) for i in range(2)])
print("acknowledged", flush=True)
"""

# Where an append is killed, and whether its two entries are then in the log: the pending
# checkpoint is write 1; witness, checkpoint and the tree cache are writes 2, 3 and 4.
KILL_POINTS = {
    "before-write-1": False,  # nothing written
    "after-write-1": False,  # pending checkpoint only: its lines never reached the log
    "mid-lines": False,  # a torn batch of this key: rolled back to a quarantine file
    "after-lines": True,  # lines complete, checkpoint not yet promoted: adopted
    "after-write-2": True,  # witness written (acknowledged), checkpoint not yet: caught up
    "after-write-3": True,  # checkpoint written, the pending file not yet removed
    "after-write-4": True,  # everything but the return
}


@pytest.mark.parametrize("kill_at", sorted(KILL_POINTS))
def test_an_append_killed_at_any_step_never_blocks_the_next_gate(
    repo: Repo, oms_env: dict[str, str], oms_json: OmsJson, kill_at: str
) -> None:
    add_notes(repo.store, 1)
    proc = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(repo.store.root), repo.repo_id, kill_at],
        env=oms_env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, (proc.stdout, proc.stderr)  # it did run, and die
    assert "acknowledged" not in proc.stdout

    code, out = oms_json(["evidence", "note", "-m", "the next gate", "--repo", repo.path])
    assert code == EXIT_OK, out
    killed = [json.loads(x)["data"] for x in repo.store.lines() if b'"killed"' in x]
    assert killed == ([{"killed": kill_at, "i": 0}, {"killed": kill_at, "i": 1}]
                      if KILL_POINTS[kill_at] else [])  # fmt: skip
    assert out["seq"] == 2 + len(killed)
    assert_intact(oms_json, repo, out["seq"] + 1)
    assert not repo.store.pending_path.exists()


def test_an_interrupted_append_is_reported_until_adopted_and_repair_adopts_it(
    repo: Repo, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(repo.store.root), repo.repo_id, "after-lines"],
        env=oms_env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL
    out = assert_tampered(oms_json, repo, 1)  # complete, but the witness does not cover it
    assert "interrupted append" in out["reason"]
    code, repaired = oms_json(["evidence", "repair", "--repo", repo.path])
    assert code == EXIT_OK and repaired["adopted_entries"] == 2, repaired
    assert not list(repo.store.dir.glob("quarantine-*"))
    assert_intact(oms_json, repo, 3)


def test_a_batch_signs_one_checkpoint(lib_store: EvidenceStore, monkeypatch: Any) -> None:
    import evidence.store as st

    signed: list[int] = []
    real = st.cp.sign_checkpoint

    def counting(c: cp.Checkpoint, name: str, key: Ed25519PrivateKey) -> bytes:
        signed.append(c.size)
        return real(c, name, key)

    monkeypatch.setattr(st.cp, "sign_checkpoint", counting)
    lib_store.append_many([Draft(kind="note", data={"n": n}) for n in range(5)])
    assert signed == [6]


# -- the first bad seq is the entry that changed ----------------------------------------


def _same_length_edit(line: bytes) -> bytes:
    """One character of the entry's data changed: canonical, same length, same seq and prev."""
    obj = json.loads(line)
    text = json.dumps(obj["data"], sort_keys=True)
    obj["data"] = json.loads(text.replace("e", "E", 1))
    changed = rfc8785.dumps(obj)
    assert changed != line and len(changed) == len(line)
    return changed


@pytest.mark.parametrize("changed", [0, 1, 2])
def test_an_edited_entry_is_reported_at_its_own_seq(
    repo: Repo, oms_json: OmsJson, changed: int
) -> None:
    add_notes(repo.store, 3)  # entries 0 (genesis) to 3
    lines = repo.store.lines()
    lines[changed] = _same_length_edit(lines[changed])
    write_lines(repo.store, lines)
    assert_tampered(oms_json, repo, changed)


# -- the log is bound to its repository ------------------------------------------------


def _relabel(note: bytes, old_name: str, new_name: str, public: Ed25519PublicKey) -> bytes:
    """Rename a note's signature line (and its key id) without touching the signed text."""
    text, _, sig = note.decode().rpartition("\n\n")
    prefix = f"\u2014 {old_name} "
    assert sig.startswith(prefix)
    raw = base64.b64decode(sig[len(prefix) :].strip())
    blob = base64.b64encode(cp.note_key_hash(new_name, public) + raw[4:]).decode()
    return f"{text}\n\n\u2014 {new_name} {blob}\n".encode()


def test_another_repositorys_log_and_checkpoint_relabelled_are_refused(
    repo: Repo, oms_json: OmsJson, run_git: Callable[..., str], tmp_path: Path, oms_home: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    run_git(other, "init", "-q")
    code, init = oms_json(["init", "--repo", other])
    assert code == EXIT_OK
    victim = EvidenceStore(oms_home, init["repo_id"])
    add_notes(repo.store, 2)
    public = load_key(oms_home).public
    shutil.rmtree(victim.dir)
    shutil.copytree(repo.store.dir, victim.dir)
    for src, dst in ((repo.store.checkpoint_path, victim.checkpoint_path),
                     (repo.store.witness_path, victim.witness_path)):  # fmt: skip
        dst.write_bytes(_relabel(src.read_bytes(), repo.store.origin, victim.origin, public))
    # The relabelled note still carries a valid signature under the victim's name...
    cp.verify_signed_checkpoint(victim.witness_path.read_bytes(), victim.origin, public)
    # ...but its origin line names the other log, and so does entry 0.
    code, out = oms_json(["evidence", "audit", "--repo", other])
    assert code == EXIT_BLOCKED and out["first_bad_seq"] == 0, out
    assert "belongs to repository" in out["reason"]
    for args in (["evidence", "note", "-m", "x"], ["evidence", "show", "1"]):
        code, refused = oms_json([*args, "--repo", other])
        assert code == EXIT_BLOCKED and refused["error"]["kind"] == "tampered", refused
    # Whatever entry 0 says, the relabelled note itself is refused: its origin line.
    with pytest.raises(cp.CheckpointError, match="expected a checkpoint of the log"):
        victim.verify_note(victim.witness_path.read_bytes())


def test_a_store_whose_genesis_names_another_common_dir_is_refused(
    git_repo: Path, oms_json: OmsJson, oms_home: Path, tmp_path: Path
) -> None:
    repo_id = repo_id_for(git_repo / ".git")
    EvidenceStore.init(oms_home, repo_id, tmp_path / "elsewhere" / ".git")
    code, out = oms_json(["evidence", "note", "-m", "x", "--repo", git_repo])
    assert code == EXIT_BLOCKED and "common dir" in out["error"]["message"], out
    code, out = oms_json(["evidence", "audit", "--repo", git_repo])
    assert code == EXIT_BLOCKED and out["first_bad_seq"] == 0, out


def test_the_genesis_entry_records_the_repository_at_init(
    git_repo: Path, oms_json: OmsJson
) -> None:
    code, init = oms_json(["init", "--repo", git_repo])
    assert code == EXIT_OK
    code, genesis = oms_json(["evidence", "show", "0", "--repo", git_repo])
    assert code == EXIT_OK, genesis
    assert genesis["kind"] == "genesis"
    assert genesis["data"] == {
        "v": 1,
        "repo_id": init["repo_id"],
        "common_dir": os.path.realpath(git_repo / ".git"),
    }


# -- the audit never crashes on a crafted log -------------------------------------------


def _resign(store: EvidenceStore) -> None:
    """Sign checkpoint and witness over the log as it is now (what only the key holder can)."""
    data = log_bytes(store)
    lines = store.lines()
    from evidence.pending import log_extension

    ext = log_extension(len(data), hashlib.sha256(data).hexdigest())
    note = cp.sign_checkpoint(
        cp.Checkpoint(store.origin, len(lines), root_from_leaves(lines), (ext,)),
        store.origin,
        store.key.private,
    )
    store.checkpoint_path.write_bytes(note)
    store.witness_path.write_bytes(note)
    (store.dir / "tree.json").unlink(missing_ok=True)


@pytest.mark.parametrize(
    "blob_name",
    ['a"b', "\u00e9" * 64, "../../keys/ed25519.pem", "A" * 64, "\\u0041" + "a" * 63],
    ids=["quote", "non-ascii", "path", "upper-hex", "escaped"],
)
def test_a_crafted_blob_name_is_a_tamper_report_at_its_seq(
    repo: Repo, oms_json: OmsJson, blob_name: str
) -> None:
    add_notes(repo.store, 1)
    line = json.loads(_next_line(repo.store))
    line["blobs"] = [blob_name]
    _append_raw(repo.store, rfc8785.dumps(line) + b"\n")
    _resign(repo.store)
    out = assert_tampered(oms_json, repo, 2)
    assert "blob" in out["reason"]


# -- what export and show hand out is verified ----------------------------------------


def test_an_export_carries_the_checkpoint_and_an_inclusion_proof_that_verify_outside(
    repo: Repo, oms_json: OmsJson
) -> None:
    add_notes(repo.store, 5)
    public, info = _public_key(oms_json, repo)
    code, out = oms_json(["evidence", "export", "3", "--dsse", "--repo", repo.path])
    assert code == EXIT_OK, out
    statement = json.loads(base64.b64decode(out["envelope"]["payload"]))
    predicate = statement["predicate"]
    checkpoint = cp.verify_signed_checkpoint(
        predicate["checkpoint"].encode(), info["note_name"], public
    )
    assert checkpoint.origin == predicate["log"] == repo.store.origin
    proof = predicate["inclusion_proof"]
    assert proof["log_index"] == 3 and proof["tree_size"] == checkpoint.size == 6
    line = rfc8785.dumps(predicate["entry"])
    leaf = hashlib.sha256(b"\x00" + line).digest()
    assert proof["leaf_hash"] == leaf.hex()
    hashes = [bytes.fromhex(h) for h in proof["hashes"]]
    assert _rfc9162_verify(3, checkpoint.size, leaf, hashes, checkpoint.root)
    assert base64.b64encode(checkpoint.root).decode() == proof["root"]


@pytest.mark.parametrize("command", ["show", "export", "prove"])
@pytest.mark.parametrize("damage", ["witness-deleted", "earlier-entry-edited", "unsigned-tail"])
def test_show_export_and_prove_refuse_what_does_not_verify(
    repo: Repo, oms_json: OmsJson, command: str, damage: str
) -> None:
    add_notes(repo.store, 3)
    seq = 3
    if damage == "witness-deleted":
        repo.store.witness_path.unlink()
    elif damage == "earlier-entry-edited":
        lines = repo.store.lines()
        lines[1] = _same_length_edit(lines[1])
        write_lines(repo.store, lines)
    else:
        _append_raw(repo.store, _next_line(repo.store) + b"\n")
        seq = 4
    args = ["evidence", command, str(seq), "--repo", repo.path]
    code, out = oms_json([*args, "--dsse"] if command == "export" else args)
    assert code == EXIT_BLOCKED, out
    assert out["error"]["kind"] == "tampered"


GATES = {
    "note": ["evidence", "note", "-m", "x"],
    "result-gate": ["process-result", "--candidate", "HEAD"],
    "transfer": ["transfer", "preview", "--to", "anthropic:claude-sonnet", "--purpose", "p"],
}


@pytest.mark.parametrize("gate", sorted(GATES))
def test_every_gate_refuses_to_extend_a_log_that_fails_its_audit(
    repo: Repo, oms_json: OmsJson, gate: str
) -> None:
    add_notes(repo.store, 1)
    _append_raw(repo.store, _next_line(repo.store) + b"\n")
    before = log_bytes(repo.store)
    code, out = oms_json([*GATES[gate], "--repo", repo.path])
    assert code == EXIT_BLOCKED, out
    assert out["error"]["kind"] == "tampered"
    assert log_bytes(repo.store) == before
