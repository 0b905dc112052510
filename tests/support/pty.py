"""A child with a pseudo-terminal as its controlling terminal and stdin on /dev/null, and
an answer typed at its prompt: how a test is the human at a terminal.

The child calls `setsid()` and opens the pty's slave (TIOCSCTTY), so `/dev/tty` is the pty;
its stdin stays /dev/null, so nothing an agent pipes in can answer. `at_pty` runs
`python ARGS` that way; `oms_at_pty` the real CLI (forked from the warm interpreter of
support/warm.py when it can be, set up the same way); `continue_at_pty` calls
`flow.continue_run(..., "approve", via="terminal")` directly (what `oms run continue RUN
--approve` does), printing its JSON or its refusal as the CLI would.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from support.oms import run_oms
from support.warm import WarmChild, spawn_warm

PROMPT = b"Type 'yes'"
TIMEOUT_S = 60

CHILD = (
    "import fcntl, os, sys, termios\n"
    "os.setsid()\n"
    "fd = os.open(sys.argv[1], os.O_RDWR)\n"
    "fcntl.ioctl(fd, termios.TIOCSCTTY, 0)\n"
    "os.close(fd)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
)

# The same child with its stdin and stdout on the terminal too: a command run by hand at a
# shell, for the prompts that ask only when stdin and stdout are a terminal (`oms init`).
CHILD_STDIO = CHILD.replace("os.close(fd)\n", "os.dup2(fd, 0)\nos.dup2(fd, 1)\nos.close(fd)\n")

CONTINUE = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from gatekeeper.errors import refusal\n"
    "from gatekeeper.work.runs import flow\n"
    "try:\n"
    "    out, code = flow.continue_run(Path(sys.argv[1]), sys.argv[2], sys.argv[3],\n"
    "                                  via='terminal')\n"
    "except Exception as exc:\n"
    "    e = refusal(exc)\n"
    "    out, code = {'error': {'kind': e.kind, 'message': e.message, 'data': e.data}}, "
    "e.exit_code\n"
    "print(json.dumps(out))\n"
    "sys.exit(code)\n"
)


@dataclass(frozen=True)
class AtPty:
    code: int
    out: str
    err: str
    screen: str  # what the terminal showed (the pty turns \n into \r\n)


def at_pty(args: Sequence[str], answer: bytes | None, *, env: Mapping[str, str], cwd: Path,
           prompt: bytes = PROMPT, stdio: bool = False) -> AtPty:  # fmt: skip
    """Run `python ARGS` at a pty; when `answer` is given, wait for `prompt` and type it
    (an AssertionError when the child ends without prompting). `stdio`: stdin and stdout
    are the terminal as well (what they print is on `screen`, `out` stays empty)."""
    master, slave = os.openpty()
    proc: subprocess.Popen[bytes] | WarmChild | None = None
    if list(args[:2]) == ["-m", "gatekeeper"]:  # the CLI: forked warm, set up as CHILD does
        proc = spawn_warm(args[2:], env=env, cwd=cwd, stdin_devnull=True,
                          ctty=os.ttyname(slave), ctty_stdio=stdio)  # fmt: skip
    if proc is None:
        child = CHILD_STDIO if stdio else CHILD
        proc = subprocess.Popen([sys.executable, "-c", child, os.ttyname(slave), *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=dict(env), cwd=cwd)  # fmt: skip
    screen = b""
    try:
        # The parent keeps its slave fd open: until the child opens the terminal, a read on
        # the master would otherwise fail with EIO.
        deadline = time.monotonic() + TIMEOUT_S
        while answer is not None and prompt not in screen and proc.poll() is None:
            assert time.monotonic() < deadline, f"no prompt at the terminal: {screen!r}"
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                screen += os.read(master, 65536)
        if answer is not None:
            if prompt not in screen:
                out, err = proc.communicate(timeout=TIMEOUT_S)
                raise AssertionError(f"no prompt at the terminal: {screen!r} {out!r} {err!r}")
            os.write(master, answer)
        if stdio:  # what it prints after the answer is on the terminal: read it all
            screen += _read_until_exit(master, proc)
        out, err = proc.communicate(timeout=TIMEOUT_S * 5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(slave)
        os.close(master)
    return AtPty(proc.returncode, out.decode(), err.decode(), screen.decode("utf-8", "replace"))


def _read_until_exit(master: int, proc: subprocess.Popen[bytes] | WarmChild) -> bytes:
    got = b""
    deadline = time.monotonic() + TIMEOUT_S * 5
    while True:
        ended = proc.poll() is not None
        ready, _, _ = select.select([master], [], [], 0 if ended else 0.2)
        if ready:
            got += os.read(master, 65536)
        elif ended:
            return got
        assert time.monotonic() < deadline, f"the child did not end: {got!r}"


def oms_at_pty(args: Sequence[str], answer: bytes | None, *, env: Mapping[str, str],
               cwd: Path, prompt: bytes = PROMPT, stdio: bool = False) -> AtPty:  # fmt: skip
    """The real CLI, `oms ARGS`, at a pty."""
    return at_pty(["-m", "gatekeeper", *args], answer, env=env, cwd=cwd, prompt=prompt,
                  stdio=stdio)  # fmt: skip


def continue_at_pty(repo: Path, run_id: str, answer: bytes | None, *, env: Mapping[str, str],
                    approval: str = "approve") -> AtPty:  # fmt: skip
    """`flow.continue_run(repo, run_id, approval, via="terminal")` at a pty."""
    return at_pty(["-c", CONTINUE, str(repo), run_id, approval], answer, env=env, cwd=repo)


Done = subprocess.CompletedProcess[str]


def continue_without_terminal(repo: Path, run_id: str, *, env: Mapping[str, str],
                              approval: str = "approve",
                              stdin: bytes = b"yes\n") -> Done:  # fmt: skip
    """The same call in a new session with no controlling terminal, `stdin` piped in (a
    yes there must count for nothing)."""
    return subprocess.run([sys.executable, "-c", CONTINUE, str(repo), run_id, approval],
                          input=stdin.decode(), capture_output=True, text=True, env=dict(env),
                          cwd=repo, start_new_session=True, timeout=TIMEOUT_S * 5,
                          check=False)  # fmt: skip


def approve_copied(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> tuple[int, str]:
    """A next action's copied `oms transfer approve …` (its argv, from `transfer` on) at a
    pty, answering yes: (exit code, stdout and stderr)."""
    words = list(argv[list(argv).index("transfer") :])
    got = oms_at_pty([*words, "--json"], b"yes\n", env=env, cwd=cwd)
    return got.code, got.out + got.err


def trust_tip(repo: Path, *, env: Mapping[str, str], required: bool = True) -> None:
    """`oms policy trust` at a pty, answered yes: the human trusts the default branch's tip
    (a policy committed after `oms init`). Nothing is asked when the tip is the mark, nor
    (`required=False`) when oms has no mark for the repository yet."""
    shown = run_oms(["policy", "show", "--repo", str(repo), "--json"], env=env, cwd=repo,
                    timeout=TIMEOUT_S)  # fmt: skip
    mark = json.loads(shown.stdout).get("mark")
    if mark is None and not required:
        return
    assert mark is not None, shown.stdout
    if mark["commit"] == mark["tip"]:
        return
    got = oms_at_pty(["policy", "trust", "--repo", str(repo), "--json"], b"yes\n", env=env,
                     cwd=repo)  # fmt: skip
    assert got.code == 0, (got.out, got.err, got.screen)
