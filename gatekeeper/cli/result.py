"""`oms process-result`: the protected result gate on one candidate commit."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.agent.records import recorded_base
from gatekeeper.cli.formats import formatted
from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Outcome, gate_lines, refused_result_lines
from gatekeeper.gates.result import pipeline
from gatekeeper.repo.git import open_repo
from gatekeeper.text import sanitize
from gatekeeper.work import provenance


def _progress(line: str) -> None:
    click.echo(f"oms: {sanitize(line)}", err=True)  # stderr: stdout is the verdict


def _silent(_line: str) -> None:
    return None


@click.command("process-result")
@REPO_OPTION
@click.option("--candidate", required=True, help="The agent's commit (any ref).")
@click.option("--base", help="Narrow the diff to BASE..CANDIDATE (an ancestor of the candidate "
              "and of the default branch's trusted mark; default: the candidate's merge-base "
              "with the mark). The policy and plan always come from the trusted mark. For "
              "refs/oms/runs/<id>: the base that agent run recorded.")  # fmt: skip
@click.option("--ticket", help="Ticket id, recorded in evidence.")
@click.option("--attempt", type=click.IntRange(min=1), help="Attempt number, recorded.")
@click.option("--deliver-branch", help="On READY_FOR_HUMAN: create or fast-forward this branch.")
@click.option("--push", "push_remote", help="With --deliver-branch: push it (never forced).")
@click.option("--draft-pr", is_flag=True, help="With --deliver-branch: open a draft PR via gh.")
@click.option(
    "--progress/--no-progress",
    default=True,
    show_default=True,
    help="Progress lines on stderr: each stage, each check and its time, the scan.",
)
@formatted("result", refused=refused_result_lines)
def process_result(
    repo: Path,
    candidate: str,
    base: str | None,
    ticket: str | None,
    attempt: int | None,
    deliver_branch: str | None,
    push_remote: str | None,
    draft_pr: bool,
    progress: bool,
) -> Outcome:
    """The result gate: frozen plan from the base, sandboxed checks, both scanners, evidence."""
    if base is None:  # an agent run's result: the base its evidence recorded
        base = recorded_base(open_repo(repo), candidate)
    verdict = pipeline.process_result(
        repo,
        candidate,
        base,
        ticket,
        attempt,
        deliver_branch,
        push_remote,
        draft_pr,
        progress=_progress if progress else _silent,
        attest=provenance.attested_line,
    )
    data = verdict.to_json()
    return Outcome(data, code=verdict.exit_code, lines=gate_lines(data))
