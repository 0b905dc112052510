"""A GitHub-shaped REST server on loopback, for tests and benchmarks.

GitHub itself cannot be reached here, so this stands in for it: a pytest-httpserver (or any
`pytest_httpserver.HTTPServer`) answering like GitHub's REST API does for the listings oms
reads. The API is small:

    gh = GitHubServer(httpserver)          # installs one catch-all handler
    gh.url                                 # the API root, for `OMS_GITHUB_API_URL`/api_url
    gh.pages["/repos/o/n/issues"] = [[...items of page 1...], [...page 2...]]
    gh.fail["/repos/o/n/issues"] = (2, 503, {})   # page 2 answers 503 (headers optional)
    gh.next_origin = "http://127.0.0.2:1"  # Link rel="next" points at another origin
    gh.rate = (4999, 1_900_000_000)        # x-ratelimit-remaining / -reset on every answer
    gh.etags = False                       # ignore If-None-Match (always 200, as a cache miss)
    gh.requests                            # [(path, page, if_none_match, authorization)]
    gh.stall["/repos/o/n/issues"] = 3      # page 3 sets gh.stalled, then waits for
                                           # gh.release (at most 30 s) before answering

`Flaky(handler)` wraps any handler (this server's, or a test's own) to answer GitHub's 5xx
a number of times for one method and path: before the request reaches the handler, or
after it (`lost=True`: the request took effect, its answer was lost on the way back):

    flaky = Flaky(handler); flaky.fail[("POST", "/repos/o/n/pulls")] = (2, 502)

A path with no pages answers `[]`. Each page has an ETag (a digest of its JSON); a request
whose `If-None-Match` equals it gets a 304 with no body. Pages after the first are linked
with `Link: <root/path?QUERY&page=N>; rel="next"` (the request's query kept), as GitHub
does.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from typing import Any
from urllib.parse import urlencode

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response


class GitHubServer:
    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.url = server.url_for("/").rstrip("/")
        self.pages: dict[str, list[Any]] = {}
        self.fail: dict[str, tuple[int, int, dict[str, str]]] = {}
        self.next_origin: str | None = None
        self.rate: tuple[int, int] = (4999, 1_900_000_000)
        self.etags = True
        self.requests: list[tuple[str, int, str | None, str | None]] = []
        self.stall: dict[str, int] = {}
        self.stalled, self.release = threading.Event(), threading.Event()
        server.expect_request(re.compile("^/")).respond_with_handler(self._answer)

    def etag(self, path: str, page: int = 1) -> str:
        body = json.dumps(self._page(path, page), sort_keys=True)
        return '"' + hashlib.sha256(body.encode()).hexdigest()[:20] + '"'

    def _page(self, path: str, page: int) -> Any:
        pages = self.pages.get(path) or [[]]
        return pages[page - 1] if 1 <= page <= len(pages) else []

    def _answer(self, request: Request) -> Response:
        path = request.path
        page = int(request.args.get("page", "1"))
        self.requests.append((path, page, request.headers.get("If-None-Match"),
                              request.headers.get("Authorization")))  # fmt: skip
        headers = {"x-ratelimit-remaining": str(self.rate[0]),
                   "x-ratelimit-reset": str(self.rate[1])}  # fmt: skip
        if self.stall.get(path) == page:
            self.stalled.set()
            self.release.wait(30)
        failing = self.fail.get(path)
        if failing is not None and failing[0] == page:
            return Response(json.dumps({"message": "failure"}), failing[1],
                            {**headers, **failing[2]}, content_type="application/json")  # fmt: skip
        etag = self.etag(path, page)
        headers["etag"] = etag
        if self.etags and request.headers.get("If-None-Match") == etag:
            return Response(b"", 304, headers)
        if page < len(self.pages.get(path) or [[]]):
            root = self.next_origin or self.url
            query = urlencode({**request.args.to_dict(), "page": page + 1})
            headers["link"] = f'<{root}{path}?{query}>; rel="next"'
        return Response(json.dumps(self._page(path, page)), 200, headers,
                        content_type="application/json")  # fmt: skip


class Flaky:
    """`handler`, except that `fail[(method, path)] = (times, code)` answers `code` that many
    times first; with `lost` the handler runs before each such answer."""

    def __init__(self, handler: Any, lost: bool = False) -> None:
        self.handler, self.lost = handler, lost
        self.fail: dict[tuple[str, str], tuple[int, int]] = {}
        self.failed = 0

    def __call__(self, request: Request) -> Response:
        key = (request.method, request.path)
        times, code = self.fail.get(key, (0, 0))
        if times <= 0:
            return self.handler(request)
        self.fail[key] = (times - 1, code)
        self.failed += 1
        if self.lost:
            self.handler(request)
        return Response(json.dumps({"message": "Server Error"}), code,
                        content_type="application/json")  # fmt: skip


def issue(number: int, updated: str, labels: tuple[str, ...] = (), state: str = "open",
          title: str = "An issue", body: str = "Its text.") -> dict[str, Any]:  # fmt: skip
    """One item of `/issues` as GitHub shapes it (the fields oms reads, and its text)."""
    return {"id": 1000 + number, "number": number, "state": state, "title": title,
            "body": body, "labels": [{"name": n} for n in labels], "comments": 0,
            "updated_at": updated}  # fmt: skip


def label_event(eid: int, number: int, label: str, added: bool, at: str) -> dict[str, Any]:
    """One item of `/issues/events`: a label added (`labeled`) or removed (`unlabeled`)."""
    return {"id": eid, "event": "labeled" if added else "unlabeled", "label": {"name": label},
            "issue": {"number": number}, "created_at": at}  # fmt: skip


class DripServer:
    """A loopback server that answers every connection one byte at a time, `every` seconds
    apart, for at most `for_s` seconds (then it closes): the slow-drip GitHub. `where` is
    what drips: `"headers"` (a header line that never ends) or `"body"` (complete
    headers, then a JSON body that never ends). Use as a context manager: it stops on exit.
    `connections` counts the connections it accepted; `outlasted` those it dripped into
    until `for_s` ran out (a client that cuts the answer at its deadline leaves it at 0)."""

    def __init__(self, where: str = "body", every: float = 0.2, for_s: float = 30.0) -> None:
        import socket
        import threading

        self.where, self.every, self.for_s = where, every, for_s
        self.connections = self.outlasted = 0
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._threads = [threading.Thread(target=self._accept, daemon=True)]

    def __enter__(self) -> DripServer:
        self._threads[0].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in list(self._threads):
            t.join(timeout=5)
        self._sock.close()

    def _accept(self) -> None:
        import threading

        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            t = threading.Thread(target=self._drip, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _drip(self, conn: Any) -> None:
        import time

        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99999\r\n\r\n"
        with conn:
            conn.recv(65536)  # the request (its head is all a GET has)
            if self.where == "body":
                conn.sendall(head)
            endless = b"HTTP/1.1 200 OK\r\nX-Drip: " if self.where == "headers" else b"["
            data = endless + b" " * 99990  # never complete within `for_s`
            end = time.monotonic() + self.for_s
            for i in range(len(data)):
                if self._stop.wait(self.every):
                    return
                if time.monotonic() > end:
                    self.outlasted += 1
                    return
                try:
                    conn.sendall(data[i : i + 1])
                except OSError:
                    return  # the client cut the answer
