"""Bare `oms`: the repository's state and the next steps, or the conductor when it has one.

`oms` alone at a terminal starts the conductor only when the base's policy defines the
role `[conductor] role` names; otherwise (and for `oms --json` or `oms --repo DIR`
anywhere) it shows what the gates see (`gatekeeper.gates.status`). Not a command of the
table: it has no name of its own to type.
"""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.text import sanitize


def conductor_configured(repo_dir: Path) -> bool:
    """True when the base's policy defines the conductor's role (anything unreadable: no)."""
    from gatekeeper.errors import OmsError
    from gatekeeper.gates.status import policy_state
    from gatekeeper.repo.git import open_repo

    try:
        return policy_state(open_repo(repo_dir)).conductor_role
    except OmsError:
        return False


@click.command("oms", hidden=True)
@REPO_OPTION
@command
def overview(repo: Path) -> Outcome:
    """The repository's state: policy, last verdicts, pending transfers, evidence health."""
    from gatekeeper.errors import UsageError
    from gatekeeper.gates.status import repo_status
    from gatekeeper.repo.git import open_repo

    try:
        opened = open_repo(repo)
    except UsageError as exc:
        raise UsageError(f"{exc.message}: run oms in a repository (or `oms --repo DIR`), "
                         "then `oms init`") from None  # fmt: skip
    data = repo_status(opened).to_json()
    return Outcome(data, lines=status_lines(data))


def _s(value: object, limit: int = 120) -> str:
    return sanitize("" if value is None else str(value), limit)


def _policy_line(pol: Data) -> str:
    if pol["problem"]:
        return f"policy: unreadable ({_s(pol['problem'], 200)})"
    if not pol["present"]:
        return "policy: none on the default branch (the built-in strict defaults: no plan)"
    return (f"policy: oms.toml at {_s(pol['commit'])[:12]}, {_s(pol['digest'])[:19]}…, "
            f"{pol['checks']} check(s) in the plan")  # fmt: skip


def status_lines(data: Data) -> list[str]:
    """Bare `oms` as plain lines (the JSON shape is the contract; tested without a process)."""
    lines = [f"repository: {_s(data['repo'], 200)}", _policy_line(data["policy"]),
             f"evidence: {_s(data['evidence'], 200)}"]  # fmt: skip
    verdicts = data["verdicts"]
    lines.append("last verdicts:" if verdicts else "last verdicts: none yet")
    lines += [f"  #{v['seq']} {_s(v['decision'])} {_s(v['commit'])} {_s(v['time'])}"
              for v in verdicts]  # fmt: skip
    pending = data["pending_transfers"]
    lines.append("pending transfers:" if pending else "pending transfers: none")
    lines += [f"  {_s(t['status'])} {_s(t['digest'])} to {_s(t['destination'])}, "
              f"{t['bytes']} bytes" for t in pending]  # fmt: skip
    lines.append("next steps:")
    lines += [f"  {_s(n['command'], 200)}   # {_s(n['why'], 200)}" for n in data["next_steps"]]
    return lines
