"""What a worker's model traffic spends, as its egress broker counts it, and when it stops.

The broker of an `api` run counts each model request it forwards (`POST /v1/messages`,
`/v1/responses`; `count_tokens` costs nothing) and the usage the provider reports in each
answer, read from the bytes as they pass and never buffered whole: Anthropic's
`message_start` / `message_delta` `usage` and OpenAI's `response.completed` (or
`.incomplete`, `.failed`) `response.usage` in a stream, a JSON answer's top-level `usage`.
Tokens are input (cache reads and writes included) plus output, each key's latest value.

A `Bound` is a budget of the policy (`[conductor.budget]`, per ticket or per goal) with
what earlier runs spent, numbers the worker path outside passes in (this layer knows no
ticket or goal). Once a bound is reached the broker refuses further model requests; a
provider's 401 (or 403 `authentication_error`) is a refused login. Either is one `Parked`
fact, which the run's quota watch publishes outside (`gatekeeper.agent.observe`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gatekeeper.agent.egress_config import KEY_ENV, Provider

Scope = Literal["ticket", "goal"]
Measure = Literal["requests", "tokens"]
GENERATION = frozenset({"/v1/messages", "/v1/responses"})
USAGE_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
              "output_tokens")  # fmt: skip
# The stream events that carry usage; every other event's data is skipped unread.
USAGE_EVENTS = frozenset({"message_start", "message_delta", "response.completed",
                          "response.incomplete", "response.failed"})  # fmt: skip
MAX_EVENT_BYTES = 4 << 20  # one usage event (OpenAI's repeats the whole response)
MAX_JSON_BYTES = 4 << 20  # a JSON (not streamed) answer
MAX_ERROR_BYTES = 4 << 10  # what of a 403 is read for its error type
AUTH_ERRORS = frozenset({"authentication_error", "invalid_api_key"})
MAX_COUNT = 10**15


@dataclass(frozen=True)
class Spend:
    requests: int = 0
    tokens: int = 0

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.requests + other.requests, self.tokens + other.tokens)


@dataclass(frozen=True)
class Bound:
    """One budget: at most `requests` model requests and `tokens` tokens (None: no bound)
    for the ticket or goal, of which earlier runs spent `spent`."""

    scope: Scope
    requests: int | None
    tokens: int | None
    spent: Spend = Spend()

    def reached(self, now: Spend) -> tuple[Measure, int, int] | None:
        """The measure spent (with what was used and its limit), or None."""
        total = self.spent + now
        if self.requests is not None and total.requests >= self.requests:
            return "requests", total.requests, self.requests
        if self.tokens is not None and total.tokens >= self.tokens:
            return "tokens", total.tokens, self.tokens
        return None


def budget_reason(scope: str, measure: str, spent: int, limit: int) -> str:
    return (
        f"budget spent: the {scope} used {spent} of {limit} {measure}; raise "
        f"[conductor.budget] {scope}_{measure} in the trusted policy, then resume"
    )


def login_reason(provider: Provider, status: int) -> str:
    return (f"the {provider} API key was refused ({status}): replace it in "
            f"$OMS_HOME/providers/{provider} or {KEY_ENV[provider]}, then resume")  # fmt: skip


@dataclass(frozen=True)
class Parked:
    """Why the broker stopped a worker's model traffic: its budget or a refused login."""

    event: Literal["budget", "login"]
    provider: Provider | None
    status: int
    scope: Scope | None = None
    measure: Measure | None = None
    spent: int | None = None
    limit: int | None = None

    @property
    def reason(self) -> str:
        if self.event == "login":
            assert self.provider is not None  # nosec B101 (a login is a provider's)
            return login_reason(self.provider, self.status)
        assert self.scope and self.measure and self.spent is not None and self.limit  # nosec B101
        return budget_reason(self.scope, self.measure, self.spent, self.limit)

    def observation(self, observed: str) -> dict[str, Any]:
        """The shape `gatekeeper.work.events.hooks.ParkObservation` validates outside."""
        doc = {"event": self.event, "provider": self.provider, "status": self.status,
               "scope": self.scope, "measure": self.measure, "spent": self.spent,
               "limit": self.limit, "observed": observed}  # fmt: skip
        return {k: v for k, v in doc.items() if v is not None}


