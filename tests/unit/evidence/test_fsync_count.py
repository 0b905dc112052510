"""How many fsync calls an acknowledged append costs (issue 33: at most three, files and
directories counted), and that they land on what makes it durable: the log's lines, then
the witness checkpoint and the directory that names it. The checkpoint, the pending
checkpoint and the frontier cache are re-derivable or checked on the next open, so they are
written without one. Real files in tmp_path; os.fsync and os.fdatasync are wrapped, not
replaced."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from evidence import Draft, EvidenceStore
from evidence import checkpoint as cp
from evidence.audit import audit
from evidence.errors import TamperDetected
from gatekeeper.cli.render import repair_lines
from gatekeeper.gates.records import AdoptedAppend, repair_result

MAX_FSYNCS = 3


@pytest.fixture
def store(tmp_path: Path) -> EvidenceStore:
    root = tmp_path / "state"
    store, created = EvidenceStore.init(root, "rfsynctest")
    assert created
    store.append(Draft(kind="note", data={"message": "before"}))
    return store


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The path of every descriptor fsynced (or fdatasynced) while the test runs."""
    paths: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def counting(fd: int, real=real) -> None:  # type: ignore[no-untyped-def]
            paths.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)

        monkeypatch.setattr(os, name, counting)
    yield paths


def _witnessed_size(store: EvidenceStore) -> int:
    return cp.parse_signed_checkpoint(store.witness_path.read_bytes())[0].size


@pytest.mark.parametrize("n", [1, 5])
def test_an_acknowledged_append_costs_at_most_three_fsyncs(
    store: EvidenceStore, synced: list[str], n: int
) -> None:
    entries = store.append_many([Draft(kind="note", data={"i": i}) for i in range(n)])
    assert [e.seq for e in entries] == list(range(2, 2 + n))
    assert len(synced) <= MAX_FSYNCS, synced
    # The fsyncs that make it durable: the lines, then the witness and its directory.
    witness = [p for p in synced if Path(p).parent == store.witness_path.parent
               and store.repo_id in Path(p).name]  # its temp file, renamed over it  # fmt: skip
    assert synced == [str(store.log_path), *witness, str(store.witness_path.parent)]
    assert len(witness) == 1
    # Acknowledged: the witness and the checkpoint cover every entry.
    assert _witnessed_size(store) == store.head() == 2 + n
    assert store.latest_checkpoint()[0].size == 2 + n


def test_the_count_is_per_append_not_per_store(store: EvidenceStore, synced: list[str]) -> None:
    for i in range(4):
        store.append(Draft(kind="note", data={"i": i}))
    assert len(synced) <= 4 * MAX_FSYNCS, synced
    assert synced.count(str(store.log_path)) == 4


def test_a_checkpoint_behind_the_witness_is_caught_up_by_the_next_append(
    store: EvidenceStore,
) -> None:
    """A crash that lost the checkpoint's unsynced last write leaves the previous one."""
    old = store.checkpoint_path.read_bytes()
    store.append(Draft(kind="note", data={"message": "acknowledged"}))
    store.checkpoint_path.write_bytes(old)  # what the disk may hold after a power loss
    report = audit(store)
    assert not report.intact and "rolled back" in (report.reason or "")

    entry = store.append(Draft(kind="note", data={"message": "next"}))
    assert entry.seq == 3
    assert [e.data for e in store.entries("note")][-2:] == [
        {"message": "acknowledged"}, {"message": "next"}]  # fmt: skip
    assert audit(store).intact
    assert store.checkpoint_path.read_bytes() == store.witness_path.read_bytes()


def test_repair_catches_a_checkpoint_up_without_appending(store: EvidenceStore) -> None:
    old = store.checkpoint_path.read_bytes()
    store.append(Draft(kind="note", data={"message": "acknowledged"}))
    store.checkpoint_path.write_bytes(old)
    answer = store.repair()
    assert answer == {"repaired": True, "adopted_entries": 0, "quarantined_bytes": 0}
    assert isinstance(repair_result(answer), AdoptedAppend)  # the CLI's --json shape
    assert repair_lines(answer) == [
        "rewrote the checkpoint from the witness (a crash lost its last write)"]  # fmt: skip
    assert store.head() == 3
    assert audit(store).intact
    assert store.repair() == {"repaired": False, "quarantined_bytes": 0}


def test_a_witness_behind_the_checkpoint_is_still_refused(store: EvidenceStore) -> None:
    """The checkpoint is written after the witness, so it is never ahead of it on disk:
    a witness behind it was rolled back, and no append or repair papers over that."""
    old = store.witness_path.read_bytes()
    store.append(Draft(kind="note", data={"message": "acknowledged"}))
    log = store.log_path.read_bytes()
    store.witness_path.write_bytes(old)
    with pytest.raises(TamperDetected):
        store.append(Draft(kind="note", data={"message": "on a rolled-back witness"}))
    assert store.log_path.read_bytes() == log
    assert not audit(store).intact
