"""GitHub's REST API over httpx: conditional GETs, pagination, rate limits, a token never shown.

The API root is `https://api.github.com`, or `$OMS_GITHUB_API_URL` (tests point it at a
loopback server: GitHub itself is not reachable there). The token comes from
`$GITHUB_TOKEN`, `$GH_TOKEN`, the owner-only file `$OMS_HOME/github/token` (what a scheduled
job, which has no login environment, reads), or `gh auth token`; it is sent only to that
root, never logged, never put in argv or evidence. A `Link: rel="next"` outside the root
is not followed. A 5xx, a network failure or a rate limit raises (exit 4): a sync that
raises advances no watermark, so the next one starts where this one did. Such a failure
that asking again may cure (a 5xx, a reset connection) is `Transient`; a caller that wants
it (delivery) wraps a step in `gatekeeper.retry.retried`, a bounded number of tries with
backoff.

Time is bounded twice: each answer (connect to last byte) by `answer_s`, and every answer
of one client by `until` (a `time.monotonic()` instant: the sync's deadline). Both are
deadlines on the whole answer (`http_deadline`), so a server that drips one byte every few
seconds is cut, in its headers as in its body.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from evidence import state_root
from gatekeeper.agent.egress_config import key_file
from gatekeeper.errors import Unavailable, UsageError
from gatekeeper.work.http_deadline import Deadline, DeadlineTransport, proxy_for

API_ENV = "OMS_GITHUB_API_URL"
DEFAULT_API = "https://api.github.com"
TIMEOUT_S = 30.0  # each socket operation (connect, one read, one write)
ANSWER_S = 60.0  # one whole answer, first byte sent to last byte read
MAX_BODY_BYTES = 32 << 20  # one answer (a page of 100 issues is a few MB at most)
USER_AGENT = "oms"
_LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="next"')
REPO_RE = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")


class GitHubUnavailable(Unavailable):
    """GitHub answered with a server error, could not be reached, or refused the token."""


class Transient(GitHubUnavailable):
    """A 5xx answer or a connection that failed: asking again may well succeed."""


class TooSlow(GitHubUnavailable):
    """An answer, or the whole sync, ran past its deadline; the request was cut."""


class RateLimited(GitHubUnavailable):
    """GitHub's rate limit is spent; `reset` is when it refills (epoch seconds), if said."""

    def __init__(self, message: str, reset: int | None = None) -> None:
        super().__init__(message, data={"rate": {"remaining": 0, "reset": reset}})
        self.reset = reset


def checked_repo(name: str) -> str:
    if not isinstance(name, str) or not REPO_RE.fullmatch(name) or ".." in name:
        raise UsageError(f"not a GitHub repository (OWNER/NAME): {str(name)[:80]!r}")
    return name


def token_file(env: Mapping[str, str] | None = None) -> Path:
    return state_root(env) / "github" / "token"


