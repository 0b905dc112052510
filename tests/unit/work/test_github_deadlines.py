"""The GitHub client's deadlines: each answer, and every answer of one sync, end by a time.

A read timeout bounds the silence between two bytes, not an answer: a server that drips one
byte at a time never trips it. Here a loopback `DripServer` (tests/support/github_server.py)
drips the status line and headers, or the body, for at most 30 s, then closes; the test
stops it on exit. Without a deadline on the whole answer, the client reads until the drip
ends (`outlasted`), so each test fails rather than hangs.
"""

from __future__ import annotations

import time

import pytest
from support.github_server import DripServer

from gatekeeper.work.github import GitHub, TooSlow


@pytest.fixture(autouse=True)
def no_env_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.mark.parametrize("where", ["headers", "body"])
def test_an_answer_that_drips_is_cut_at_its_deadline(where: str) -> None:
    with DripServer(where) as drip, GitHub(drip.url, answer_s=1) as client:
        with pytest.raises(TooSlow, match=r"answer to GET /repos/o/n/issues took longer than 1 s"):
            client.get("/repos/o/n/issues")
        assert drip.connections == 1 and drip.outlasted == 0


def test_a_dripping_proxy_the_environment_names_is_cut_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client reaches an env-named proxy through the same deadline (httpx's own proxy
    transport would bound no answer)."""
    with DripServer("headers") as drip:
        monkeypatch.setenv("http_proxy", drip.url)
        with GitHub("http://api.github.test", answer_s=1) as client:
            with pytest.raises(TooSlow, match="took longer than 1 s"):
                client.get("/repos/o/n/issues")
        assert drip.connections == 1  # the proxy was asked, not api.github.test
        assert drip.outlasted == 0


@pytest.mark.parametrize(("until_in", "connections"), [
    (1.0, 1),  # the sync's end comes before the answer's: the answer is cut there
    (0.0, 0),  # the sync's end has passed: nothing is sent
])  # fmt: skip
def test_every_answer_ends_by_the_syncs_deadline(until_in: float, connections: int) -> None:
    with DripServer("body") as drip:
        until = time.monotonic() + until_in
        with GitHub(drip.url, answer_s=60, until=until) as client:
            with pytest.raises(TooSlow, match="sync ran past its deadline at GET /repos/o/n"):
                client.get("/repos/o/n/issues")
        assert drip.connections == connections and drip.outlasted == 0
