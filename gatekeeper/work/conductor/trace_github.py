"""A GitHub-shaped REST server on loopback for `oms trace fixture`, standing in for GitHub.

The tracer is offline: GitHub itself is never contacted. This server answers the few REST
routes the sync and the delivery use, from one in-memory repository: its issues (one ready
issue), an empty list for every other listing, and pull requests created by `POST /pulls`,
whose head commit it reads from the bare remote the branch was pushed to. Conditional
requests work as GitHub's do: an `ETag` on every list, a 304 for a matching
`If-None-Match`. It binds 127.0.0.1 only and lives as long as the tracer.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAX_BODY = 1 << 20


class FakeGitHub:
    """`owner/name` with `issues`; `head_of(branch)` tells a pushed branch's commit."""

    def __init__(self, repo: str, head_of: Callable[[str], str | None],
                 default_branch: str = "main") -> None:  # fmt: skip
        self.repo = repo
        self.head_of = head_of
        self.default_branch = default_branch
        self.issues: list[dict[str, Any]] = []
        self.pulls: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeGitHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_issue(self, number: int, title: str, body: str, labels: list[str]) -> None:
        self.issues.append({
            "id": 1000 + number, "number": number, "title": title, "body": body,
            "state": "open", "labels": [{"name": n} for n in labels],
            "user": {"login": "trace"}, "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "html_url": f"https://github.invalid/{number}",
        })  # fmt: skip

    # -- routes ------------------------------------------------------------------------------

    def _get(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        base = f"/repos/{self.repo}"
        if path == base:
            return 200, {"full_name": self.repo, "default_branch": self.default_branch}
        if path == f"{base}/issues":
            return 200, list(self.issues)
        m = re.fullmatch(re.escape(base) + r"/pulls/(\d+)", path)
        if m:
            for pr in self.pulls:
                if pr["number"] == int(m.group(1)):
                    return 200, self._fresh(pr)
            return 404, {"message": "Not Found"}
        if path == f"{base}/pulls":
            head = query.get("head", [""])[0]
            found = [
                self._fresh(p)
                for p in self.pulls
                if not head or f"{self.repo.split('/')[0]}:{p['head']['ref']}" == head
            ]
            return 200, found
        if path.startswith(base + "/"):
            return 200, []  # every other listing: nothing there
        return 404, {"message": "Not Found"}

    def _fresh(self, pr: dict[str, Any]) -> dict[str, Any]:
        sha = self.head_of(pr["head"]["ref"])
        return {**pr, "head": {**pr["head"], "sha": sha}}

    def _post(self, path: str, body: Any) -> tuple[int, Any]:
        if path != f"/repos/{self.repo}/pulls" or not isinstance(body, dict):
            return 404, {"message": "Not Found"}
        ref = str(body.get("head", ""))
        sha = self.head_of(ref)
        if sha is None:
            return 422, {"message": "Validation Failed", "errors": [{"field": "head"}]}
        if any(p["head"]["ref"] == ref and p["state"] == "open" for p in self.pulls):
            return 422, {"message": "A pull request already exists"}
        number = 100 + len(self.pulls) + 1
        pr = {"number": number, "state": "open", "draft": bool(body.get("draft")),
              "title": str(body.get("title", ""))[:256], "body": str(body.get("body", "")),
              "head": {"ref": ref, "sha": sha}, "base": {"ref": str(body.get("base", ""))},
              "html_url": f"https://github.invalid/{self.repo}/pull/{number}"}  # fmt: skip
        self.pulls.append(pr)
        return 201, pr

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _answer(self, code: int, data: Any) -> None:
                raw = json.dumps(data).encode()
                etag = '"' + hashlib.sha256(raw).hexdigest()[:32] + '"'
                if (
                    code == 200
                    and self.command == "GET"
                    and self.headers.get("If-None-Match") == etag
                ):
                    self.send_response(304)
                    self.send_header("ETag", etag)
                    self.end_headers()
                    return
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("ETag", etag)
                self.send_header("X-RateLimit-Remaining", "4999")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                with outer.lock:
                    outer.requests.append(("GET", parts.path))
                    code, data = outer._get(parts.path, parse_qs(parts.query))
                self._answer(code, data)

            def do_POST(self) -> None:
                size = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
                try:
                    body = json.loads(self.rfile.read(size) or b"null")
                except ValueError:
                    body = None
                parts = urlsplit(self.path)
                with outer.lock:
                    outer.requests.append(("POST", parts.path))
                    code, data = outer._post(parts.path, body)
                self._answer(code, data)

        return Handler


def bare_head(bare: str, env: dict[str, str]) -> Callable[[str], str | None]:
    """What a pushed branch points at in the bare remote `bare` (oms' clean git env)."""

    def head_of(branch: str) -> str | None:
        if not branch or branch.startswith("-"):
            return None
        proc = subprocess.run(["git", "--git-dir", bare, "rev-parse", "--verify", "--quiet",
                               f"refs/heads/{branch}^{{commit}}"],
                              capture_output=True, text=True, env=env, check=False)  # fmt: skip
        return proc.stdout.strip() or None

    return head_of
