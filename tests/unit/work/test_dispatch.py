"""The pure parts of `gatekeeper.work.dispatch`: the task document, why a run gave no
receipt, and the workspace path a dispatch records before its run clones there."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gatekeeper.agent.workspace import work_root, workspace_path
from gatekeeper.errors import UsageError
from gatekeeper.work.dispatch import no_result, task_document
from gatekeeper.work.providers.base import ProviderReceipt

RUN_ID = "20261201T150000Z-0a1b2c3d"


class FakeWork:
    """What `task_document` reads of a Work: the ticket, its body blob, a reflection."""

    def __init__(self, body: bytes | None, reflection: bytes | None) -> None:
        blob = "sha256:" + "0" * 64 if body is not None else None
        self._ticket = SimpleNamespace(id="t-000000000001", title="-- $(touch x)",
                                       body=SimpleNamespace(blob=blob))  # fmt: skip
        self.store = SimpleNamespace(blobs=SimpleNamespace(get=lambda _hex: body))
        self._reflection = reflection
        self.asked: list[tuple[str, int]] = []

    def ticket(self, ticket: str) -> Any:
        return self._ticket

    def reflection(self, ticket: str, attempt: int) -> bytes | None:
        self.asked.append((ticket, attempt))
        return self._reflection


def dispatch_of(attempt: int) -> Any:
    envelope = SimpleNamespace(acceptance=("result-gate:READY_FOR_HUMAN", "check:unit"))
    return SimpleNamespace(id="d-000000000001", ticket="t-000000000001", attempt=attempt,
                           envelope_digest="sha256:" + "1" * 64, envelope=envelope)  # fmt: skip


def test_the_first_attempts_task_is_canonical_json_with_no_reflection() -> None:
    work = FakeWork(b"body \xff bytes", None)
    raw = task_document(work, dispatch_of(1))  # type: ignore[arg-type]
    doc = json.loads(raw)
    assert (
        raw == json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    )
    assert doc == {"v": 1, "dispatch": "d-000000000001", "envelope_digest": "sha256:" + "1" * 64,
                   "ticket": "t-000000000001", "attempt": 1, "title": "-- $(touch x)",
                   "body": "body \ufffd bytes",
                   "acceptance": ["result-gate:READY_FOR_HUMAN", "check:unit"]}  # fmt: skip
    assert work.asked == []


def test_a_retry_carries_the_previous_attempts_reflection() -> None:
    work = FakeWork(None, b"the check failed: \xfe")
    doc = json.loads(task_document(work, dispatch_of(2)))  # type: ignore[arg-type]
    assert doc["reflection"] == "the check failed: \ufffd" and doc["body"] == ""
    assert work.asked == [("t-000000000001", 1)]
    assert json.loads(task_document(FakeWork(None, None), dispatch_of(3)))["reflection"] is None  # type: ignore[arg-type]


def receipt(exit_code: int | None, candidate: str | None = None, signal: int | None = None,
            timed_out: bool = False) -> ProviderReceipt:  # fmt: skip
    return ProviderReceipt(engine="command:impl", run_id=RUN_ID, exit_code=exit_code,
                           signal=signal, timed_out=timed_out, base="0" * 40,
                           candidate=candidate, candidate_ref=None, output="", usage=None,
                           evidence_seq=3, workspace="/w")  # fmt: skip


@pytest.mark.parametrize(("got", "why"), [
    (receipt(1), "the worker exited 1 with no commit"),
    (receipt(2, "a" * 40), "the worker exited 2 with a commit"),
    (receipt(0), "the worker exited 0 with no commit"),
    (receipt(None, signal=9), "the worker was killed by signal 9"),
    (receipt(None, timed_out=True, signal=9), "the worker timed out"),
])  # fmt: skip
def test_a_run_without_a_receipt_says_why_in_one_line(got: ProviderReceipt, why: str) -> None:
    assert no_result(got) == why


def test_the_workspace_path_is_the_work_roots_run_directory_and_creates_nothing(
    tmp_path: Path,
) -> None:
    env = {"OMS_WORK_DIR": str(tmp_path / "work"), "OMS_HOME": str(tmp_path / "state")}
    assert workspace_path(RUN_ID, env) == work_root(env) / RUN_ID == tmp_path / "work" / RUN_ID
    assert not (tmp_path / "work").exists()
    with pytest.raises(UsageError, match="not a run id"):
        workspace_path("../../etc", env)
