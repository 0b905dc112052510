"""What the broker accepts and answers on the wire: its routes, the headers and query
parameters it forwards (and the digest of what it sends), its error bodies, and the
socket only the agent may connect to.

The upstream request is built only from what the broker scanned and records (issue 29):
header names and query keys come from exact allow-lists, never prefixes (a name is not
scanned, and a secret may be one); everything else is dropped and recorded as a count
and a SHA-256, never as text."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from gatekeeper.agent.egress_config import Provider
from gatekeeper.agent.egress_scan import Inspection
from gatekeeper.agent.payloads import EgressFinding

ROUTES: Mapping[str, Provider] = {
    "/v1/messages": "anthropic",
    "/v1/messages/count_tokens": "anthropic",
    "/v1/responses": "openai",
}
# Exactly the names Claude Code 2.1.197 and Codex 0.171.0 send that a provider reads,
# taken from their requests to the loopback fakes (tests/e2e/test_agent_clis.py); their
# session and telemetry headers (x-app, x-claude-code-session-id, originator, session-id,
# thread-id, x-codex-*, x-client-request-id) are dropped, as is any other name.
FORWARDED_HEADERS = frozenset([
    "accept", "content-type", "user-agent", "anthropic-version", "anthropic-beta",
    "openai-beta", "x-stainless-arch", "x-stainless-lang", "x-stainless-os",
    "x-stainless-package-version", "x-stainless-retry-count", "x-stainless-runtime",
    "x-stainless-runtime-version", "x-stainless-timeout",
])  # fmt: skip
# Claude Code posts to /v1/messages?beta=true; Codex sends no query.
QUERY_KEYS: Mapping[Provider, frozenset[str]] = {
    "anthropic": frozenset(["beta"]),
    "openai": frozenset(),
}
KEY_HEADERS: Mapping[Provider, str] = {"anthropic": "x-api-key", "openai": "authorization"}
HOP_BY_HOP = frozenset(
    ["connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
     "trailers", "transfer-encoding", "upgrade"]
)  # fmt: skip
MAX_BODY_BYTES = 64 << 20  # a conversation with images; the scan cache keeps re-sends cheap
MAX_PATH_CHARS = 512


@dataclass(frozen=True)
class Seen:
    """What the broker saw of a request: what its record names (agent-chosen text bounded)."""

    method: str
    path: str
    provider: Provider | None
    bytes_in: int
    dropped: int = 0  # headers and query parameters not forwarded
    sha256_dropped: str | None = None

    @classmethod
    def of(
        cls, request: web.Request, path: str, provider: Provider | None, body: bytes | BodyRefused
    ) -> Seen:
        size = len(body) if isinstance(body, bytes) else 0
        return cls(request.method[:16], path[:MAX_PATH_CHARS], provider, size)


@dataclass(frozen=True)
class BodyRefused:
    """Why a request's body was not read: the answer (and record) the broker gives."""

    status: int
    code: str
    message: str


async def read_body(request: web.Request) -> bytes | BodyRefused:
    """The body as sent. A compressed body is refused before it is read (aiohttp would
    inflate some encodings and choke on others; neither is what the agent sent)."""
    if request.headers.get("Content-Encoding", "identity").strip().lower() not in ("", "identity"):
        return BodyRefused(415, "encoded", "oms cannot scan a compressed request body")
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        return BodyRefused(413, "too_large", f"the request body is over {MAX_BODY_BYTES >> 20} MB")
    except web.RequestPayloadError:
        return BodyRefused(400, "bad_body", "the request body could not be read")


@dataclass(frozen=True)
class Kept:
    """A request's headers and query parameters the broker may forward (once scanned), and
    the count and SHA-256 of the ones it drops."""

    headers: tuple[tuple[str, str], ...]
    query: tuple[tuple[str, str], ...]
    dropped: int
    sha256_dropped: str | None

    @classmethod
    def of(cls, request: web.Request, provider: Provider) -> Kept:
        headers = [(k, v) for k, v in request.headers.items() if _header_kept(k, v)]
        query = [(k, v) for k, v in request.rel_url.query.items()
                 if k in QUERY_KEYS[provider] and _plain(v)]  # fmt: skip
        dropped = [["header", k, v] for k, v in request.headers.items() if not _header_kept(k, v)]
        dropped += [["query", k, v] for k, v in request.rel_url.query.items()
                    if (k, v) not in query]  # fmt: skip
        digest = hashlib.sha256(_canonical(dropped)).hexdigest() if dropped else None
        return cls(tuple(headers), tuple(query), len(dropped), digest)


def _header_kept(name: str, value: str) -> bool:
    return name.lower() in FORWARDED_HEADERS and _plain(value)


def _plain(value: str) -> bool:
    """Printable ASCII (a header or query value a client sends): anything else is dropped."""
    return value.isascii() and value.isprintable()


def _canonical(doc: object) -> bytes:
    """Sorted keys, no spaces, ASCII escapes (any string, even a lone surrogate, fits)."""
    return json.dumps(doc, ensure_ascii=True, sort_keys=True, separators=(",", ":")).encode()


def upstream_headers(
    provider: Provider, key: str, kept: Sequence[tuple[str, str]], length: int, url: URL
) -> CIMultiDict[str]:
    """Every header the upstream request carries: the agent's allow-listed ones (scanned),
    Host, oms' own, and oms' key in the provider's own header."""
    headers: CIMultiDict[str] = CIMultiDict(kept)
    headers["Host"] = url.raw_authority
    headers["Accept-Encoding"] = "identity"  # the response passes through byte for byte
    headers["Content-Length"] = str(length)
    headers[KEY_HEADERS[provider]] = key if provider == "anthropic" else f"Bearer {key}"
    return headers


def sent_digest(
    method: str, url: URL, headers: CIMultiDict[str], provider: Provider, body: bytes
) -> str:
    """SHA-256 over the canonical form of everything the upstream request carries: method,
    path, query, headers (names lower-cased, sorted by name, less the injected key), body."""
    doc = {
        "method": method,
        "path": url.path,
        "query": [[k, v] for k, v in url.query.items()],
        "headers": sorted([[k.lower(), v] for k, v in headers.items()
                           if k.lower() != KEY_HEADERS[provider]], key=lambda h: h[0]),
        "body_sha256": hashlib.sha256(body).hexdigest(),
    }  # fmt: skip
    return hashlib.sha256(_canonical(doc)).hexdigest()


def recorded_path(route: str, url: URL) -> str:
    """The route with the query as sent (allow-listed, scanned and redacted), bounded."""
    query = url.raw_query_string
    return (route + ("?" + query if query else ""))[:MAX_PATH_CHARS]


def egress_findings(ins: Inspection) -> tuple[EgressFinding, ...]:
    unique = dict.fromkeys((f.rule, f.fingerprint, f.scanner) for f in ins.findings)
    return tuple(EgressFinding(rule=r, fingerprint=fp, scanner=s) for r, fp, s in unique)


def only_models() -> str:
    return "oms forwards only POST " + ", ".join(ROUTES) + " to the provider"


def error(status: int, code: str, message: str) -> web.Response:
    """An error both provider SDKs show: Anthropic's {type, error{type, message}} shape,
    which also carries the {error{message, code}} that OpenAI clients read."""
    body = {"type": "error", "error": {"type": f"oms_{code}", "code": f"oms_{code}",
                                       "message": message}}  # fmt: skip
    return web.json_response(body, status=status)


def not_recorded() -> web.Response:
    return error(500, "not_recorded",
                  "oms could not record this request as evidence, so it was not sent")  # fmt: skip