class UsageReader:
    """One answer's usage (and, for a 401/403, whether it refused the login), fed its bytes
    as they pass. Bounded: an event or body over its limit is skipped, never held."""

    def __init__(self, status: int, content_type: str) -> None:
        self.status = status
        self.stream = content_type.split(";", 1)[0].strip().lower() == "text/event-stream"
        self.usage: dict[str, int] = {}
        self._line = bytearray()
        self._skip_line = False
        self._event = ""
        self._data = bytearray()
        self._body = bytearray()
        self._body_over = False

    def feed(self, chunk: bytes) -> None:
        if not self.stream:
            room = (MAX_ERROR_BYTES if self.status >= 400 else MAX_JSON_BYTES) - len(self._body)
            self._body_over = self._body_over or len(chunk) > room
            if not self._body_over:
                self._body += chunk
            return
        while chunk:
            cut = chunk.find(b"\n")
            part, chunk = (chunk, b"") if cut < 0 else (chunk[:cut], chunk[cut + 1 :])
            if not self._skip_line:
                self._line += part
                if len(self._line) > MAX_EVENT_BYTES + 64:
                    self._line.clear()
                    self._skip_line = True
            if cut >= 0:
                if not self._skip_line:
                    self._field(bytes(self._line).rstrip(b"\r"))
                self._line.clear()
                self._skip_line = False

    def _field(self, line: bytes) -> None:
        if not line:  # the end of an event
            if self._data and self._event in USAGE_EVENTS:
                self._read(bytes(self._data))
            self._event, self._data = "", bytearray()
        elif line.startswith(b"event:"):
            self._event = line[6:].strip().decode("ascii", "replace")
        elif line.startswith(b"data:") and self._event in USAGE_EVENTS:
            if len(self._data) + len(line) <= MAX_EVENT_BYTES:
                self._data += (b"\n" if self._data else b"") + line[5:].lstrip(b" ")

    def _read(self, data: bytes) -> None:
        doc = _json(data)
        for holder in (doc, doc.get("message"), doc.get("response")):
            if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
                self._use(holder["usage"])

    def _use(self, usage: Mapping[str, Any]) -> None:
        for key in USAGE_KEYS:
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
                self.usage[key] = value  # cumulative: the latest value is the answer's

    def close(self) -> None:
        if self.stream:
            self._field(bytes(self._line).rstrip(b"\r") if not self._skip_line else b"")
            self._field(b"")
        elif not self._body_over and self.status < 400:
            doc = _json(bytes(self._body))
            if isinstance(doc.get("usage"), dict):
                self._use(doc["usage"])

    @property
    def tokens(self) -> int:
        return sum(self.usage.values())

    @property
    def login_refused(self) -> bool:
        """A 401, or a 403 whose error type (or code) says the key was not accepted."""
        if self.status == 401:
            return True
        if self.status != 403 or self._body_over:
            return False
        err = _json(bytes(self._body)).get("error")
        return isinstance(err, dict) and (err.get("type") in AUTH_ERRORS
                                          or err.get("code") in AUTH_ERRORS)  # fmt: skip


def _json(data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


@dataclass(eq=False)
class Meter:
    """A run's spending: what its broker forwarded and the provider reported, the bounds it
    may not pass, and the first reason it stopped (thread-safe: read from oms' main thread)."""

    bounds: Sequence[Bound] = ()
    spent: Spend = Spend()
    parked: Parked | None = None
    refused_logins: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, provider: Provider, route: str) -> Parked | None:
        """None, and the request counted, when it may go; else why it may not."""
        with self._lock:
            if provider in self.refused_logins:
                return Parked("login", provider, 401)
            if route not in GENERATION:
                return None
            for bound in self.bounds:
                if (why := bound.reached(self.spent)) is not None:
                    stopped = Parked("budget", provider, 403, bound.scope, *why)
                    self.parked = self.parked or stopped
                    return stopped
            self.spent += Spend(requests=1)
            return None

    def answered(self, provider: Provider, reader: UsageReader) -> Parked | None:
        """Count an answer's usage; a refused login, the first time it is seen."""
        with self._lock:
            self.spent += Spend(tokens=reader.tokens)
            if not reader.login_refused or provider in self.refused_logins:
                return None
            self.refused_logins.add(provider)
            stopped = Parked("login", provider, reader.status)
            self.parked = self.parked or stopped
            return stopped

    def snapshot(self) -> tuple[Spend, Parked | None]:
        with self._lock:
            return self.spent, self.parked
