"""The human text of `oms run …`, from the runs functions' JSON (no subprocess): every
piece of text a model or an agent may have written is sanitised; and the option checks
that run before any function is called."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.cli.run import (
    artifact_lines,
    chosen,
    list_lines,
    read_items,
    run_lines,
    status_lines,
)
from gatekeeper.errors import UsageError

BAD = "\x1b]52;c;aGk=\x07\u202e\r\nx"  # an OSC copy, a bidi override, a line break
SHOWN = "\\u001b]52;c;aGk=\\u0007\\u202e\\u000d\\u000ax"

RUN: dict[str, Any] = {
    "run_id": "r-0123456789ab", "kind": "orchestrate", "mode": "implement",
    "status": "awaiting_approval", "step": "implement", "goal": "g-1", "ticket": None,
    "stop": "gate", "stop_reason": f"waiting {BAD}",
    "gate": {"kind": "transfer", "role": "implementer", "reason": f"it leaves {BAD}"},
    "artifacts": [{"ref": "plan-1", "kind": "plan", "bytes": 12, "summary": BAD}],
    "artifact_count": 3,
    "responses": [{"role": "planner", "ok": True, "summary": f"# Plan {BAD}"},
                  {"role": "critic", "ok": False, "problem": f"no {BAD}", "summary": ""}],
    "next_actions": [
        {"owner": {"kind": "human"}, "label": f"Approve {BAD}",
         "command": f"/opt/oms transfer approve sha256:ab --code {BAD}"},
        {"owner": {"kind": "agent"}, "label": "Reject", "tool": "oms_continue",
         "arguments": {"run_id": "r-0123456789ab", "approval": "reject", "message": BAD}},
    ],
}  # fmt: skip


def test_a_run_is_a_few_lines_with_nothing_raw() -> None:
    lines = run_lines(RUN)
    assert lines == [
        "run r-0123456789ab (orchestrate, implement): awaiting_approval at step implement",
        "goal g-1, ticket ",
        f"stop: gate; waiting {SHOWN}",
        f"gate: transfer for implementer: it leaves {SHOWN}",
        "artifacts: plan-1 (plan, 12 B) (+2 older)",
        f"response from planner (ok): # Plan {SHOWN}",
        f"response from critic (problem: no {SHOWN}): ",
        "next:",
        f"  - [human] Approve {SHOWN}: /opt/oms transfer approve sha256:ab --code {SHOWN}",
        '  - [agent] Reject: tool oms_continue {"approval": "reject", "message": '
        '"\\u001b]52;c;aGk=\\u0007\\u202e\\r\\nx", "run_id": "r-0123456789ab"}',
    ]
    for line in lines:
        assert not any(ord(c) < 32 or c == "\x7f" or c == "\u202e" for c in line), line


def test_a_fanout_shows_its_items_and_a_status_its_counts_and_events() -> None:
    fan = {**RUN, "fanout_status": "partial", "gate": None,
           "items": [{"role": "qa", "status": "completed", "stop_reason": None},
                     {"role": "critic", "status": "failed",
                      "stop_reason": f"malformed {BAD}"}]}  # fmt: skip
    lines = run_lines(fan)
    assert "fanout status: partial" in lines
    assert "item 1 qa: completed" in lines
    assert f"item 2 critic: failed malformed {SHOWN}" in lines
    st = status_lines({**RUN, "counts": {"artifacts": 3, "events": 4},
                       "recent_events": [{"n": 1, "kind": "run_started"},
                                         {"n": 2, "kind": f"odd{BAD}"}]})  # fmt: skip
    assert st[1] == "counts: artifacts 3, events 4"
    assert st[-1] == "events: 1 run_started, 2 " + f"odd{SHOWN}"[:40] + "…"  # a kind: 40 at most


def test_a_capture_a_fanout_and_a_reconcile_add_their_lines() -> None:
    lines = run_lines({**RUN, "gate": None, "next_actions": [],
                       "bounds": {"requested": 9, "cap": 8, "attempted": 8},
                       "captured": {"check": f"unit{BAD}", "passed": False, "exit_code": 1,
                                    "commit": "c" * 40, "workspace": "candidate",
                                    "ref": "log-3", "timed_out": False},
                       "reconciliation": {"ref": "reconciliation-1", "status": "partial",
                                          "remaining": ["a", "b"],
                                          "next": [f"write {BAD}"]}})  # fmt: skip
    assert "fan-out: 8 of 9 attempted (cap 8)" in lines
    assert (f"captured: check unit{SHOWN} failed (exit 1) on cccccccccccc (candidate), "
            "runtime evidence log-3") in lines  # fmt: skip
    assert "reconciliation reconciliation-1: partial, 2 remaining" in lines
    assert f"  - next: write {SHOWN}" in lines


def test_list_and_artifact_lines_are_sanitised() -> None:
    rows = {"runs": [{"run_id": "r-0123456789ab", "kind": "plan", "mode": "plan",
                      "status": "failed", "updated": "2026-12-02T03:00:00Z",
                      "stop_reason": BAD}]}  # fmt: skip
    assert list_lines(rows) == [f"r-0123456789ab plan/plan failed 2026-12-02T03:00:00Z: {SHOWN}"]
    assert list_lines({"runs": []}) == ["no runs"]
    assert artifact_lines({"text": "# Plan\n\x1b[2Jstep one\u202e\n"}) == [
        "# Plan",
        "\\u001b[2Jstep one\\u202e",
    ]


def test_the_approval_flags() -> None:
    assert chosen(False, False, False, None) == ("none", "cli")
    assert chosen(True, False, False, None) == ("approve", "terminal")
    assert chosen(False, True, False, None) == ("reject", "cli")
    assert chosen(False, False, True, "shorter") == ("revise", "cli")
    with pytest.raises(UsageError, match="exclude one another"):
        chosen(True, True, False, None)
    with pytest.raises(UsageError, match="--revise needs --message"):
        chosen(False, False, True, "  ")


def test_items_are_read_from_a_bounded_regular_file_only(tmp_path: Path) -> None:
    good = tmp_path / "items.json"
    good.write_text(json.dumps([{"role": "qa", "brief": "b"}]))
    assert read_items(good) == [{"role": "qa", "brief": "b"}]
    link = tmp_path / "link.json"
    link.symlink_to(good)
    assert read_items(link) == [{"role": "qa", "brief": "b"}]  # the file it names
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, why in ((tmp_path, "regular file"), (fifo, "regular file"),
                      (Path("/dev/null"), "regular file"),
                      (tmp_path / "none", "cannot open")):  # fmt: skip
        with pytest.raises(UsageError, match=why):
            read_items(path)
    bad = tmp_path / "bad.json"
    for text, why in (("\xff", "not JSON"), ("{}", "list of objects"), ("[1]", "list of objects"),
                      ("[" * 10 + "]" * 10, "list of objects")):  # fmt: skip
        bad.write_bytes(text.encode("latin-1"))
        with pytest.raises(UsageError, match=why):
            read_items(bad)
