"""The egress broker's quota watch, end to end on loopback: a provider-shaped upstream
(pytest-httpserver on 127.0.0.1; the real providers cannot be reached here, so it stands in)
answers 429 with `retry-after`; the real broker on a unix socket relays it unchanged and its
watch starts the real `python -P -m gatekeeper.work.events.hooks --quota` outside, which
records ONE `hook.quota` for the run's worker and parks its ticket by health. The same
limit again (a retry, seconds later) is not published twice; a 200 publishes nothing.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from support.conductor import recorded_worker
from support.work import initialised_work, new_ticket

from gatekeeper.agent.egress import Broker, ProviderKeys, Upstreams
from gatekeeper.agent.observe import quota_report
from gatekeeper.work.fence import Work
from policy import default_policy

RUN_ID = "20261202T150000Z-0a1b2c3d"
KEYS = ProviderKeys(anthropic="sk-ant-real-" + "a" * 20, openai="sk-openai-real-" + "o" * 20)
WAIT_S = 60  # bounds every wait; never asserted on


@pytest.fixture
def work(git_repo: Path, oms_home: Path) -> Iterator[Work]:
    with initialised_work(git_repo) as w:
        yield w


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="oms-q-", dir="/tmp"))  # a socket path fits 108 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Unix(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=WAIT_S)
        self.path = str(path)

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(WAIT_S)
        s.connect(self.path)
        self.sock = s


def post(path: Path) -> tuple[int, str | None]:
    conn = Unix(path)
    text = [{"type": "text", "text": "hi"}]
    body = {"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": text}]}
    conn.request("POST", "/v1/messages", body=json.dumps(body).encode(),
                 headers={"x-api-key": "oms-placeholder-key", "anthropic-version": "2023-06-01",
                          "Content-Type": "application/json"})  # fmt: skip
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status, resp.getheader("retry-after")


def quotas(work: Work) -> list[str]:
    return [r["body"] for r in work.db.read("SELECT body FROM events WHERE kind = 'hook.quota'")]


def test_a_429_becomes_one_quota_observation_for_the_runs_worker(
    work: Work, sock_dir: Path, httpserver: HTTPServer
) -> None:
    walk = new_ticket(work, "hits its quota").leased(ttl_s=86_400).running()
    wid = recorded_worker(work, walk)
    httpserver.expect_ordered_request("/v1/messages", method="POST").respond_with_json(
        {"type": "error", "error": {"type": "rate_limit_error"}}, status=429,
        headers={"retry-after": "3600"})  # fmt: skip
    httpserver.expect_ordered_request("/v1/messages", method="POST").respond_with_json(
        {"type": "error", "error": {"type": "rate_limit_error"}}, status=429,
        headers={"retry-after": "3602"})  # fmt: skip
    httpserver.expect_ordered_request("/v1/messages", method="POST").respond_with_json(
        {"id": "msg_1"}, status=200)  # fmt: skip
    url = httpserver.url_for("/").rstrip("/")
    watch = quota_report(repo_top=work.repo.top, run_id=RUN_ID, worker=wid,
                         python_argv=[sys.executable, "-P"])  # fmt: skip
    assert watch is not None
    b = Broker(sock_dir / "broker.sock", run_id=RUN_ID, egress="api", keys=KEYS,
               upstreams=Upstreams(url, url), on_secret="redact", loaded=default_policy(),
               canaries=(), record=lambda _: None, on_response=watch)  # fmt: skip
    b.start()
    try:
        assert post(sock_dir / "broker.sock") == (429, "3600")  # relayed unchanged
        end = time.monotonic() + WAIT_S
        while not quotas(work) or watch.tasks:
            assert time.monotonic() < end, "the quota observation was never recorded"
            time.sleep(0.1)
        assert post(sock_dir / "broker.sock")[0] == 429  # the same limit: a reset 2 s on
        assert post(sock_dir / "broker.sock")[0] == 200
        while watch.tasks:
            assert time.monotonic() < end, "a publish never ended"
            time.sleep(0.1)
    finally:
        b.stop()
    [body] = quotas(work)
    seen = json.loads(body)
    assert (seen["worker"], seen["status"], seen["source"]) == (wid, 429, "retry-after")
    t = work.ticket(walk.id)
    assert (t.state, t.health) == ("running", "parked")
    assert work.db.read("SELECT state FROM quotas WHERE worker = ?", wid)[0]["state"] == "waiting"
