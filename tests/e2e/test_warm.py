"""A warm `oms` call (tests/support/warm.py) is the process a fresh one is: same output,
exit code, files and modes; and the suite really uses it.

Each case runs the same command both ways, warm first, in twin worlds (two state roots, two
repositories made alike) and compares what a test would look at.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import pty as support_pty
from support import warm
from support.env import clean_env
from support.oms import OMS, run_oms
from support.planted import PlantedSecrets
from support.repos import commit_policy, make_repo
from support.warm import run_warm


def fresh(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    env = kw.pop("env")
    cwd = kw.pop("cwd")
    assert isinstance(env, dict) and isinstance(cwd, Path)
    return subprocess.run(
        [*OMS, *args], env=env, cwd=cwd, capture_output=True, encoding="utf-8", check=False,
        **kw,  # type: ignore[call-overload]
    )  # fmt: skip


class World:
    def __init__(self, root: Path) -> None:
        home = root / "home"
        home.mkdir(parents=True)
        self.state = root / "state"
        self.env = clean_env(home, self.state)
        self.repo = make_repo(root / "repo", env=self.env)


@pytest.fixture
def twins(tmp_path: Path) -> Iterator[tuple[World, World]]:
    yield World(tmp_path / "warm"), World(tmp_path / "fresh")


def both(
    twins: tuple[World, World], args: list[str], input: str | None = None
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    warm_world, fresh_world = twins
    warm = run_warm(args, env=warm_world.env, cwd=str(warm_world.repo), input=input, timeout=120)
    assert warm is not None, "the warm server is not in use: the suite would run cold"
    cold = fresh(args, env=fresh_world.env, cwd=fresh_world.repo, input=input)
    return warm, cold


def same_text(a: str, b: str, twins: tuple[World, World]) -> None:
    w, f = twins
    assert a.replace(str(w.repo.parent), "ROOT") == b.replace(str(f.repo.parent), "ROOT")


@pytest.mark.parametrize(
    "args",
    [["--version"], ["--help"], ["no-such-command", "--json"], ["evidence", "show", "--json"],
     ["scan", "--json", "--", "README.md"]],
)  # fmt: skip
def test_same_output_and_exit_code(twins: tuple[World, World], args: list[str]) -> None:
    warm, cold = both(twins, args)
    assert warm.returncode == cold.returncode
    same_text(warm.stdout, cold.stdout, twins)
    same_text(warm.stderr, cold.stderr, twins)


def test_stdin_reaches_the_child_and_a_finding_is_the_same(twins: tuple[World, World]) -> None:
    planted = PlantedSecrets(7)
    warm, cold = both(twins, ["scan", "--stdin", "--json"], input=f"key = {planted.aws}\n")
    assert warm.returncode == cold.returncode == 3, (warm.stderr, cold.stderr)
    same_text(warm.stdout, cold.stdout, twins)


def test_errors_decode_and_encode_as_popen_does(twins: tuple[World, World]) -> None:
    """`errors="surrogateescape"` (a caller reading hostile bytes): a lone surrogate in the
    input is the byte 0xff on the child's stdin, as Popen writes it; the output decodes alike."""
    warm_world, fresh_world = twins
    text = "name = caf\udcff\n"
    warm = run_warm(["scan", "--stdin", "--json"], env=warm_world.env, cwd=str(warm_world.repo),
                    input=text, timeout=120, errors="surrogateescape")  # fmt: skip
    assert warm is not None
    cold = fresh(["scan", "--stdin", "--json"], env=fresh_world.env, cwd=fresh_world.repo,
                 input=text, errors="surrogateescape")  # fmt: skip
    assert warm.returncode == cold.returncode == 0, (warm.stderr, cold.stderr)
    same_text(warm.stdout, cold.stdout, twins)


