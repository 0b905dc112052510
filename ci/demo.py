"""`make demo`: what a user of oms sees, on a sample repository made in a temporary folder.

Everything happens under one temporary directory (the sample repository, its OMS_HOME,
toolchains and agent workspaces), so the demo never touches your real state. Each step says
in one line why it is there, then shows the command and what it printed, as at a terminal:
the human output, not `--json` (JSON only where the step is about JSON). The transfer
approval is typed at a real pseudo-terminal, because oms reads a human's yes only there.
The demo stops with a clear message at the first step that answers other than expected.
"""

from __future__ import annotations

import base64
import json
import os
import pty
import re
import secrets
import select
import shlex
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OMS = [sys.executable, "-m", "gatekeeper"]
PROMPT = b"Type 'yes'"
TERMINAL_TIMEOUT_S = 120
APPROVE = re.compile(r"oms transfer approve (sha256:[0-9a-f]{64}) --code ([0-9a-f]+)")


class DemoFailed(Exception):
    """A step answered other than the demo expects."""


class Demo:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.repo = work / "sample-repo"
        self.env = {**os.environ, "OMS_HOME": str(work / "oms-home"),
                    "OMS_WORK_DIR": str(work / "agent-work"),
                    "OMS_TOOLCHAIN_DIR": str(work / "toolchains")}  # fmt: skip
        self.steps = 0

    def why(self, text: str) -> None:
        self.steps += 1
        print(f"\n{self.steps}. {text}")

    def sh(self, *argv: str, show: bool = False) -> None:
        if show:
            print(f"$ {shlex.join(argv)}")
        subprocess.run(argv, cwd=self.repo, check=True, env=self.env, capture_output=True,
                       stdin=subprocess.DEVNULL)  # fmt: skip

    def oms(self, *args: str, expect: int = 0, show: bool = True) -> str:
        """`oms ARGS` as a user runs it: its output shown as printed; its stdout returned."""
        print(f"$ oms {shlex.join(args)}")
        proc = subprocess.run([*OMS, *args], cwd=self.repo, env=self.env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL)  # fmt: skip
        if show:
            for text in (proc.stdout, proc.stderr):
                if text.strip():
                    print(_indent(text))
        if proc.returncode != expect:
            raise DemoFailed(f"`oms {shlex.join(args)}` exited {proc.returncode}, expected "
                             f"{expect}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")  # fmt: skip
        return proc.stdout

    def at_terminal(self, *args: str, answer: bytes) -> str:
        """`oms ARGS` with a pseudo-terminal as its controlling terminal; `answer` typed at
        its prompt. What the terminal showed."""
        print(f"$ oms {shlex.join(args)}")
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its terminal
            try:
                os.chdir(self.repo)
                os.execve(OMS[0], [*OMS, *args], self.env)  # noqa: S606 -- oms itself, no shell
            finally:
                os._exit(127)
        screen, answered = b"", False
        deadline = time.monotonic() + TERMINAL_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([fd], [], [], 1.0)
                if not ready:
                    continue
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the child has closed the terminal
                    break
                if not chunk:
                    break
                screen += chunk
                if not answered and PROMPT in screen:
                    os.write(fd, answer)
                    answered = True
            else:
                os.kill(pid, 9)
        finally:
            os.close(fd)
            _, status = os.waitpid(pid, 0)
        shown = screen.decode("utf-8", "replace").replace("\r\n", "\n")
        print(_indent(shown))
        if not answered or os.waitstatus_to_exitcode(status) != 0:
            raise DemoFailed(f"`oms {shlex.join(args)}` at the terminal was not accepted:\n{shown}")
        return shown


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.rstrip("\n").splitlines())


def fake_cloud_key() -> str:
    # Built at run time so that no scanner finds a key in this file.
    return "AKIA" + "".join(secrets.choice(string.ascii_uppercase + "234567") for _ in range(16))


CALC = "def add(a, b):\n    return a + b\n"
TESTS = """import unittest

from calc import add


class TestCalc(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
"""
LOCK = "# the tests use only the standard library: nothing to pin\n"


