"""The run tools' own logic, in process: the refusal of `approve` as a result that names the
human's command, the bound, which read `oms_read_artifact` and `oms_transfer_preview` are
asked for, and which manifest is a run's latest. The runs functions themselves are
replaced where a test is about the tool around them (the e2e tests drive the real ones)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

from gatekeeper.errors import NotFound, UsageError
from gatekeeper.mcp.bounds import MAX_RESULT_BYTES
from gatekeeper.mcp.server import build_server
from gatekeeper.mcp.tools.evidence import chosen_read
from gatekeeper.mcp.tools.transfer import latest_manifest
from gatekeeper.work.runs import flow, reconcile
from gatekeeper.work.runs.gates import ApprovalRefused
from gatekeeper.work.runs.model import Gate

RID = "r-0123456789ab"
D1, D2, D3 = ("sha256:" + c * 64 for c in "abc")


def call(repo: Path, name: str, args: dict[str, Any]) -> CallToolResult:
    async def go() -> CallToolResult:
        got = await build_server(repo, "all").call_tool(name, args)
        assert isinstance(got, CallToolResult)
        return got

    return anyio.run(go)


def text(result: CallToolResult) -> str:
    [c] = result.content
    assert isinstance(c, TextContent)
    return c.text


def test_approve_over_mcp_comes_back_as_a_result_naming_what_the_human_runs(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[Any, ...]] = []

    def refuse(repo: Path, run_id: str, approval: str, message: str | None, *,
               via: str) -> Any:  # fmt: skip
        asked.append((run_id, approval, message, via))
        raise ApprovalRefused("approve is refused over mcp")

    monkeypatch.setattr(flow, "continue_run", refuse)
    got = call(git_repo, "oms_continue", {"run_id": RID, "approval": "approve"})
    assert asked == [(RID, "approve", None, "mcp")]
    assert got.is_error is not True
    doc = json.loads(text(got))
    assert doc["ok"] is False and doc["truncated"] is False
    data = doc["data"]
    assert data["refused"] == "approve is refused over mcp" and data["run_id"] == RID
    [act] = data["next_actions"]
    assert act["owner"]["kind"] == "human" and act["argv"][-4:] == ["run", "continue", RID,
                                                                    "--approve"]  # fmt: skip


def test_a_refusal_that_names_its_actions_keeps_them(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = [{"action": "approve_gate", "command": "oms run continue x --approve"}]

    def refuse(*args: Any, **kwargs: Any) -> Any:
        assert kwargs == {"via": "mcp", "requested_by": ()}  # a server no agent run started
        raise ApprovalRefused("no", data={"next_actions": named})

    monkeypatch.setattr(reconcile, "reconcile", refuse)
    got = call(git_repo, "oms_reconcile", {"run_id": RID, "approval": "approve"})
    assert json.loads(text(got))["data"]["next_actions"] == named


def test_a_run_answer_is_bounded_keeps_its_next_actions_and_hides_paths(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = str(Path.home())
    big = {"run_id": RID, "status": "completed", "responses": [{"summary": "x" * 600}] * 20,
           "where": f"{home}/secret", "next_actions": [{"action": "continue"}]}  # fmt: skip
    monkeypatch.setattr(flow, "loop_run", lambda *a: (big, 1))
    got = call(git_repo, "oms_loop", {"run_id": RID})
    sent = text(got)
    assert len(sent.encode()) <= MAX_RESULT_BYTES
    doc = json.loads(sent)
    assert doc["ok"] is False  # exit 1: a failed run
    assert doc["truncated"] is True and doc["data"]["next_actions"] == [{"action": "continue"}]
    assert home not in sent and doc["data"]["where"] == "~/secret"


@pytest.mark.parametrize(("args", "message"), [
    ({}, "not both and not neither"),
    ({"seq": 1, "digest": D1, "run_id": RID, "ref": "plan-1"}, "not both"),
    ({"seq": 1}, "seq and digest go together"),
    ({"ref": "plan-1"}, "run_id and ref go together"),
])  # fmt: skip
def test_read_artifact_takes_one_whole_address(args: Mapping[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        chosen_read(args.get("seq"), args.get("digest"), args.get("run_id"), args.get("ref"))


def test_read_artifact_and_transfer_preview_refuse_an_address_in_one_clean_line(
    git_repo: Path,
) -> None:
    for name, args, message in (
        ("oms_read_artifact", {"seq": 1}, "usage: seq and digest go together"),
        ("oms_transfer_preview", {}, "usage: give to and purpose"),
        ("oms_transfer_preview", {"to": "a:b", "run_id": RID}, "usage: give run_id"),
        ("oms_transfer_preview", {"purpose": "p"}, "usage: give to and purpose"),
        ("oms_transfer_preview", {"run_id": RID, "redact": True}, "usage: context, paths"),
    ):
        with pytest.raises(ToolError) as err:  # the wire's isError (tests/e2e/test_mcp.py)
            call(git_repo, name, args)
        assert str(err.value).endswith(message) or message in str(err.value), err.value
        assert "\n" not in str(err.value)


@dataclass
class FakeRuns:
    """What `latest_manifest` reads of a run: its gate, artifacts and events."""

    gate: Gate | None = None
    artifacts_: list[Any] = field(default_factory=list)
    events_: list[Any] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)

    def get(self, run_id: str) -> Any:
        return type("R", (), {"gate": self.gate})()

    def artifacts(self, run_id: str) -> list[Any]:
        return self.artifacts_

    def content(self, a: Any) -> bytes:
        return self.blobs[a.ref]

    def events(self, run_id: str) -> list[Any]:
        return self.events_


def _a(ref: str, kind: str, seq: int) -> Any:
    return type("A", (), {"ref": ref, "kind": kind, "seq": seq})()


def _e(kind: str, seq: int, data: dict[str, Any]) -> Any:
    return type("E", (), {"kind": kind, "seq": seq, "data": data})()


def test_a_runs_latest_manifest_is_its_open_gates_else_the_newest_named() -> None:
    gate = Gate(kind="transfer", step="s", transfer=D1, reason="r")
    runs: Any = FakeRuns(gate=gate)
    assert latest_manifest(runs, RID) == D1
    runs = FakeRuns(
        artifacts_=[_a("transfer_manifest-1", "transfer_manifest", 7), _a("plan-1", "plan", 9)],
        events_=[_e("approval_requested", 5, {"transfer": D2}),
                 _e("approval_requested", 6, {"transfer": None}),
                 _e("other", 11, {"transfer": D1})],
        blobs={"transfer_manifest-1": json.dumps({"digest": D3}).encode(),
               "plan-1": D1.encode()},
    )  # fmt: skip
    assert latest_manifest(runs, RID) == D3  # seq 7 beats seq 5; a plan names none
    runs.events_.append(_e("approval_requested", 8, {"transfer": D2}))
    assert latest_manifest(runs, RID) == D2
    with pytest.raises(NotFound, match="has no transfer manifest"):
        latest_manifest(FakeRuns(gate=Gate(kind="plan", step="implement", reason="r")), RID)  # type: ignore[arg-type]
