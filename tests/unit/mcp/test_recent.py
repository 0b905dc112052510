"""oms_runs / oms_status rows: typed entries of the asked kinds, newest first."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence import Draft, EvidenceStore, TamperDetected
from gatekeeper.mcp.bounds import clean_error
from gatekeeper.mcp.tools.result import RUN_KINDS, recent


@pytest.fixture
def store(oms_home: Path) -> EvidenceStore:
    store, created = EvidenceStore.init(oms_home, "rmcprecent")
    assert created
    return store


def _fill(store: EvidenceStore) -> None:
    drafts = [
        Draft(kind="result", data={"decision": "FAILED", "candidate": "c1", "reasons": ["x"]}),
        Draft(kind="note", data={"message": "not a run"}),
        Draft(kind="transfer.preview", data={"digest": "sha256:aa", "destination": "d",
                                             "bytes": 12, "secret_count": 0}),
        Draft(kind="result.start", data={"candidate": "c2"}),
        Draft(kind="result", data={"decision": "READY_FOR_HUMAN", "candidate": "c2"}),
        Draft(kind="transfer.release", data={"digest": "sha256:aa", "bytes": 12}),
    ]  # fmt: skip
    for d in drafts:
        store.append(d)


def test_runs_are_the_asked_kinds_newest_first_with_their_summary_keys(
    store: EvidenceStore,
) -> None:
    _fill(store)
    rows = recent(store, RUN_KINDS, 20)
    assert [(r["seq"], r["kind"]) for r in rows] == [
        (6, "transfer.release"),
        (5, "result"),
        (3, "transfer.preview"),
        (1, "result"),
    ]
    assert {k: v for k, v in rows[2].items() if k != "time"} == {
        "seq": 3, "kind": "transfer.preview", "digest": "sha256:aa", "destination": "d",
        "bytes": 12,
    }  # fmt: skip
    assert list(rows[1]) == ["seq", "kind", "time", "decision", "candidate"]  # today's order
    assert rows[1]["time"] == store.entry(5).time


@pytest.mark.parametrize(("kinds", "limit", "seqs"), [
    (RUN_KINDS, 2, [6, 5]),
    (("result",), 1, [5]),
    (("result",), 50, [5, 1]),
    (("transfer.approve",), 5, []),
])  # fmt: skip
def test_recent_keeps_the_limit_and_the_kinds(
    store: EvidenceStore, kinds: tuple[str, ...], limit: int, seqs: list[int]
) -> None:
    _fill(store)
    assert [r["seq"] for r in recent(store, kinds, limit)] == seqs


def test_a_line_that_is_not_an_entry_is_reported_as_tampering(store: EvidenceStore) -> None:
    _fill(store)
    with store.log_path.open("ab") as log:
        log.write(b"{not json}\n")
    with pytest.raises(TamperDetected) as caught:
        recent(store, RUN_KINDS, 20)
    assert clean_error(caught.value).startswith("tampered: entry 7 ")
