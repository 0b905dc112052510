"""What the broker accepts and answers on the wire: its routes, the headers it forwards,
its error bodies, and the socket only the agent may connect to."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from multidict import CIMultiDict

from gatekeeper.agent.egress_config import Provider
from gatekeeper.agent.egress_scan import Inspection
from gatekeeper.agent.payloads import EgressFinding
from gatekeeper.errors import Unavailable

ROUTES: Mapping[str, Provider] = {
    "/v1/messages": "anthropic",
    "/v1/messages/count_tokens": "anthropic",
    "/v1/responses": "openai",
}
FORWARDED_HEADERS = frozenset(
    ["content-type", "accept", "anthropic-version", "anthropic-beta", "openai-beta", "user-agent"]
)
FORWARDED_PREFIXES = ("x-stainless-",)
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


def forwarded(name: str) -> bool:
    low = name.lower()
    return low in FORWARDED_HEADERS or low.startswith(FORWARDED_PREFIXES)


def upstream_headers(
    provider: Provider | None, key: str, kept: Sequence[tuple[str, str]], length: int
) -> CIMultiDict[str]:
    """The agent's allow-listed headers, oms' key in the provider's own header."""
    headers: CIMultiDict[str] = CIMultiDict(kept)
    headers["Accept-Encoding"] = "identity"  # the response passes through byte for byte
    headers["Content-Length"] = str(length)
    if provider == "anthropic":
        headers["x-api-key"] = key
    else:
        headers["Authorization"] = f"Bearer {key}"
    return headers


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


def bind_socket(path: Path, uid: int | None) -> socket.socket:
    """A unix socket bound at `path` (which must not exist), mode 0600 and owned by `uid`
    before it listens: nobody else can connect, not even in between."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise Unavailable(f"cannot create the broker socket {path}: {exc.strerror}") from None
    try:
        os.chmod(path, 0o600)
        if uid is not None:
            os.chown(path, uid, -1)
    except OSError as exc:
        sock.close()
        path.unlink(missing_ok=True)
        raise Unavailable(f"cannot restrict the broker socket {path}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock
