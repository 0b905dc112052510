"""Asking cosigners (gatekeeper/work/cosign.py) against the loopback tlog-witness built from
the C2SP spec (tests/support/witness_server.py: no witness installs here): a witness that
holds a smaller size is asked again from there; one that holds other entries is a fork,
refused and recorded; a larger size is a rollback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.witness_server import WitnessServer

from evidence import Draft, EvidenceStore
from evidence.cosign import read_state
from evidence.merkle import leaf_hash, root_from_leaf_hashes
from gatekeeper.work.cosign import coverage, sync_store
from policy import Cosigner, EvidencePolicy


@pytest.fixture
def store(oms_home: Path) -> EvidenceStore:
    store, _ = EvidenceStore.init(oms_home, "rcosigntest")
    for i in range(4):
        store.append(Draft(kind="note", data={"message": f"n{i}"}))
    return store


@pytest.fixture
def witness(store: EvidenceStore) -> Iterator[WitnessServer]:
    w = WitnessServer("witness.test/w1", {store.origin: (store.origin, store.key.public)})
    yield w
    w.close()


def _policy(w: WitnessServer, required: int = 1) -> EvidencePolicy:
    return EvidencePolicy(cosigners=[Cosigner(name="w1", url=w.url, key=w.vkey)],
                          required=required)  # fmt: skip


def _root(store: EvidenceStore, size: int) -> bytes:
    return root_from_leaf_hashes([leaf_hash(x) for x in store.lines()[:size]])


def test_a_witness_behind_us_is_asked_again_from_its_size(
    store: EvidenceStore, witness: WitnessServer
) -> None:
    witness.state[store.origin] = (3, _root(store, 3))  # it cosigned 3 entries elsewhere
    report = sync_store(store, _policy(witness), 5)
    assert report.exit_code == 0 and report.results[0].status == "cosigned"
    assert witness.requests == [(0, 409), (3, 200)]
    assert coverage(store, _policy(witness), 5).covering == 1


@pytest.mark.parametrize("held", [3, 5], ids=["smaller", "equal"])
def test_a_witness_holding_other_entries_refuses_a_fork(
    store: EvidenceStore, witness: WitnessServer, held: int
) -> None:
    witness.state[store.origin] = (held, b"\x07" * 32)
    report = sync_store(store, _policy(witness), 5)
    assert report.exit_code == 3 and report.results[0].status == "refused"
    assert witness.requests[-1][1] == (422 if held < 5 else 409)
    refusals = read_state(store.dir).refusals
    assert [r.cosigner for r in refusals] == ["w1"]
    assert coverage(store, _policy(witness), 5).problems[0].startswith("cosigner w1 refused")


def test_cosigning_again_clears_that_cosigners_refusal(
    store: EvidenceStore, witness: WitnessServer
) -> None:
    witness.state[store.origin] = (9, b"\x07" * 32)
    assert sync_store(store, _policy(witness), 5).results[0].witness_size == 9
    witness.state.clear()  # the operator reset the witness; it cosigns this log afresh
    assert sync_store(store, _policy(witness), 5).exit_code == 0
    assert read_state(store.dir).refusals == ()


def test_no_cosigner_reachable_is_unavailable_only_when_required(
    store: EvidenceStore, witness: WitnessServer
) -> None:
    witness.close()
    assert sync_store(store, _policy(witness, required=1), 2).exit_code == 4
    assert sync_store(store, _policy(witness, required=0), 2).exit_code == 0