def make_sample_repo(d: Demo) -> None:
    d.repo.mkdir()
    d.sh("git", "init", "-q", "-b", "main")
    d.sh("git", "config", "user.email", "demo@example.invalid")
    d.sh("git", "config", "user.name", "oms demo")
    d.sh("git", "config", "commit.gpgsign", "false")
    (d.repo / "calc.py").write_text(CALC)
    (d.repo / "test_calc.py").write_text(TESTS)
    (d.repo / "requirements.lock").write_text(LOCK)
    d.sh("git", "add", "-A")
    d.sh("git", "commit", "-q", "-m", "sample project")
    print(f"A sample Python project (calc.py, a unittest suite) in {d.repo}")


def agent_commit(d: Demo, branch: str, files: dict[str, str], message: str) -> None:
    """An agent-like commit on its own branch from main."""
    d.sh("git", "checkout", "-q", "-b", branch, "main")
    for name, text in files.items():
        (d.repo / name).write_text(text)
    d.sh("git", "add", "-A")
    d.sh("git", "commit", "-q", "-m", message)
    d.sh("git", "checkout", "-q", "main")
    print(f"(an agent committed {', '.join(files)} on {branch})")


def setup(d: Demo) -> None:
    d.why("oms keeps its signing key, evidence log and approvals outside the repository;"
          " init creates them")  # fmt: skip
    d.oms("init")
    d.why("the result gate runs the plan in oms.toml: policy init writes a starter for"
          " the project")  # fmt: skip
    d.oms("policy", "init", "--template", "python")
    # Reviewing the starter: this project's tests are unittest, not pytest.
    policy = d.repo / "oms.toml"
    text = policy.read_text().replace('cmd = ["python", "-m", "pytest", "-q"]',
                                      'cmd = ["python", "-m", "unittest", "-q"]')  # fmt: skip
    text = text.replace('report = "pytest"', 'report = "unittest"')
    policy.write_text(text)
    print('(reviewed: the tests are unittest, so the check runs ["python", "-m", "unittest",'
          ' "-q"] and reports as unittest)')  # fmt: skip
    d.why("the policy is trusted only from the default branch, never from a candidate:"
          " commit it on main")  # fmt: skip
    d.sh("git", "add", "oms.toml", show=True)
    d.sh("git", "commit", "-q", "-m", "oms policy", show=True)
    d.why("a commit on main is not trusted by being there (an agent could make it): a human"
          " trusts it at the terminal, after reading its diff")  # fmt: skip
    d.at_terminal("policy", "trust", answer=b"yes\n")
    d.oms("policy", "check")
    d.why("the sandbox has no network: the toolchain is built outside it, from the lock on"
          " main")  # fmt: skip
    d.oms("toolchain", "prepare")
    d.why("doctor says whether the next gate can run: sandbox, scanners, key, evidence")
    d.oms("doctor")


def gates(d: Demo) -> int:
    mul = CALC + "\n\ndef mul(a, b):\n    return a * b\n"
    agent_commit(d, "agent/mul", {"calc.py": mul}, "add mul")
    d.why("an agent's commit meets the gate: checks in the sandbox on an exact copy, both"
          " scanners")  # fmt: skip
    out = d.oms("process-result", "--candidate", "agent/mul")
    seq = re.search(r"evidence seq (\d+)", out)
    key = fake_cloud_key()
    agent_commit(d, "agent/settings", {"settings.py": f'AWS_KEY = "{key}"\n'}, "add settings")
    d.why("a commit that holds a cloud key is BLOCKED, and the key is never printed")
    out = d.oms("process-result", "--candidate", "agent/settings", "--no-progress", expect=3)
    if key in out:
        raise DemoFailed("the key was printed")
    return int(seq.group(1)) if seq else -1


# The stand-in agent: its edit, then two things it must not be able to do ($1: oms' state).
AGENT_SCRIPT = """echo agent: start
printf 'def add(a, b):\\n    return a + b\\n\\n\\ndef sub(a, b):\\n    return a - b\\n' > calc.py
test -e "$1" && echo "agent: I can read oms state" || echo "agent: oms state is not here"
oms transfer approve sha256:0000000000000000000000000000000000000000000000000000000000000000 \\
  --code 000000 >/dev/null 2>&1; echo "agent: oms transfer approve exited $?"
echo agent: end
"""


