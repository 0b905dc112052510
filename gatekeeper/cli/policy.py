"""`oms policy init|check|show`: write, validate and read `oms.toml`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import tomlkit

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.errors import EXIT_USAGE
from gatekeeper.gates.policy_file import check_policy, init_policy, show_policy
from gatekeeper.text import sanitize
from policy.templates import TEMPLATES


@click.group(cls=FullHelpGroup)
def policy() -> None:
    """The policy file: init (a starter oms.toml), check (validate a file), show (effective)."""


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
@click.option("--ref", help="A commit to read it from (default: the default branch's tip).")
@command
def policy_show(repo: Path, ref: str | None) -> Outcome:
    """The effective policy the gates read (defaults filled in) and its digest."""
    data = show_policy(repo, ref).to_json()
    return Outcome(data, lines=show_lines(data))


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


def show_lines(data: Data) -> list[str]:
    head = [f"# origin: {data['origin']}", f"# ref: {data['ref']} ({data['commit']})",
            f"# digest: {data['digest']}"]  # fmt: skip
    body = tomlkit.dumps(_without_none(data["policy"])).rstrip("\n").split("\n")
    return [sanitize(x) for x in [*head, *body]]


def _without_none(value: Any) -> Any:
    # TOML has no null: an unset optional key is left out, as it would be in a file.
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value
