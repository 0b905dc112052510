"""What must happen after a result-gate verdict: the `next_actions` of oms_process_result.

FAILED: read the failing check's output, fix, commit and run the gate again (the agent).
BLOCKED: take the secret or the protected-path change out of the candidate (the agent), or
a human changes the default branch's policy. UNAVAILABLE: a human prepares the
toolchain (`oms toolchain prepare`) or looks at `oms doctor`. READY_FOR_HUMAN: a human
reviews; oms never merges.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gatekeeper.gates.toolchain.tree import ToolchainUnavailable
from gatekeeper.mcp.actions import NextAction, oms_argv

MAX_READS = 3  # failing checks whose output is offered to read


def _rerun(asked: Mapping[str, Any], why: str, fix: bool = True) -> NextAction:
    args = {k: v for k, v in asked.items() if v is not None}
    if isinstance(args.get("attempt"), int):
        args["attempt"] += 1
    if not fix:
        return NextAction(action="rerun", label="Run the gate again", description=why,
                          owner="agent", tool="oms_process_result", arguments=args)  # fmt: skip
    return NextAction(action="fix_and_rerun", label="Fix, commit, and run the gate again",
                      description=f"{why} Commit the fix, then call oms_process_result on the "
                      "new commit (a branch name follows it).", owner="agent",
                      tool="oms_process_result", arguments=args)  # fmt: skip


def _reads(verdict: Mapping[str, Any]) -> list[NextAction]:
    failed = [c for c in verdict["checks"] if c["exit_code"] != 0 or c["timed_out"]]
    return [NextAction(action="read_check_output", label=f"Read the output of check {c['name']}",
                       description="The whole output the check wrote (the verdict shows its tail).",
                       owner="agent", blocking=False, required=False, tool="oms_read_artifact",
                       arguments={"seq": verdict["evidence_seq"],
                                  "digest": c["stderr_blob"] if c["stderr_bytes"]
                                  else c["stdout_blob"]})
            for c in failed[:MAX_READS]]  # fmt: skip


def _blocked(verdict: Mapping[str, Any], asked: Mapping[str, Any]) -> list[NextAction]:
    actions = []
    if verdict["findings"]:
        actions.append(_rerun(asked, "Secret findings block it: take each value out of the "
                              "change (rotate it if it was real)."))  # fmt: skip
        actions.append(NextAction(
            action="allow_fingerprint", label="Or allow a false positive in the policy",
            description="Only a human decides: add the finding's fingerprint to "
            "allow_fingerprints in oms.toml on the default branch.",
            owner="human", blocking=False, required=False))  # fmt: skip
    if verdict["protected_changes"]:
        actions.append(_rerun(asked, "It changes protected paths: the candidate must leave "
                              "them alone."))  # fmt: skip
        actions.append(NextAction(
            action="commit_protected_directly", label="A human commits protected paths",
            description="Changes to policy, CI or agent configuration are made by a human "
            "on the default branch, never through an agent's candidate.",
            owner="human", blocking=False, required=False))  # fmt: skip
    return actions


def verdict_actions(top: Path, verdict: Mapping[str, Any],
                    asked: Mapping[str, Any]) -> list[NextAction]:  # fmt: skip
    """The actions after a verdict the gate returned."""
    decision = verdict["decision"]
    if decision == "FAILED":
        return [*_reads(verdict), _rerun(asked, "Checks failed: fix what they report.")]
    if decision == "BLOCKED":
        return _blocked(verdict, asked)
    if decision == "READY_FOR_HUMAN":
        return [NextAction(
            action="human_review", label="A human reviews the candidate",
            description="READY_FOR_HUMAN is the gate's best answer: a human reviews the "
            "verdict and the commit and merges it; oms never merges.", owner="human",
            argv=(*oms_argv(), "evidence", "show", str(verdict["evidence_seq"]), "--repo",
                  str(top)))]  # fmt: skip
    return []


def unavailable_actions(top: Path, exc: BaseException,
                        asked: Mapping[str, Any]) -> list[NextAction]:  # fmt: skip
    """The actions after an UNAVAILABLE refusal: nothing was judged."""
    # The gate re-raises a stage's refusal as a plain Unavailable, from the original.
    if isinstance(exc, ToolchainUnavailable) or isinstance(exc.__cause__, ToolchainUnavailable):
        return [NextAction(
            action="prepare_toolchain", label="Prepare the plan's toolchains",
            description="A human builds the trusted toolchains from the default branch's "
            "lockfiles (outside any sandbox; it contacts the package registry).",
            owner="human", argv=(*oms_argv(), "toolchain", "prepare", "--repo", str(top))),
            _rerun(asked, "Once prepared: nothing was judged yet.", fix=False)]  # fmt: skip
    return [NextAction(action="check_readiness", label="Find what is unavailable",
                       description="A human runs oms doctor: it names what cannot be used "
                       "and how to fix it.", owner="human",
                       argv=(*oms_argv(), "doctor", "--repo", str(top)))]  # fmt: skip
