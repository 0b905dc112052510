"""The broker's meter: provider-reported usage read from answers as they pass (both
providers' streams, split anywhere), refused logins, and bounds that stop a run."""

from __future__ import annotations

import json

import pytest
from support.fake_models import anthropic_events, openai_events

from gatekeeper.agent.budget import (
    MAX_EVENT_BYTES,
    Bound,
    Meter,
    Spend,
    UsageReader,
)

SSE = "text/event-stream"


def _anthropic_stream(input_tokens: int, cache_read: int, outputs: list[int]) -> bytes:
    start = {"type": "message_start", "message": {"id": "m", "usage": {
        "input_tokens": input_tokens, "cache_read_input_tokens": cache_read,
        "output_tokens": 1}}}  # fmt: skip
    frames = [f"event: message_start\ndata: {json.dumps(start)}\n\n"]
    frames.append('event: content_block_delta\ndata: {"type": "content_block_delta", '
                  '"delta": {"type": "text_delta", "text": "' + "x" * 5000 + '"}}\n\n')  # fmt: skip
    for n in outputs:  # message_delta's usage is cumulative: the last one is the answer's
        delta = {"type": "message_delta", "usage": {"output_tokens": n}}
        frames.append(f"event: message_delta\ndata: {json.dumps(delta)}\n\n")
    return "".join(frames).encode()


def _read(data: bytes, size: int, status: int = 200, ctype: str = SSE) -> UsageReader:
    reader = UsageReader(status, ctype)
    for i in range(0, len(data), size):
        reader.feed(data[i : i + size])
    reader.close()
    return reader


@pytest.mark.parametrize("size", [1, 2, 7, 64, 1 << 20])
def test_anthropic_usage_is_summed_from_the_stream_however_it_is_split(size: int) -> None:
    reader = _read(_anthropic_stream(100, 20, [5, 17]), size)
    assert reader.usage == {"input_tokens": 100, "cache_read_input_tokens": 20,
                            "output_tokens": 17}  # fmt: skip
    assert reader.tokens == 137


@pytest.mark.parametrize("size", [1, 3, 50, 1 << 20])
def test_openai_usage_is_read_from_response_completed_however_it_is_split(size: int) -> None:
    data = b"".join(openai_events({"input": []}, "echo hi")).replace(b"\n", b"\r\n")
    reader = _read(data, size)
    assert reader.usage == {"input_tokens": 1, "output_tokens": 1}
    assert reader.tokens == 2


def test_the_fakes_streams_report_what_the_meter_reads() -> None:
    frames = anthropic_events({"model": "m", "messages": []}, "true")
    assert _read(b"".join(frames), 5).tokens == 2  # message_start 1 in, message_delta 1 out


def test_a_json_answer_has_its_top_level_usage() -> None:
    body = json.dumps({"id": "r", "usage": {"input_tokens": 9, "output_tokens": 4}}).encode()
    assert _read(body, 3, ctype="application/json").tokens == 13


def test_an_oversized_event_is_skipped_not_held() -> None:
    big = {
        "type": "response.completed",
        "response": {"output": "y" * (MAX_EVENT_BYTES + 10), "usage": {"input_tokens": 5}},
    }
    data = f"event: response.completed\ndata: {json.dumps(big)}\n\n".encode()
    reader = UsageReader(200, SSE)
    for i in range(0, len(data), 1 << 16):
        reader.feed(data[i : i + (1 << 16)])
        assert len(reader._line) + len(reader._data) <= MAX_EVENT_BYTES + (1 << 17)
    reader.close()
    assert reader.tokens == 0


def test_usage_a_text_only_claims_is_not_counted() -> None:
    """Only the usage events are read: a model's text holding a usage-shaped string (in a
    content delta) counts nothing, nor do booleans or negative numbers."""
    delta = {"type": "content_block_delta", "delta": {"text": '{"usage": {"input_tokens": 9}}'}}
    bad = {"type": "message_delta", "usage": {"output_tokens": -3, "input_tokens": True}}
    data = (f"event: content_block_delta\ndata: {json.dumps(delta)}\n\n"
            f"event: message_delta\ndata: {json.dumps(bad)}\n\n").encode()  # fmt: skip
    assert _read(data, 4).tokens == 0


@pytest.mark.parametrize(("status", "body", "refused"), [
    (401, b"", True),
    (401, b'{"type":"error","error":{"type":"authentication_error"}}', True),
    (403, b'{"type":"error","error":{"type":"authentication_error","message":"x"}}', True),
    (403, b'{"error":{"message":"bad key","code":"invalid_api_key"}}', True),
    (403, b'{"type":"error","error":{"type":"permission_error"}}', False),
    (403, b'not json', False),
    (429, b'{"error":{"type":"authentication_error"}}', False),
    (200, b"{}", False),
])  # fmt: skip
def test_a_refused_login_is_a_401_or_a_403_authentication_error(
    status: int, body: bytes, refused: bool
) -> None:
    assert _read(body, 2, status=status, ctype="application/json").login_refused is refused


def test_the_meter_counts_requests_and_stops_at_a_bound_with_earlier_spending() -> None:
    ticket = Bound("ticket", requests=3, tokens=None, spent=Spend(requests=1))
    meter = Meter(bounds=(ticket, Bound("goal", requests=None, tokens=50, spent=Spend(tokens=40))))
    assert meter.admit("anthropic", "/v1/messages") is None
    assert meter.admit("anthropic", "/v1/messages/count_tokens") is None  # costs nothing
    meter.answered("anthropic", _read(_anthropic_stream(6, 0, [3]), 9))  # 40 + 9 < 50
    assert meter.admit("openai", "/v1/responses") is None  # the ticket's 3rd request
    stop = meter.admit("anthropic", "/v1/messages")
    assert stop is not None and (stop.scope, stop.measure, stop.spent, stop.limit) == (
        "ticket", "requests", 3, 3)  # fmt: skip
    assert stop.reason.startswith("budget spent: the ticket used 3 of 3 requests")
    assert meter.snapshot() == (Spend(requests=2, tokens=9), stop)


def test_tokens_past_the_bound_stop_the_next_request() -> None:
    meter = Meter(bounds=(Bound("goal", requests=None, tokens=10),))
    assert meter.admit("anthropic", "/v1/messages") is None
    meter.answered("anthropic", _read(_anthropic_stream(8, 0, [4]), 100))
    stop = meter.admit("anthropic", "/v1/messages")
    assert stop is not None and (stop.scope, stop.measure, stop.spent) == ("goal", "tokens", 12)


def test_a_refused_login_stops_that_provider_once_and_says_how_to_fix_it() -> None:
    meter = Meter()
    stop = meter.answered("anthropic", _read(b"", 1, status=401, ctype="application/json"))
    assert stop is not None and stop.event == "login"
    assert stop.reason == (
        "the anthropic API key was refused (401): replace it in "
        "$OMS_HOME/providers/anthropic or ANTHROPIC_API_KEY, then resume"
    )
    again = meter.admit("anthropic", "/v1/messages")
    assert again is not None and again.event == "login"  # not sent with the same key again
    assert meter.admit("openai", "/v1/responses") is None
    assert meter.snapshot()[1] == stop
