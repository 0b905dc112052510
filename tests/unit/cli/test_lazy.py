"""The lazy command table: `oms --help` and `oms release status` import no gate, no scanner,
no MCP SDK, no pydantic and no foundation package; the table cannot drift from the commands."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from gatekeeper.cli.main import COMMANDS, EXAMPLES, SECTIONS, cli, load

HEAVY = ("gatekeeper.gates", "gatekeeper.mcp", "mcp", "detect_secrets", "pydantic", "rich",
         "policy", "evidence", "sandbox", "cryptography")  # fmt: skip

REPORT = (
    "import sys\n"
    "heavy = {heavy!r}\n"
    "def report():\n"
    "    print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') "
    "for h in heavy)))\n"
)


def _heavy_after(body: str) -> list[str]:
    code = REPORT.format(heavy=HEAVY) + body
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    last = proc.stdout.strip().splitlines()[-1]
    loaded: list[str] = json.loads(last.replace("'", '"'))
    return loaded


def test_importing_the_cli_package_imports_no_gate() -> None:
    assert _heavy_after("import gatekeeper.cli\nimport gatekeeper.cli.main\nreport()\n") == []


ARGVS = [["--help"], ["release", "status"], ["release", "status", "--json"]]


@pytest.mark.parametrize("argv", ARGVS)
def test_help_and_release_status_import_nothing_heavy(argv: list[str]) -> None:
    body = (
        "from gatekeeper.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\nreport()\n"
    )
    assert _heavy_after(body) == []


def test_a_gate_command_is_imported_when_it_runs() -> None:
    # The check above means something: resolving `scan` does load the gate behind it.
    body = "from gatekeeper.cli.main import load\nload('scan')\nreport()\n"
    assert "gatekeeper.gates" in _heavy_after(body)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_table_help_is_the_commands_own_help(name: str) -> None:
    cmd = load(name)
    assert cmd.name == name
    assert COMMANDS[name][1] == cmd.help


def test_table_lists_commands_in_click_order() -> None:
    assert list(COMMANDS) == sorted(COMMANDS)


def _groups() -> list[str]:
    names = []
    for name in COMMANDS:
        cmd = load(name)
        names.append(name)
        if isinstance(cmd, click.Group):
            names += [f"{name} {sub}" for sub in cmd.list_commands(click.Context(cmd))]
    return names


@pytest.mark.parametrize("path", _groups())
def test_every_command_and_subcommand_shows_help(path: str) -> None:
    result = CliRunner().invoke(cli, [*path.split(), "--help"], prog_name="oms")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: oms {path} ")


def _root_help() -> str:
    result = CliRunner().invoke(cli, ["--help"], prog_name="oms", terminal_width=200)
    assert result.exit_code == 0
    return result.output


def test_root_help_groups_every_command_once_gates_first() -> None:
    grouped = [name for _, names in SECTIONS for name in names]
    assert sorted(grouped) == sorted(COMMANDS)
    assert [title for title, _ in SECTIONS][:3] == ["Gates", "Agents", "Orchestration"]
    out = _root_help()
    listed = [row.split()[0] for row in out.split("Gates:\n", 1)[1].split("Examples:")[0]
              .splitlines() if row.startswith("  ")]  # fmt: skip
    assert listed == grouped


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_root_help_gives_each_command_its_whole_description(name: str) -> None:
    # Not shortened with "...": the whole sentence, wrapped as it may be.
    words = " ".join(_root_help().split("Gates:", 1)[1].split())
    assert f"{name} {COMMANDS[name][1]}" in words
    assert "..." not in words


def test_root_help_ends_with_examples_that_are_commands() -> None:
    examples = _root_help().split("Examples:\n", 1)[1]
    for example, why in EXAMPLES:
        listed = [line.split("  ")[1] for line in examples.splitlines() if line[2:3] == "o"]
        assert example.startswith("oms") and example in listed
        assert why in " ".join(examples.split())


@pytest.mark.parametrize("path", [p for p in _groups() if " " not in p])
def test_every_group_gives_its_commands_whole_descriptions(path: str) -> None:
    cmd = load(path)
    if not isinstance(cmd, click.Group):
        return
    out = CliRunner().invoke(cli, [path, "--help"], prog_name="oms", terminal_width=200).output
    words = " ".join(out.split())
    for sub in cmd.list_commands(click.Context(cmd)):
        line = cmd.commands[sub].get_short_help_str(10_000)
        if not cmd.commands[sub].hidden:
            assert f"{sub} {line}" in words, (path, sub)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope", "--json"], "No such command 'nope'."),
        (["release", "status", "--bogus", "--json"], "No such option '--bogus'."),
    ],
)
def test_usage_errors_exit_2_with_a_usage_envelope(argv: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gatekeeper", *argv], capture_output=True, text=True, check=False,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert json.loads(proc.stdout) == {
        "ok": False, "oms_exit_code": 2, "error": {"kind": "usage", "message": message},
    }  # fmt: skip