def token_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """`$GITHUB_TOKEN`, `$GH_TOKEN`, else the token file (ConfigError, exit 2, when it is a
    symlink or readable by group or others), else `gh auth token` when gh is installed;
    None."""
    env = os.environ if env is None else env
    for name in ("GITHUB_TOKEN", "GH_TOKEN"):
        if env.get(name):
            return env[name].strip()
    if (held := key_file(token_file(env))) is not None:
        return held
    gh = shutil.which("gh")
    if gh is None:
        return None
    try:
        proc = subprocess.run([gh, "auth", "token"], capture_output=True, text=True,
                              timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    got = proc.stdout.strip()
    return got if proc.returncode == 0 and got and got.isprintable() else None


@dataclass(frozen=True)
class Page:
    status: int  # 200, or 304 (not modified: `data` is None)
    etag: str | None
    data: Any
    next_url: str | None
    remaining: int | None  # x-ratelimit-remaining
    reset: int | None = None  # x-ratelimit-reset (epoch seconds)


class GitHub:
    """One client for one API root. Use as a context manager, or `close()`."""

    def __init__(self, api_url: str | None = None, token: str | None = None,
                 transport: httpx.BaseTransport | None = None, answer_s: float = ANSWER_S,
                 until: float | None = None) -> None:  # fmt: skip
        root = (api_url or os.environ.get(API_ENV) or DEFAULT_API).rstrip("/")
        parts = urlsplit(root)
        if parts.scheme not in ("https", "http") or not parts.netloc:
            raise UsageError(f"not a GitHub API URL: {root[:80]!r}")
        self.root = root
        self._origin = (parts.scheme, parts.netloc)
        headers = {"Accept": "application/vnd.github+json", "User-Agent": USER_AGENT,
                   "X-GitHub-Api-Version": "2022-11-28"}  # fmt: skip
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.answer_s, self.until = answer_s, until
        self._deadline = Deadline()
        if transport is None:
            transport = DeadlineTransport(self._deadline, proxy_for(root))
        # trust_env off: the proxy the environment names is the transport's, under deadline.
        self._http = httpx.Client(base_url=root, headers=headers, timeout=TIMEOUT_S,
                                  transport=transport, follow_redirects=False,
                                  trust_env=False)  # fmt: skip

    def __enter__(self) -> GitHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def url(self, path_or_url: str) -> str:
        """A path under the root, or a full URL that must be under it (a `next` link)."""
        if path_or_url.startswith("/"):
            return self.root + path_or_url
        parts = urlsplit(path_or_url)
        if (parts.scheme, parts.netloc) != self._origin or not path_or_url.startswith(self.root):
            raise GitHubUnavailable("GitHub sent a link outside its API root; not followed")
        return path_or_url

    def get(self, path_or_url: str, etag: str | None = None,
            params: Mapping[str, str | int] | None = None) -> Page:  # fmt: skip
        headers = {"If-None-Match": etag} if etag else {}
        resp = self._send("GET", self.url(path_or_url), headers=headers, params=params)
        remaining = _int(resp.headers.get("x-ratelimit-remaining"))
        reset = _int(resp.headers.get("x-ratelimit-reset"))
        if resp.status_code == 304:
            return Page(304, etag, None, None, remaining, reset)
        m = _LINK_NEXT.search(resp.headers.get("link", ""))
        return Page(resp.status_code, resp.headers.get("etag"), _json(resp),
                    m.group(1) if m else None, remaining, reset)  # fmt: skip

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        return _json(self._send("POST", self.url(path), json=dict(body)))

    def _send(self, method: str, url: str, **kw: Any) -> httpx.Response:
        what = f"{method} {urlsplit(url).path}"
        by_sync = self._arm(what)
        try:
            with self._http.stream(method, url, **kw) as streamed:
                body = bytearray()
                for chunk in streamed.iter_bytes():
                    body += chunk
                    if self._deadline.passed():  # a transport given by the caller too
                        raise self._too_slow(what, by_sync)
                    if len(body) > MAX_BODY_BYTES:
                        raise GitHubUnavailable(f"GitHub's answer to {what} is larger than "
                                                f"{MAX_BODY_BYTES >> 20} MiB")  # fmt: skip
            # The answer read whole but bounded, as a complete response to parse.
            resp = httpx.Response(streamed.status_code, headers=streamed.headers,
                                  content=bytes(body), request=streamed.request)  # fmt: skip
        except httpx.HTTPError as exc:
            if self._deadline.passed():
                raise self._too_slow(what, by_sync) from None
            # A reset or refused connection is worth asking again; a time-out is not.
            cls = Transient if isinstance(exc, (httpx.NetworkError, httpx.RemoteProtocolError)) \
                else GitHubUnavailable  # fmt: skip
            raise cls(f"GitHub {method} failed: {type(exc).__name__}") from None
        finally:
            self._deadline.at = None
        code = resp.status_code
        if code in (403, 429) and (resp.headers.get("x-ratelimit-remaining") == "0"
                                   or "retry-after" in resp.headers):  # fmt: skip
            reset = _int(resp.headers.get("x-ratelimit-reset"))
            if reset is None and (after := _int(resp.headers.get("retry-after"))) is not None:
                reset = int(time.time()) + after
            raise RateLimited(f"GitHub rate limit reached (resets at {reset})", reset)
        if code >= 500:
            raise Transient(f"GitHub answered {code} to {method} {urlsplit(url).path}")
        if code in (401, 403):
            raise GitHubUnavailable(f"GitHub refused the token ({code})")
        if not (200 <= code < 300 or code == 304):  # a 3xx too: a moved repository is not data
            raise GitHubUnavailable(f"GitHub answered {code} to {method} {urlsplit(url).path}")
        return resp

    def _arm(self, what: str) -> bool:
        """Set this answer's deadline: `answer_s` from now, or the sync's end when sooner
        (True then). Past the sync's end nothing is sent."""
        now = time.monotonic()
        at, by_sync = now + self.answer_s, False
        if self.until is not None and self.until <= at:
            at, by_sync = self.until, True
            if at <= now:
                raise self._too_slow(what, True)
        self._deadline.at = at
        return by_sync

    def _too_slow(self, what: str, by_sync: bool) -> TooSlow:
        if by_sync:
            return TooSlow(f"the GitHub sync ran past its deadline at {what}; cut")
        return TooSlow(f"GitHub's answer to {what} took longer than {self.answer_s:g} s; cut")


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _json(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        raise GitHubUnavailable("GitHub answered with something that is not JSON") from None