def agent(d: Demo) -> None:
    (d.repo / "agent.sh").write_text(AGENT_SCRIPT)
    d.sh("git", "add", "agent.sh")
    d.sh("git", "commit", "-q", "-m", "a stand-in agent")
    print("(agent.sh, committed on main, stands in for an agent: it edits calc.py, then"
          " tries to read oms' state and to approve a transfer)")  # fmt: skip
    d.why("oms agent run: the agent works in its own clone, without oms' state, key or"
          " network")  # fmt: skip
    out = d.oms("agent", "run", "--egress", "none", "--", "/bin/sh", "agent.sh",
                d.env["OMS_HOME"])  # fmt: skip
    ref = re.search(r"as (refs/oms/runs/\S+)", out)
    if ref is None or "agent: oms state is not here" not in out:
        raise DemoFailed("the agent's edit did not come back, or it could reach oms state")
    d.why("its edit came back as a run ref; the gate judges it from the base it recorded")
    d.oms("process-result", "--candidate", ref.group(1), "--no-progress")


def transfer(d: Demo) -> None:
    notes = d.repo / "notes"
    notes.mkdir()
    key = fake_cloud_key()
    (notes / "setup.md").write_text(f"# Setup\n\nDeploy with the usual script.\nkey: {key}\n")
    d.sh("git", "add", "-A")
    d.sh("git", "commit", "-q", "-m", "setup notes")
    print("(notes/setup.md, committed on main, holds a cloud key)")
    ask = ("transfer", "preview", "--to", "anthropic:claude-sonnet", "--purpose",
           "summarise the setup notes", "--context", "paths", "--path", "notes")  # fmt: skip
    d.why("before repo context leaves for a model provider, preview what would go: a key"
          " blocks it")  # fmt: skip
    d.oms(*ask, expect=3)
    d.why("with --redact the line holding the key is replaced; a human approves the exact"
          " bytes")  # fmt: skip
    out = d.oms(*ask, "--redact")
    found = APPROVE.search(out)
    if found is None:
        raise DemoFailed("the preview gave no approval command")
    digest, code = found.groups()
    d.why("the approval is read only from a terminal (never stdin, never an agent): type yes")
    d.at_terminal("transfer", "approve", digest, "--code", code, answer=b"yes\n")
    d.why("release writes exactly the approved bytes, once")
    payload = d.work / "payload.out"
    d.oms("transfer", "release", digest, "--out", str(payload))
    body = payload.read_text()
    if key in body:
        raise DemoFailed("the key is in the released payload")
    print(f"({len(body)} bytes released; the key is not in them)")
    d.why("a second release of the same approval is refused")
    d.oms("transfer", "release", digest, "--out", str(d.work / "again.out"), expect=3)


def evidence(d: Demo, ready_seq: int) -> None:
    d.why("every step above is a signed, hash-chained evidence entry: audit checks them all")
    d.oms("evidence", "audit")
    d.why("the READY verdict as a DSSE envelope (an in-toto Statement, a SLSA VSA): JSON,"
          " as tools read it")  # fmt: skip
    out = d.oms("evidence", "export", str(ready_seq), "--dsse", "--json", show=False)
    env = json.loads(out).get("envelope", {})
    statement = json.loads(base64.b64decode(env["payload"]))
    print(_indent(json.dumps({"payloadType": env["payloadType"], "statement": statement},
                             indent=2)))  # fmt: skip
    d.why("flip one byte of the log and audit again: the tampering is caught")
    logs = list((Path(d.env["OMS_HOME"]) / "repos").glob("*/evidence/log.jsonl"))
    if len(logs) != 1:
        raise DemoFailed(f"expected one evidence log, found {len(logs)}")
    data = bytearray(logs[0].read_bytes())
    where = data.index(b'"kind":"result"')
    data[where + 1] ^= 0x20  # "kind" -> "Kind"
    logs[0].write_bytes(bytes(data))
    print(f"(changed byte {where + 1} of {logs[0].name})")
    d.oms("evidence", "audit", expect=3)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="oms-demo-") as tmp:
        d = Demo(Path(tmp))
        try:
            make_sample_repo(d)
            setup(d)
            ready_seq = gates(d)
            agent(d)
            transfer(d)
            evidence(d, ready_seq)
        except DemoFailed as exc:
            print(f"\ndemo: step {d.steps} failed: {exc}", file=sys.stderr)
            return 1
        print("\ndemo: every step answered as expected")
        return 0


if __name__ == "__main__":
    sys.exit(main())
