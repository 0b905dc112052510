"""`oms policy init|check|show|trust|signer`: write, validate, read and trust `oms.toml`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import click
import tomlkit

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.errors import EXIT_USAGE
from gatekeeper.gates.policy_file import (
    TRUST_HEADER,
    check_policy,
    init_policy,
    show_policy,
    trust_policy,
)
from gatekeeper.gates.signers import add_signer, remove_signer
from gatekeeper.gates.transfer.tty import confirm_at_terminal
from gatekeeper.text import sanitize
from policy.templates import TEMPLATES


@click.group(cls=FullHelpGroup)
def policy() -> None:
    """The policy file: init (a starter oms.toml), check, show, trust (a new tip), signers."""


@policy.command("init")
@REPO_OPTION
@click.option("--template", type=click.Choice(TEMPLATES),
              help="The project kind (default: detected from its lockfiles).")  # fmt: skip
@click.option("--force", is_flag=True, help="Replace an existing oms.toml.")
@command
def policy_init(repo: Path, template: str | None, force: bool) -> Outcome:
    """Write a starter oms.toml with a working check plan for this project."""
    data = init_policy(repo, template, force).to_json()  # type: ignore[arg-type]  # a Choice
    return Outcome(data, lines=init_lines(data))


@policy.command("check")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@REPO_OPTION
@command
def policy_check(file: Path | None, repo: Path) -> Outcome:
    """Validate a policy file (default: the worktree's oms.toml) and list every error."""
    data = check_policy(file, repo).to_json()
    return Outcome(data, code=0 if data["valid"] else EXIT_USAGE, lines=check_lines(data))


@policy.command("show")
@REPO_OPTION
@click.option("--ref", help="A commit to read it from (default: the default branch's trusted "
              "mark).")  # fmt: skip
@command
def policy_show(repo: Path, ref: str | None) -> Outcome:
    """The effective policy the gates read (defaults filled in), its digest and the mark."""
    data = show_policy(repo, ref).to_json()
    return Outcome(data, lines=show_lines(data))


@policy.command("trust")
@REPO_OPTION
@command
def policy_trust(repo: Path) -> Outcome:
    """Trust the default branch's tip for the policy and plan, at the terminal.

    Shows how oms.toml and the lock files it names changed since the trusted mark, and asks
    for `yes` at the controlling terminal; the gates then read the policy at the tip.

    \b
    Example:
      git commit -m "policy: add a check" oms.toml   # on the default branch
      oms policy trust                               # read the diff, then type yes
    """
    data = trust_policy(repo, ask=_ask).to_json()
    return Outcome(data, lines=trust_lines(data))


@policy.group("signer", cls=FullHelpGroup)
def signer() -> None:
    """The keys whose attestations a verifier accepts ([trust] signers): add, remove."""


DATE = click.DateTime(formats=["%Y-%m-%d"])


@signer.command("add")
@click.option("--name", required=True, help="The signer's name in the policy (e.g. ci-2026).")
@click.option("--key", help="Its public key, ed25519:BASE64 as `oms evidence key` prints it "
              "(default: this state root's evidence key).")  # fmt: skip
@click.option("--not-before", type=DATE, help="The first UTC day it is valid (YYYY-MM-DD).")
@click.option("--not-after", type=DATE, help="The last UTC day it is valid (YYYY-MM-DD).")
@REPO_OPTION
@command
def signer_add(name: str, key: str | None, not_before: datetime | None,
               not_after: datetime | None, repo: Path) -> Outcome:  # fmt: skip
    """Add a signer to the worktree's oms.toml (never committed: commit it, then trust it).

    \b
    Example:
      oms policy signer add --name laptop --not-after 2027-06-30
    """
    days = [d.date() if d else None for d in (not_before, not_after)]
    data = add_signer(repo, name, key, days[0], days[1]).to_json()
    return Outcome(data, lines=signer_lines(data))


@signer.command("remove")
@click.option("--name", required=True, help="The signer to take out (its key is revoked).")
@REPO_OPTION
@command
def signer_remove(name: str, repo: Path) -> Outcome:
    """Remove a signer from the worktree's oms.toml: once committed and trusted, its key is
    revoked."""
    data = remove_signer(repo, name).to_json()
    return Outcome(data, lines=signer_lines(data))


def _ask(lines: list[str], question: bytes) -> object:
    return confirm_at_terminal(lines, question, header=TRUST_HEADER)


def init_lines(data: Data) -> list[str]:
    verb = "replaced" if data["replaced"] else "wrote"
    kind = f", toolchain {data['toolchain_kind']} from {data['lock']}" if data["lock"] else ""
    lines = [f"{verb} {data['path']} ({data['template']}{kind})", "next:"]
    return [sanitize(x) for x in [*lines, *(f"  {s}" for s in data["next_steps"])]]


def check_lines(data: Data) -> list[str]:
    if data["valid"]:
        return [sanitize(f"{data['file']}: valid, digest {data['digest']}")]
    lines = [e["line"] for e in data["errors"]]
    return [sanitize(x) for x in [*lines, f"{len(lines)} error(s)"]]


def trust_lines(data: Data) -> list[str]:
    if data["seq"] is None:
        return [sanitize(f"{data['ref']} ({data['commit'][:12]}) is the trusted mark already; "
                         "nothing to trust")]  # fmt: skip
    changed = ", ".join(data["changed"]) or "no policy or lock file"
    return [sanitize(x) for x in (
        f"trusted {data['ref']} at {data['commit'][:12]} as entry {data['seq']} "
        f"({data['commits']} commit(s) after {data['previous'][:12]}; changed: {changed})",
        f"the gates now read the policy there (digest {data['digest']})")]  # fmt: skip


def signer_lines(data: Data) -> list[str]:
    window = [f"{k} {data[k]}" for k in ("not_before", "not_after") if data[k]]
    when = f", {', '.join(window)}" if window else ""
    where = "to" if data["action"] == "added" else "from"
    lines = [f"{data['action']} signer {data['name']} ({data['key']}{when}) {where} "
             f"{data['path']}", "nothing is committed; next:"]  # fmt: skip
    return [sanitize(x) for x in [*lines, *(f"  {s}" for s in data["next_steps"])]]


def show_lines(data: Data) -> list[str]:
    head = [f"# origin: {data['origin']}", f"# ref: {data['ref']} ({data['commit']})",
            f"# digest: {data['digest']}", mark_line(data.get("mark"))]  # fmt: skip
    body = tomlkit.dumps(_without_none(data["policy"])).rstrip("\n").split("\n")
    return [sanitize(x) for x in [*head, *body]]


def mark_line(mark: Data | None) -> str:
    if mark is None:
        return "# trusted mark: none (no evidence log; `oms init` records one)"
    after = "" if mark["commit"] == mark["tip"] else f", tip {mark['tip'][:12]} not yet judged"
    return (
        f"# trusted mark: {mark['ref']} at {mark['commit'][:12]} (by {mark['by']}, "
        f"entry {mark['seq']}{after})"
    )


def _without_none(value: Any) -> Any:
    # TOML has no null: an unset optional key is left out, as it would be in a file.
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value
