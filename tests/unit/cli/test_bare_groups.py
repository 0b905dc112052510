"""Bare `oms` and bare `oms GROUP` ask what there is: the help on stdout, exit 0 (click 8.2
makes a group without its command a usage error: exit 2, the help on stderr)."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from gatekeeper.cli.main import COMMANDS, load

# Fresh interpreters, one per case: in `make test`, not in the quick loop of `make test-fast`.
pytestmark = pytest.mark.startup


def _group(name: str) -> click.Group | None:
    cmd = load(name)
    # `oms mcp` alone serves MCP: a group that runs without its command is not bare.
    return cmd if isinstance(cmd, click.Group) and not cmd.invoke_without_command else None


GROUPS = sorted(n for n in COMMANDS if _group(n) is not None)


def _oms(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gatekeeper", *args], capture_output=True,
                          text=True, check=False, timeout=60)  # fmt: skip


def test_the_groups_under_test_include_the_ones_users_meet() -> None:
    assert {"evidence", "transfer", "toolchain"} <= set(GROUPS)


@pytest.mark.parametrize("group", GROUPS)
def test_a_bare_group_prints_its_help_and_exits_0(group: str) -> None:
    proc = _oms(group)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"Usage: oms {group} [OPTIONS] COMMAND [ARGS]...")
    assert proc.stderr == ""
    cmd = load(group)
    assert isinstance(cmd, click.Group)
    for sub in cmd.list_commands(click.Context(cmd)):
        if not cmd.commands[sub].hidden:  # a hidden one is oms' own (a pane's process)
            assert f"  {sub} " in proc.stdout


def test_bare_oms_prints_the_help_and_exits_0() -> None:
    proc = _oms()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: oms [OPTIONS] COMMAND [ARGS]...")
    assert "process-result" in proc.stdout and proc.stderr == ""


def test_a_group_with_an_unknown_command_is_still_a_usage_error() -> None:
    proc = _oms("evidence", "nope")
    assert proc.returncode == 2
    assert "No such command 'nope'" in proc.stderr and proc.stdout == ""
