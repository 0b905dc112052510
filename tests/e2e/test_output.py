"""Output people read, through the real CLI: a FAILED candidate's human output carries the
tail of its check's output; progress goes to stderr (never into --json stdout); a refused
delivery still shows its READY verdict; a long approval prompt is paged at the terminal
and every file that would leave is listed."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.repos import commit_on, git, make_repo
from support.sandbox import NEEDS_BWRAP_AND_PYTHON, PY

POLICY = f"""version = 1

[[checks]]
name = "unit"
cmd = ["{PY}", "check.py"]
timeout_s = 30
"""
PASSING = "print('all good')\n"
FAILING = "import sys\nfor i in range(30):\n    print(f'boom {i}', file=sys.stderr)\nsys.exit(1)\n"
STAGES = ("protected paths", "secrets", "plan", "toolchains", "sandbox probe", "checks")


@dataclass(frozen=True)
class Gate:
    root: Path
    repo: Path
    env: dict[str, str]

    def oms(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_oms(args, env=self.env, cwd=self.root, timeout=180)

    def process(self, candidate: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.oms("process-result", "--repo", str(self.repo), "--candidate", candidate,
                        *extra)  # fmt: skip


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    root = tmp_path_factory.mktemp("output")
    (root / "home").mkdir()
    env = clean_env(root / "home", root / "oms-state")
    files = {"oms.toml": POLICY, "check.py": PASSING}
    repo = make_repo(root / "repo", files, env=env, message="base")
    commit_on(repo, "cand/broken", {"check.py": FAILING}, env=env, index=root / "i1")
    commit_on(repo, "cand/ready", {"README.md": "more\n"}, env=env, index=root / "i2")
    g = Gate(root, repo, env)
    assert g.oms("init", "--repo", str(repo)).returncode == 0
    return g


@NEEDS_BWRAP_AND_PYTHON
def test_failed_candidate_human_output_shows_the_check_and_its_output_tail(gate: Gate) -> None:
    proc = gate.process("cand/broken")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("FAILED: ") and "  - check unit exited 1" in lines
    assert any(re.fullmatch(r"  check unit: exit 1 in \d+\.\d s", x) for x in lines), lines
    at = lines.index("check unit (exit 1): last 20 line(s) of stderr:")
    assert lines[at + 1 :] == [f"  boom {i}" for i in range(10, 30)]
    assert "\x1b" not in proc.stdout  # not a terminal: plain text
    assert "oms: check unit: exit 1 in" in proc.stderr  # progress, on stderr only


@NEEDS_BWRAP_AND_PYTHON
def test_progress_is_on_stderr_in_stage_order_and_never_in_json_stdout(gate: Gate) -> None:
    proc = gate.process("cand/broken", "--json")
    out = parse_single_json(proc)  # stdout: exactly one object
    assert out["decision"] == "FAILED"
    progress = proc.stderr.splitlines()
    assert progress and all(x.startswith("oms: ") for x in progress), progress
    starts = [x[5 : -len(": started")] for x in progress if x.endswith(": started")]
    assert starts == ["change", *STAGES]
    for stage in STAGES[:-1]:
        assert any(re.fullmatch(rf"oms: {stage}: done in \d+\.\d s", x) for x in progress)
    assert "oms: checks: done in" in proc.stderr and proc.stderr.rstrip().endswith("FAILED")
    assert "oms: check unit: running (time-out 30 s)" in progress
    assert any(x.startswith("oms: scan: ") and "item(s)" in x for x in progress)
    quiet = gate.process("cand/broken", "--json", "--no-progress")
    assert parse_single_json(quiet)["decision"] == "FAILED" and quiet.stderr == ""


@NEEDS_BWRAP_AND_PYTHON
def test_a_refused_delivery_still_shows_the_ready_verdict(gate: Gate) -> None:
    # A remote branch the verified commit does not contain: the push (never forced) is
    # refused after the READY verdict was recorded.
    bare = gate.root / "remote.git"
    git(gate.root, "init", "-q", "--bare", str(bare), env=gate.env)
    git(gate.repo, "remote", "add", "backup", str(bare), env=gate.env)
    git(gate.repo, "push", "-q", "backup", "cand/broken:refs/heads/diverged", env=gate.env)
    deliver = ("--deliver-branch", "diverged", "--push", "backup")
    proc = gate.process("cand/ready", *deliver, "--no-progress")
    assert proc.returncode != 0
    lines = proc.stdout.splitlines()
    assert lines and lines[0].startswith("READY_FOR_HUMAN: "), (proc.stdout, proc.stderr)
    judged = (
        r"  judged [0-9a-f]{12}\.\.[0-9a-f]{12}, 1 commit, by the policy at the trusted "
        r"mark [0-9a-f]{12} on refs/heads/main \(init, entry \d+\)"
    )
    assert re.fullmatch(judged, lines[1])
    assert re.fullmatch(r"  check unit: ok in \d+\.\d s", lines[2])
    assert lines[3] == "  note: tests not inventoried (no report declared): unit"
    assert lines[-1].startswith("delivery refused: ") and len(lines) == 5
    assert proc.stderr.startswith("oms: ") and proc.stderr.count("\n") == 1
    as_json = parse_single_json(gate.process("cand/ready", *deliver, "--json"))
    assert as_json["decision"] == "READY_FOR_HUMAN" and as_json["delivered"]["error"]


# --------------------------------------------------------------- approval prompt ---

PTY_CHILD = (
    "import fcntl, os, sys, termios\n"
    "os.setsid()\n"
    "fd = os.open(sys.argv[1], os.O_RDWR)\n"
    "fcntl.ioctl(fd, termios.TIOCSCTTY, 0)\n"
    "os.close(fd)\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'gatekeeper', *sys.argv[2:]])\n"
)
MORE = re.compile(rb"-- (\d+) of (\d+) lines shown: Enter for more, q to stop \(not approved\) -- ")
QUESTION = b"Type 'yes' to approve: "
ROWS = 12


@pytest.fixture
def previewed(tmp_path: Path) -> tuple[Path, dict[str, str], dict[str, object]]:
    (tmp_path / "home").mkdir()
    env = clean_env(tmp_path / "home", tmp_path / "oms-state")
    files = {f"docs/f{i:02}.md": f"page {i}\n" for i in range(30)}
    files["docs/odd\u202ename.md"] = "odd\n"
    repo = make_repo(tmp_path / "repo", files, env=env)
    assert run_oms(["init", "--repo", repo], env=env).returncode == 0
    proc = run_oms(["transfer", "preview", "--repo", repo, "--to", "anthropic:claude",
                    "--purpose", "review", "--context", "paths", "--path", "docs", "--json"],
                   env=env)  # fmt: skip
    return repo, env, parse_single_json(proc)


def _until(master: int, proc: subprocess.Popen[bytes]) -> bytes:
    """What the terminal shows until it waits for a key: a "more" line or the question."""
    screen, deadline = b"", time.monotonic() + 60
    while not (MORE.search(screen) or QUESTION in screen) and proc.poll() is None:
        assert time.monotonic() < deadline, f"the terminal never waited for a key: {screen!r}"
        if select.select([master], [], [], 0.2)[0]:
            screen += os.read(master, 65536)
    return screen


def _approve_at_small_pty(
    repo: Path, env: dict[str, str], digest: str, code: str, stop_at: int | None = None
) -> tuple[int, str, list[bytes]]:
    """`oms transfer approve` at a terminal of ROWS rows: Enter at each "more" line (`q` at
    page `stop_at`), then `yes`. (exit code, stdout, the screens shown before each key)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, 100, 0, 0))
    args = ["transfer", "approve", digest, "--code", code, "--repo", str(repo), "--json"]
    proc = subprocess.Popen([sys.executable, "-c", PTY_CHILD, os.ttyname(slave), *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)  # fmt: skip
    screens: list[bytes] = []
    try:
        while proc.poll() is None:
            screens.append(_until(master, proc))
            if QUESTION in screens[-1]:
                os.write(master, b"yes\n")
                break
            os.write(master, b"q\n" if len(screens) == stop_at else b"\n")
            if len(screens) == stop_at:
                break
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(slave)
        os.close(master)
    return proc.returncode, out.decode(), screens


def _command(res: dict[str, object]) -> tuple[str, str]:
    packet = res["approval_packet"]
    assert isinstance(packet, dict)
    m = re.search(
        r"approve (sha256:[0-9a-f]{64}) --code ([0-9a-f]{8})", packet["copyable_text_block"]
    )
    assert m is not None
    return m.group(1), m.group(2)


def test_a_long_approval_prompt_is_paged_and_lists_every_file_that_leaves(
    previewed: tuple[Path, dict[str, str], dict[str, object]],
) -> None:
    repo, env, res = previewed
    digest, code = _command(res)
    manifest = res["manifest"]
    assert isinstance(manifest, dict)
    items = manifest["items"]
    rc, out, screens = _approve_at_small_pty(repo, env, digest, code)
    assert rc == 0, out
    assert json.loads(out)["status"] == "approved"
    shown = b"".join(screens).decode().replace("\r\n", "\n")
    assert len(screens) > len(items) // (ROWS - 1)  # the files alone fill that many screens
    for screen in screens[:-1]:
        assert MORE.search(screen) and QUESTION not in screen  # the question comes last
        assert len(MORE.sub(b"", screen).decode().replace("\r\n", "\n").splitlines()) <= ROWS
    for item in items:
        path = item["path"].replace("\u202e", "\\u202e")
        assert f"  {path} ({item['bytes']} bytes, {item['mode']})" in shown, path
    assert "\u202e" not in shown


def test_stopping_the_pager_approves_nothing(
    previewed: tuple[Path, dict[str, str], dict[str, object]],
) -> None:
    repo, env, res = previewed
    digest, code = _command(res)
    rc, out, screens = _approve_at_small_pty(repo, env, digest, code, stop_at=2)
    assert rc == 3 and len(screens) == 2
    refused = json.loads(out)
    assert refused["error"]["message"] == (
        "not approved at the terminal: the prompt was not read to its end"
    )
    shown = run_oms(["transfer", "show", digest, "--repo", repo, "--json"], env=env)
    assert parse_single_json(shown)["status"] == "previewed"


def test_preview_human_output_lists_the_files_that_would_leave(
    previewed: tuple[Path, dict[str, str], dict[str, object]],
) -> None:
    repo, env, res = previewed
    digest, _ = _command(res)
    proc = run_oms(["transfer", "show", digest, "--repo", repo], env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "files that leave (31):" in lines
    assert "  docs/odd\\u202ename.md (4 bytes, full)" in lines
