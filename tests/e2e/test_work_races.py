"""Eight real `oms ticket lease` processes race for one ticket: the fence lets exactly one
through, the others are refused (exit 3, one line saying which) with nothing changed, and the
database and the evidence log agree afterwards.

Each process loads the CLI first, says it is ready, and waits on a barrier file; the test
opens the barrier once all eight are waiting, so the leases really run at the same time.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.oms import parse_single_json
from support.work import open_work

from gatekeeper.work import payloads as p

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
EXIT_OK, EXIT_BLOCKED = 0, 3
RACERS = 8

# argv: barrier-dir index then the oms arguments. Imports the command before it waits.
AT_THE_BARRIER = """
import os, sys, time
import gatekeeper.cli.main as m, gatekeeper.cli.ticket, gatekeeper.work.fence
gate, me = sys.argv[1], sys.argv[2]
open(os.path.join(gate, "ready-" + me), "w").close()
while not os.path.exists(os.path.join(gate, "go")):
    time.sleep(0.001)
m.main(sys.argv[3:])
"""


def _race(
    gate: Path, argvs: list[list[str]], env: dict[str, str]
) -> list[tuple[int, dict[str, Any]]]:
    gate.mkdir()
    procs = [
        subprocess.Popen([sys.executable, "-c", AT_THE_BARRIER, str(gate), str(i), *argv],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i, argv in enumerate(argvs)
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 120  # a guard against a hang, never an assertion
        while len(list(gate.glob("ready-*"))) < len(procs):
            assert time.monotonic() < deadline, "the racers never reached the barrier"
            assert all(pr.poll() is None for pr in procs), "a racer died before the barrier"
            time.sleep(0.01)
        (gate / "go").touch()
        done = [(pr, *pr.communicate(timeout=120)) for pr in procs]
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
    out = []
    for pr, stdout, stderr in done:
        proc = subprocess.CompletedProcess(pr.args, pr.returncode, stdout, stderr)
        out.append((pr.returncode, parse_single_json(proc)))
    return out


@pytest.fixture
def ticket(git_repo: Path, oms_json: OmsJson) -> str:
    assert oms_json(["init", "--repo", git_repo])[0] == EXIT_OK
    code, goal = oms_json(["goal", "create", "--repo", git_repo, "--objective", "o",
                           "--stop-when", "s"])  # fmt: skip
    assert code == EXIT_OK, goal
    code, added = oms_json(["ticket", "add", "--repo", git_repo, "--goal", goal["goal"]["id"],
                            "--title", "contended"])  # fmt: skip
    assert code == EXIT_OK, added
    return str(added["ticket"]["id"])


def _lease_argv(repo: Path, ticket: str, version: int, nonce: str) -> list[str]:
    return ["ticket", "lease", ticket, "--repo", str(repo), "--expected-version", str(version),
            "--nonce", nonce, "--json"]  # fmt: skip


def _db_and_log_agree(repo: Path, ticket: str) -> list[Any]:
    """One active lease, the ticket at version 2, one lease entry; returns the lease entries."""
    work = open_work(repo)
    try:
        active = work.db.read("SELECT * FROM leases WHERE ticket = ? AND state = 'active'", ticket)
        assert len(active) == 1
        assert work.ticket(ticket).version == 2 and work.ticket(ticket).state == "leased"
        leases = work.store.payloads(p.TicketLeased)
        assert len(leases) == 1 and leases[0][1].lease == active[0]["token_sha256"]
        by_kind = {k.KIND: k for k in p.KINDS}
        logged = [(e.seq, e.kind, by_kind[e.kind].of(e).nonce)
                  for e in work.store.entries(p.WORK_KINDS)]  # fmt: skip
        rows = [(r["seq"], r["kind"], r["nonce"]) for r in work.transitions()]
        assert rows == logged
        (n,) = work.db.read("SELECT count(*) AS n FROM nonces")
        assert n["n"] == len(rows)  # a refused lease claimed no nonce
        return leases
    finally:
        work.close()


def test_eight_leases_with_one_expected_version_one_wins(
    git_repo: Path, ticket: str, oms_env: dict[str, str], tmp_path: Path
) -> None:
    argvs = [_lease_argv(git_repo, ticket, 1, f"racer-nonce-{i:04d}") for i in range(RACERS)]
    results = _race(tmp_path / "gate", argvs, oms_env)
    won = [out for code, out in results if code == EXIT_OK]
    lost = [out for code, out in results if code != EXIT_OK]
    assert len(won) == 1 and len(lost) == RACERS - 1, [c for c, _ in results]
    assert all(c in (EXIT_OK, EXIT_BLOCKED) for c, _ in results)
    for out in lost:
        assert out["error"]["kind"] == "blocked"
        assert out["error"]["message"] == (f"ticket {ticket} is at version 2, not 1; "
                                           "nothing changed")  # fmt: skip
    assert won[0]["ticket"]["state"] == "leased" and won[0]["ticket"]["version"] == 2
    leases = _db_and_log_agree(git_repo, ticket)
    assert leases[0][1].nonce in {a[-2] for a in argvs}


@pytest.mark.parametrize("versions", ["distinct", "same"])
def test_eight_leases_with_one_nonce_at_most_one_wins(
    git_repo: Path, ticket: str, oms_env: dict[str, str], tmp_path: Path, versions: str
) -> None:
    expected = range(1, RACERS + 1) if versions == "distinct" else [1] * RACERS
    argvs = [_lease_argv(git_repo, ticket, v, "the-one-nonce-0001") for v in expected]
    results = _race(tmp_path / "gate", argvs, oms_env)
    codes = [c for c, _ in results]
    assert codes.count(EXIT_OK) <= 1 and set(codes) <= {EXIT_OK, EXIT_BLOCKED}, codes
    # a refusal rolls back its claim of the nonce, so the one right version still gets through
    assert codes.count(EXIT_OK) == 1
    if versions == "distinct":
        assert codes[0] == EXIT_OK  # the racer that expected version 1
    for code, out in results:
        if code != EXIT_OK:
            msg = out["error"]["message"]
            assert ("was used already" in msg) or ("not " in msg and "version" in msg), msg
            assert msg.endswith("nothing changed") and "\n" not in msg
    (lease,) = _db_and_log_agree(git_repo, ticket)
    assert lease[1].nonce == "the-one-nonce-0001"
