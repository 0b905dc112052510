"""Every command README.md and docs/*.md tell a user to type runs as printed.

Which lines are commands (the rule docs/commands.md states for writers):

- In a fenced block whose info string is `sh`, `bash`, `shell` or `console`: in `sh`,
  `bash` and `shell` every line that is not blank or a comment; in `console` only the
  lines that start with `$ `. In any other fenced block, a line that starts with `$ `.
  A `$ ` is dropped; a line ending in a backslash continues on the next one.
- Of those, a command whose first word is `oms` (or a path ending in `/oms`), `git`,
  `make` or `cd` is checked; any other (`pipx`, `pip`, `npm`, `sudo`) sets up the
  reader's own machine and is not run here.
- A block whose info string is `sh illustration` (any of the languages above), or a
  line with a trailing `# illustration` comment, cannot run here (GitHub, a provider's
  key, an agent CLI, a long-lived server, root): skipped, and counted as skipped.
- A fenced block with no info string may show a synopsis (`oms scan [PATH…]`), never a
  command: a line there that starts with `oms ` and names no placeholder fails the lint
  test below, so that a command cannot hide from this test.

Each command runs through `bash -c`, as printed but for the few placeholders in
`PLACEHOLDERS`, in one prepared world shared by the module: a fresh HOME and
`$OMS_HOME`, a repository holding a small Python project with its policy committed on
`main`, `oms init` done, and the worktree on a branch with an agent-style commit. It must
exit with the code the doc implies (0, or the refusal listed in `EXPECTED`), print no
traceback, and leave the worktree as it found it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from support.env import clean_env
from support.readme import readme_walk
from support.repos import git, make_repo
from support.sandbox import NEEDS_BWRAP_AND_PYTHON, PY, traversable_dir

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SHELLS = {"sh", "bash", "shell", "console"}
OURS = {"oms", "git", "make", "cd"}
ILLUSTRATION = re.compile(r"#\s*illustration\b")
# An uppercase word (DIR, SEQ, CMD…), `[`, `<`, `|` or `…`: the line is a synopsis.
SYNOPSIS = re.compile(r"\b(?!HEAD\b)[A-Z][A-Z_]+\b|[\[<|…]")

# Placeholder -> what it stands for in the world (`{repo}`, `{home}` are filled in).
PLACEHOLDERS = {"~/src/your-repo": "{repo}"}
# (file, command as printed) -> the exit codes its doc implies, when not 0.
EXPECTED: dict[tuple[str, str], set[int]] = {}
# Commands run by a test of their own rather than here, and where.
ELSEWHERE = {
    "make demo": "tests/e2e/test_ci.py::test_the_demo_answers_as_expected_at_every_step",
    "make test": "the test command itself",
}
# The README's walk (its "Use it on your repository" block, with the lock and commit lines
# of toolchains.md that it covers) runs, line by line as printed, from a fresh HOME through
# a pipx install: its lines change the repository and need a new project, not this world.
README_WALK = "tests/e2e/test_packaging.py::test_the_readme_path_runs_as_printed_from_a_fresh_home"
WALKED = {("docs/toolchains.md", 'git add requirements.lock && git commit -m "oms: lock"')}


def walked(cmd: DocCommand) -> bool:
    if (cmd.file, cmd.text) in WALKED:
        return True
    return cmd.file == "README.md" and cmd.text in (line.strip() for line in readme_walk())


# Written here, not by `oms policy init`: its python starter needs a hash-pinned lock and a
# toolchain prepared from an index, and a pyproject-only project gets no starter (issue 30).
POLICY = f"""version = 1

[[checks]]
name = "unit"
cmd = ["{PY}", "-m", "unittest", "discover", "-s", "tests", "-t", "."]
timeout_s = 60
"""
PROJECT = {
    "pyproject.toml": '[project]\nname = "widget"\nversion = "0.1.0"\n',
    "src/__init__.py": "",
    "src/widget.py": "def add(a, b):\n    return a + b\n",
    "tests/__init__.py": "",
    "tests/test_widget.py": "import unittest\n\nfrom src.widget import add\n\n\n"
    "class T(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n",
    "oms.toml": POLICY,
}


@dataclass(frozen=True)
class DocCommand:
    """One command line of a doc: where it is, what it says, and whether it runs here."""

    file: str
    line: int
    text: str
    illustration: bool

    @property
    def bare(self) -> str:
        """The command without its trailing comment."""
        return self.text.split("#")[0].strip()


def shell_lines(info: str, body: list[str], first: int) -> list[tuple[int, str]]:
    """The command lines of one fenced block (1-based line numbers), continuations joined."""
    lang = info.split(maxsplit=1)[0] if info else ""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for n, raw in enumerate(body, start=first):
        if pending is not None:
            start, text = pending
            text = text[:-1] + " " + raw.strip()
            pending = (start, text) if text.endswith("\\") else None
            if pending is None:
                out.append((start, text))
            continue
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        elif lang not in SHELLS - {"console"}:
            continue
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending = (n, line)
        else:
            out.append((n, line))
    return out


def fences(path: Path) -> list[tuple[str, list[str], int]]:
    """Each fenced block of a markdown file: info string, body lines, line of the first."""
    lines = path.read_text().splitlines()
    tokens = MarkdownIt("commonmark").parse(path.read_text())
    found = []
    for tok in tokens:
        if tok.type == "fence" and tok.map is not None:
            start, end = tok.map
            found.append((tok.info.strip(), lines[start + 1 : end - 1], start + 2))
    return found


def block_commands(file: str, info: str, body: list[str], first: int) -> list[DocCommand]:
    """oms' commands in one fenced block, each marked when it is an illustration."""
    whole_block = "illustration" in info.split()[1:]
    return [
        DocCommand(file, n, text, whole_block or bool(ILLUSTRATION.search(text)))
        for n, text in shell_lines(info, body, first)
        if Path(text.split(maxsplit=1)[0]).name in OURS
    ]


