"""`oms init`: the state root, signing key and evidence log of a repository, and — at a
terminal, when the default branch has no policy — a starter `oms.toml` offered for it."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Data, Outcome, command, init_lines
from gatekeeper.gates import records
from gatekeeper.gates.policy_file import Offer, accept_starter, not_accepted, offer_starter
from gatekeeper.text import sanitize

QUESTION = "write oms.toml? [y/N] "


@click.command()
@REPO_OPTION
@click.option("--default-branch", help="The branch whose tip is the trusted base (recorded in "
              "the state root; default: origin/HEAD, else main, else master).")  # fmt: skip
@click.option("--write-policy", is_flag=True, help="Write the detected starter oms.toml (and "
              "its requirements.lock) without asking; works without a terminal.")  # fmt: skip
@command
def init(repo: Path, default_branch: str | None, write_policy: bool) -> Outcome:
    """Create the state root, signing key and evidence log for a repository."""
    data = records.init(repo, default_branch).to_json()
    offer = offer_starter(repo)
    # Only a human at a terminal is asked; the GitHub Action runs `oms init` on every pull
    # request, and a policy written there would never be the user's choice.
    asked = offer.starter is not None and not write_policy and _at_terminal()
    if offer.starter is not None and (write_policy or (asked and _ask(offer))):
        policy = accept_starter(offer, _progress)
    else:
        policy = not_accepted(offer, asked)
    data["policy"] = policy.to_json()
    data["next_steps"] = list(next_steps(offer, data["policy"]))
    return Outcome(data, lines=init_lines(data) + guide_lines(offer, data))


def _at_terminal() -> bool:
    as_json = bool(click.get_current_context().params.get("as_json"))
    return not as_json and sys.stdin.isatty() and sys.stdout.isatty()


def _progress(line: str) -> None:
    click.echo(f"oms: {sanitize(line)}", err=True)


def _ask(offer: Offer) -> bool:
    assert offer.starter is not None  # nosec B101 -- asked only about an offered starter
    kind = offer.starter.toolchain_kind or "no toolchain"
    click.echo(sanitize(f"The default branch has no oms.toml. Detected: "
                        f"{offer.starter.project.template} ({kind}). The starter:"))  # fmt: skip
    click.echo("\n".join(sanitize(x) for x in offer.starter.text.splitlines()))
    if offer.lock_needed:
        click.echo(sanitize(f"(yes also writes {offer.lock_needed} with `oms toolchain lock`)"))
    click.echo(QUESTION, nl=False)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _branch(offer: Offer) -> str:
    return offer.branch.removeprefix("refs/heads/") if offer.branch else "main"


# A policy committed after `oms init` is read only once a human trusts it (the mark).
TRUST = "oms policy trust   # at a terminal: read the policy's diff, type yes"


def next_steps(offer: Offer, policy: Data) -> tuple[str, ...]:
    """What to run after `oms init`, for the state its policy section says."""
    state = policy["state"]
    tail = ("oms install claude-code   # the agent's hooks (or: codex)",
            "oms process-result --candidate BRANCH   # judge the agent's branch")  # fmt: skip
    if state == "on_default_branch":
        return ("oms toolchain prepare   # build the toolchains the policy names", *tail)
    if state == "undetected":
        return ("oms policy init --template python   # or node, go: a starter oms.toml",
                "git add oms.toml && git commit -m 'oms policy'   # on the default branch",
                TRUST, *tail)  # fmt: skip
    if state in ("not_asked", "declined"):
        return ("oms init --write-policy   # or `oms init` at a terminal: write the starter",
                *tail)  # fmt: skip
    files = ["oms.toml"]
    if policy["lock_written"]:
        files.append(policy["lock"])
    make = (
        [f"oms toolchain lock   # then commit {policy['lock']} too"] if policy["lock_error"] else []
    )
    commit = f"git add {' '.join(files)} && git commit -m 'oms policy'   # on {_branch(offer)}"
    prepare = "oms toolchain prepare   # build the toolchains it names"
    return (*make, commit, TRUST, *([prepare] if policy["toolchain_kind"] else []), *tail)


def guide_lines(offer: Offer, data: Data) -> list[str]:
    """One screen: what was written, what to commit and why, what to run next."""
    p, branch = data["policy"], _branch(offer)
    said = {
        "on_default_branch": f"policy:  oms.toml is on {branch}: the gates read it there",
        "in_worktree": f"policy:  oms.toml is in the worktree, not yet on {branch}",
        "undetected": f"policy:  none written: {offer.reason}",
        "not_asked": f"policy:  {branch} has no oms.toml: every candidate is BLOCKED until "
        "one is committed there",
        "declined": "policy:  not written (you said no)",
    }
    if p["state"] == "written":
        kind = f", toolchain {p['toolchain_kind']} from {p['lock']}" if p["lock"] else ""
        lines = [f"policy:  wrote {p['path']} ({p['template']}{kind})"]
        if p["lock_written"]:
            lines.append(
                f"lock:    wrote {p['lock']} (hash-pinned, from pyproject.toml on {branch})"
            )
        elif p["lock_error"]:
            lines.append(f"lock:    not written: {p['lock_error']}")
    else:
        lines = [said[p["state"]]]
    if p["state"] in ("written", "in_worktree"):
        lines.append(f"why:     oms trusts a policy only from {branch}, at a commit a human "
                     "trusted there; never from a candidate or the worktree")  # fmt: skip
    lines += ["next:", *(f"  {s}" for s in data["next_steps"])]
    return [sanitize(x) for x in lines]
