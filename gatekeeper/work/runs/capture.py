"""`oms run capture RUN CHECK` / `oms_capture_evidence`: runtime-captured validation evidence.

One named `[[checks]]` entry of the TRUSTED plan (the default branch's policy, never a
candidate's) runs in the check sandbox, as the result gate runs it (`gates.sandboxed`:
probed profile, toolchain bound read-only, a fresh scratch copy), on the run's workspace:
an implement run's candidate (its ticket's latest receipt commit), else the default
branch's commit. Its exit code, time-out and output tails become a `log` artifact marked
`runtime-captured` and an `evidence_captured` event. This is the only thing that can
satisfy a runtime QA gate: a QA agent's summon records its opinion, never this event.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evidence import state_root
from gatekeeper.errors import UsageError
from gatekeeper.gates import sandboxed
from gatekeeper.gates.result.verdict import TAIL_CHARS
from gatekeeper.gates.toolchain.bind import ready_toolchains, with_toolchain
from gatekeeper.work.fence import Work
from gatekeeper.work.runs.api import Out, checked_text, opened_runs, shown
from gatekeeper.work.runs.model import Run
from gatekeeper.work.runs.store import NewArtifact, checked_run_id
from policy.model import Check
from sandbox import RunResult

MAX_CHECK_NAME = 100


def _check(work: Work, name: str) -> Check:
    for c in work.loaded.policy.checks:
        if c.name == name:
            return c
    known = ", ".join(c.name for c in work.loaded.policy.checks) or "none"
    raise UsageError(f"the trusted plan has no check {name[:60]!r} (checks: {known})")


def workspace(work: Work, run: Run) -> tuple[str, str]:
    """(commit, what it is): the run's candidate when it has a ticket, else the default
    branch's commit. An implement run with no receipt yet has nothing to capture on."""
    if run.ticket is None:
        return work.base(), "default_branch"
    rows = work.db.read("SELECT commit_sha FROM receipts WHERE ticket = ? "
                        "ORDER BY created DESC, rowid DESC LIMIT 1", run.ticket)  # fmt: skip
    if not rows or not rows[0]["commit_sha"]:
        raise UsageError(f"run {run.id}'s ticket {run.ticket} has no candidate commit yet; "
                         "continue the run first")  # fmt: skip
    return str(rows[0]["commit_sha"]), "candidate"


def run_check(work: Work, check: Check, commit: str) -> RunResult:
    """The check in the sandbox on a fresh copy of `commit`, exactly as the result gate's
    `Checks` stage runs one; Unavailable (nothing ran) when the sandbox cannot be trusted."""
    repo, loaded = work.repo, work.loaded
    profile = sandboxed.profile_for(repo, loaded, timeout_s=check.timeout_s)
    links: tuple[tuple[str, str], ...] = ()
    if check.toolchain is not None:
        policy_commit = work.base()
        never = [state_root(), repo.top, repo.common_dir]
        tool = ready_toolchains(repo, work.store, loaded, policy_commit, [check.toolchain],
                                never, lambda _line: None)[check.toolchain]  # fmt: skip
        profile, links = with_toolchain(profile, tool), tool.links
    bw = sandboxed.ready(repo, profile)
    return sandboxed.run_in_scratch(repo, commit, profile, bw, check.cmd, None, links)


def record(check: Check, commit: str, where: str, policy_digest: str,
           r: RunResult) -> dict[str, Any]:  # fmt: skip
    passed = r.exit_code == 0 and not r.timed_out
    return {"v": 1, "evidence": "runtime-captured", "check": check.name,
            "cmd": list(check.cmd), "commit": commit, "workspace": where,
            "policy_digest": policy_digest, "exit_code": r.exit_code,
            "timed_out": r.timed_out, "signal": r.signal,
            "duration_ms": int(r.duration_s * 1000), "passed": passed,
            "profile_digest": r.profile_digest,
            "stdout_bytes": r.stdout.total, "stderr_bytes": r.stderr.total,
            "stdout_tail": r.stdout.display()[-TAIL_CHARS:],
            "stderr_tail": r.stderr.display()[-TAIL_CHARS:]}  # fmt: skip


def capture(repo_dir: Path, run_id: str, check: str) -> Out:
    """Exit 0 when the check passed, 1 when it ran and failed; the run's state, step and gate
    never change (a finished run takes the evidence too)."""
    checked_run_id(run_id)
    checked_text(check, "check name", MAX_CHECK_NAME)
    with opened_runs(repo_dir) as (work, runs):
        run = runs.get(run_id)
        c = _check(work, check)
        commit, where = workspace(work, run)
        doc = record(c, commit, where, work.loaded.digest, run_check(work, c, commit))
        status = "passed" if doc["passed"] else f"failed (exit {doc['exit_code']})"
        if doc["timed_out"]:
            status = f"timed out after {c.timeout_s} s"
        ref = runs.next_ref(run_id, "log")
        art = NewArtifact(kind="log", data=json.dumps(doc, sort_keys=True).encode(),
                          summary=f"runtime-captured: check {c.name} {status} on "
                          f"{commit[:12]}", media_type="application/json")  # fmt: skip
        event = {"check": c.name, "commit": commit, "exit_code": doc["exit_code"],
                 "passed": doc["passed"], "timed_out": doc["timed_out"], "ref": ref,
                 "workspace": where, "source": "runtime"}  # fmt: skip
        run = runs.step(runs.get(run_id), artifacts=[art],
                        events=[("evidence_captured", event)]).run  # fmt: skip
        captured = {k: doc[k] for k in ("check", "commit", "workspace", "exit_code",
                                        "timed_out", "passed", "duration_ms")}  # fmt: skip
        captured.update(ref=ref, stdout_tail=doc["stdout_tail"][-1000:],
                        stderr_tail=doc["stderr_tail"][-1000:])  # fmt: skip
        return shown(work, runs, run, captured=captured), 0 if doc["passed"] else 1
