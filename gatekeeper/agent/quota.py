"""A provider's usage-limit answer, as the egress broker of a run sees it.

An `api` egress run's broker relays every provider response, so it is the one reliable
place to observe a quota: a 429 (Anthropic and OpenAI, `rate_limit_error` /
`insufficient_quota`) or Anthropic's 529, with its reset from the response headers:
`retry-after` (seconds or an HTTP date), else `anthropic-ratelimit-*-reset` (RFC 3339) or
OpenAI's `x-ratelimit-reset-*` (a duration such as `6m0s`), preferring the limits whose
`…-remaining` is 0, the latest of them. No header: `DEFAULT_WAIT_S`. The body is never read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

QUOTA_STATUS: Mapping[str, tuple[int, ...]] = {"anthropic": (429, 529), "openai": (429,)}
DEFAULT_WAIT_S = 60
MAX_WAIT_S = 7 * 86_400  # a reset further off than a week is taken as a week
_DURATION = re.compile(r"(\d{1,9}(?:\.\d{1,9})?)(ms|h|m|s)")
_ANTHROPIC = re.compile(r"^anthropic-ratelimit-([a-z-]{1,40})-reset$")
_OPENAI = re.compile(r"^x-ratelimit-reset-([a-z-]{1,40})$")


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(text: str) -> float | None:
    """`6m0s`, `1s`, `20ms`, `1h2m3.5s` → seconds; None for anything else."""
    text = text.strip()
    if not text or len(text) > 40 or _DURATION.sub("", text):
        return None
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * scale[u] for n, u in _DURATION.findall(text))


def _retry_after(text: str, now: float) -> float | None:
    text = text.strip()
    if text.isdigit() and len(text) <= 9:
        return now + int(text)
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _rfc3339(text: str) -> float | None:
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return when.timestamp() if when.tzinfo is not None else None


def reset_of(headers: Mapping[str, str], now: float) -> tuple[float, str]:
    """When the limit resets (epoch seconds, within [now + 1, now + MAX_WAIT_S]) and the
    header that said so (`default` when none did)."""
    h = {k.lower(): v for k, v in headers.items()}
    found: tuple[float, str] | None = None
    if "retry-after" in h and (at := _retry_after(h["retry-after"], now)) is not None:
        found = (at, "retry-after")
    else:
        exhausted: list[tuple[float, str]] = []
        other: list[tuple[float, str]] = []
        for k, v in h.items():
            if m := _ANTHROPIC.fullmatch(k):
                at, left = _rfc3339(v), h.get(f"anthropic-ratelimit-{m[1]}-remaining")
            elif m := _OPENAI.fullmatch(k):
                d = _duration(v)
                at, left = (None if d is None else now + d), h.get(f"x-ratelimit-remaining-{m[1]}")
            else:
                continue
            if at is not None:
                (exhausted if (left or "").strip() == "0" else other).append((at, k))
        if exhausted or other:
            found = max(exhausted or other)
    if found is None:
        return now + DEFAULT_WAIT_S, "default"
    at, source = found
    return min(max(at, now + 1), now + MAX_WAIT_S), source


def quota_seen(provider: str | None, status: int, headers: Mapping[str, str],
               now: float) -> dict[str, Any] | None:  # fmt: skip
    """The quota observation of one provider response, or None when it is not one (the
    shape `gatekeeper.work.events.hooks.QuotaObservation` validates outside)."""
    if provider is None or status not in QUOTA_STATUS.get(provider, ()):
        return None
    at, source = reset_of(headers, now)
    return {"event": "quota", "provider": provider, "status": status, "reset": iso(at),
            "source": source, "observed": iso(now)}  # fmt: skip