def doc_commands() -> list[DocCommand]:
    return [
        cmd
        for path in DOCS
        for info, body, first in fences(path)
        for cmd in block_commands(str(path.relative_to(ROOT)), info, body, first)
    ]


def params() -> list[object]:
    out = []
    for c in doc_commands():
        marks = []
        if c.illustration:
            marks.append(pytest.mark.skip(reason=f"illustration: {c.text}"))
        elif c.bare in ELSEWHERE:
            marks.append(pytest.mark.skip(reason=f"run by {ELSEWHERE[c.bare]}"))
        elif walked(c):
            marks.append(pytest.mark.skip(reason=f"run by {README_WALK}"))
        out.append(pytest.param(c, id=f"{c.file}:{c.line}", marks=marks))
    return out


@dataclass(frozen=True)
class World:
    repo: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("docs")
    (root / "home").mkdir()
    env = clean_env(root / "home", root / "oms-state")
    # `oms` is this interpreter's console script, as the user's install puts it on PATH.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    repo = make_repo(root / "repo", PROJECT, env=env, message="widget with its policy")
    init = subprocess.run(["oms", "init"], cwd=repo, env=env, capture_output=True, text=True)
    assert init.returncode == 0, init.stdout + init.stderr
    git(repo, "checkout", "-q", "-b", "agent/change", env=env)
    (repo / "src" / "widget.py").write_text(
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    )
    git(repo, "commit", "-q", "-am", "agent: add sub", env=env)
    # `$TMPDIR` is where a doc writes outside the worktree; oms' own run files go there
    # too, so the sandbox uid must reach it (pytest's tmp_path is 0700).
    with traversable_dir("oms-doc-tmp-") as tmp:
        yield World(repo, {**env, "TMPDIR": str(tmp)})


def substituted(text: str, w: World) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value.format(repo=w.repo, home=w.env["HOME"]))
    return text


@NEEDS_BWRAP_AND_PYTHON
@pytest.mark.parametrize("cmd", params())
def test_doc_command_runs_as_printed(cmd: DocCommand, world: World) -> None:
    before = git(world.repo, "status", "--porcelain", "--ignored", env=world.env)
    proc = subprocess.run(
        ["bash", "-c", substituted(cmd.text, world)],
        cwd=world.repo,
        env=world.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    said = f"{cmd.file}:{cmd.line}: {cmd.text}\nexit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert proc.returncode in EXPECTED.get((cmd.file, cmd.text), {0}), said
    assert "Traceback" not in proc.stdout + proc.stderr, said
    assert "No such command" not in proc.stderr, said
    after = git(world.repo, "status", "--porcelain", "--ignored", env=world.env)
    assert after == before, f"{said}\nthe worktree changed:\n{after}"


def test_no_command_hides_in_an_unlabelled_block() -> None:
    """A line of a fenced block without an info string that starts with `oms ` is a
    synopsis: it names a placeholder. A concrete command there must be labelled `sh`."""
    hidden = [
        f"{path.relative_to(ROOT)}:{first + i}: {line.strip()}"
        for path in DOCS
        for info, body, first in fences(path)
        if not info
        for i, line in enumerate(body)
        if line.strip().startswith("oms ") and not SYNOPSIS.search(line.split("#")[0])
    ]
    assert hidden == []


def test_the_extraction_finds_the_commands_it_should() -> None:
    """The rule on a sample: `sh` lines, `$ ` lines anywhere, continuations, comments,
    illustrations; output lines and synopses are not commands."""
    body = ["oms init  # note", "# a comment", "oms scan \\", "  --json", "", "pipx install ."]
    assert shell_lines("sh", body, 10) == [
        (10, "oms init  # note"),
        (12, "oms scan  --json"),
        (15, "pipx install ."),
    ]
    assert shell_lines("console", ["$ oms doctor", "ready"], 1) == [(1, "oms doctor")]
    assert shell_lines("", ["$ oms doctor", "oms x [--json]"], 1) == [(1, "oms doctor")]
    assert shell_lines("toml", ["version = 1"], 1) == []
    marked = block_commands("x.md", "sh", ["oms a  # illustration: needs X", "oms b"], 1)
    assert [(c.text[:5], c.illustration) for c in marked] == [("oms a", True), ("oms b", False)]
    whole = block_commands("x.md", "sh illustration", ["oms a", "pipx install ."], 1)
    assert [(c.text, c.illustration) for c in whole] == [("oms a", True)]
    assert any(c.text.startswith("oms ") and not c.illustration for c in doc_commands())


def test_every_placeholder_and_expected_code_is_still_used() -> None:
    """The tables name only commands the docs still print, so a stale entry is noticed."""
    texts = [c.text for c in doc_commands()]
    assert [p for p in PLACEHOLDERS if not any(p in t for t in texts)] == []
    printed = {(c.file, c.text) for c in doc_commands()}
    assert [key for key in EXPECTED if key not in printed] == []