def test_environment_cwd_and_umask_are_the_callers(twins: tuple[World, World]) -> None:
    old = os.umask(0o077)
    try:
        warm, cold = both(twins, ["init", "--json"])
    finally:
        os.umask(old)
    assert warm.returncode == cold.returncode == 0, (warm.stderr, cold.stderr)

    def modes(root: Path) -> dict[str, int]:
        (repo_id,) = (p.name for p in (root / "repos").iterdir())  # the repository's path's
        return {str(p.relative_to(root)).replace(repo_id, "ID"): stat.S_IMODE(p.lstat().st_mode)
                for p in root.rglob("*")}  # fmt: skip

    w, f = twins
    assert w.state.is_dir() and f.state.is_dir()  # each call used its own OMS_HOME and repo
    assert modes(w.state) == modes(f.state)


def test_a_plain_call_goes_warm_and_an_unusual_interpreter_does_not(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    assert run_warm(["--version"], env=env, cwd=str(tmp_path), input=None, timeout=60)
    other = {**env, "PYTHONHASHSEED": "1"}
    assert run_warm(["--version"], env=other, cwd=str(tmp_path), input=None, timeout=60) is None
    proc = run_oms(["--version"], env=other, cwd=tmp_path)  # then it runs fresh
    assert proc.returncode == 0 and proc.stdout.startswith("oms, version")


def test_a_timeout_kills_the_warm_child(twins: tuple[World, World], tmp_path: Path) -> None:
    w, _ = twins
    with pytest.raises(subprocess.TimeoutExpired):
        # `oms scan --stdin` waits for stdin's end; the caller's stdin here never ends.
        r, keep_open = os.pipe()
        try:
            env = w.env
            run_warm_with_stdin(["scan", "--stdin"], env, r, w.repo)
        finally:
            os.close(r)
            os.close(keep_open)


def run_warm_with_stdin(args: list[str], env: dict[str, str], fd: int, cwd: Path) -> None:
    saved = os.dup(0)
    os.dup2(fd, 0)
    try:
        run_warm(args, env=env, cwd=str(cwd), input=None, timeout=3)
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def test_the_launcher_another_program_starts_answers_as_a_fresh_process(
    twins: tuple[World, World],
) -> None:
    """What an MCP client starts (`warm.command`): the launcher hands its stdio to a warm
    child and exits with its code; a SIGTERM it gets reaches the child, and both end by it."""
    w, f = twins
    command, args = warm.command(["--version"], w.env)
    assert "--launch" in args
    launched = subprocess.run([command, *args], env=w.env, cwd=w.repo, capture_output=True,
                              encoding="utf-8", check=False)  # fmt: skip
    cold = fresh(["--version"], env=f.env, cwd=f.repo)
    assert (launched.returncode, launched.stdout) == (cold.returncode, cold.stdout)

    command, args = warm.command(["scan", "--stdin"], w.env)
    proc = subprocess.Popen([command, *args], env=w.env, cwd=w.repo, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    time.sleep(1)  # the launcher has handed over; `oms scan --stdin` waits for stdin's end
    assert proc.poll() is None
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM, err


def test_a_pty_child_goes_warm_with_the_terminal_as_its_own(
    twins: tuple[World, World], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`oms policy trust` asks only a controlling terminal: forked warm by `oms_at_pty`, it
    prompts at the pty and takes the typed yes as a fresh child set up by CHILD does."""
    started: list[object] = []

    def spawned(*args: object, **kw: object) -> object:
        child = warm.spawn_warm(*args, **kw)  # type: ignore[arg-type]
        started.append(child)
        return child

    monkeypatch.setattr(support_pty, "spawn_warm", spawned)
    for w in twins:
        assert run_oms(["init", "--json"], env=w.env, cwd=w.repo).returncode == 0
        tip = commit_policy(w.repo, env=w.env)  # trust_tip: `oms policy trust` at a pty, yes
        shown = run_oms(["policy", "show", "--json"], env=w.env, cwd=w.repo)
        assert json.loads(shown.stdout)["mark"]["commit"] == tip
    assert len(started) == 2 and all(c is not None for c in started)
