"""The bounded retry delivery uses, and which of GitHub's failures count as transient.

The GitHub answers come from a loopback pytest-httpserver (GitHub itself cannot be reached
here); a closed port stands in for a connection GitHub reset."""

from __future__ import annotations

import socket

import pytest
from pytest_httpserver import HTTPServer

from gatekeeper.retry import Retry, retried
from gatekeeper.work.github import GitHub, GitHubUnavailable, Transient


def test_a_transient_failure_is_asked_again_within_the_bound_and_no_further() -> None:
    slept: list[float] = []
    calls: list[int] = []

    def flaky(fails: int) -> str:
        calls.append(1)
        if len(calls) <= fails:
            raise Transient("502")
        return "ok"

    retry = Retry(delays=(1.0, 3.0), sleep=slept.append)
    assert retried(retry, lambda: flaky(2), Transient) == "ok" and slept == [1.0, 3.0]
    calls.clear()
    slept.clear()
    with pytest.raises(Transient):
        retried(retry, lambda: flaky(3), Transient)
    assert len(calls) == 3 and slept == [1.0, 3.0]
    calls.clear()
    with pytest.raises(Transient):
        retried(None, lambda: flaky(1), Transient)  # no retry: one try
    assert len(calls) == 1


def test_a_failure_that_is_not_transient_is_never_asked_again() -> None:
    slept: list[float] = []
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise GitHubUnavailable("GitHub refused the token (401)")

    with pytest.raises(GitHubUnavailable):
        retried(Retry(sleep=slept.append), refused, Transient)
    assert calls == [1] and slept == []


@pytest.mark.parametrize(("code", "transient"), [(502, True), (500, True), (404, False),
                                                 (422, False), (401, False)])  # fmt: skip
def test_githubs_5xx_is_transient_and_its_4xx_is_not(
    httpserver: HTTPServer, code: int, transient: bool
) -> None:
    httpserver.expect_request("/repos/o/n/pulls").respond_with_json({"message": "x"}, code)
    with GitHub(httpserver.url_for("/").rstrip("/"), "t") as gh, \
            pytest.raises(GitHubUnavailable) as exc:  # fmt: skip
        gh.post("/repos/o/n/pulls", {"title": "t"})
    assert isinstance(exc.value, Transient) is transient


def test_a_connection_refused_is_transient() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    with GitHub(f"http://127.0.0.1:{port}", "t") as gh, pytest.raises(Transient):
        gh.get("/repos/o/n/pulls")
