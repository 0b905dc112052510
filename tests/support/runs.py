"""Runs end to end: an `oms init`ed repository whose default branch's policy has scripted
`command:` roles for every run role, run under the real `oms agent run` (bwrap).

The scripted provider (`SCRIPT`) reads the brief document from stdin (never argv) and
answers markdown that names what it saw, so a test can assert what reached it. Its argv
(from the trusted policy) picks a behaviour: `answer` (default), `fail` (exit 3),
`empty` (prints nothing), `hang`, `implement` (writes `feature.py` and exits 0: the
implementer), a grader's `grade`, and `leak:<piece>:<piece>…` (the answer, with a line
naming the pieces joined: a token no policy line holds whole).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from anyio.from_thread import start_blocking_portal
from mcp import StdioServerParameters

from gatekeeper.agent.mcp_relay import RUN_ID_ENV
from gatekeeper.gates.records import init
from support import warm
from support.env import clean_env, use_clean_git_here
from support.mcp_session import session as mcp_session
from support.mcp_session import text_of
from support.pty import trust_tip
from support.repos import commit_on, make_repo

PY = "/usr/bin/python3"
NEEDS = (os.access("/usr/bin/bwrap", os.X_OK) and os.access(PY, os.X_OK))  # fmt: skip

SCRIPT = r"""
import json, os, sys, time
mode = sys.argv[1]
raw = sys.stdin.buffer.read()
doc = json.loads(raw) if raw else {}
if mode == "hang":
    time.sleep(600)
if mode == "fail":
    print("something went wrong")
    sys.exit(3)
if mode == "empty":
    sys.exit(0)
if mode == "implement":
    with open("feature.py", "w") as f:
        f.write("def feature():\n    return %r\n" % doc.get("title", "x"))
    print("implemented")
    sys.exit(0)
if mode == "grade":
    print(json.dumps({"grade": "pass", "reasons": ["looks right"], "confidence": 0.9}))
    sys.exit(0)
if mode == "garbage":
    print("not json at all")
    sys.exit(0)
print("# %s answer (%s)" % (doc.get("role"), doc.get("kind")))
print("")
if mode.startswith("leak:"):
    print("deploy token: %s" % "".join(mode.split(":")[1:]))
print("goal: %s" % doc.get("goal"))
print("brief: %s" % doc.get("brief"))
print("evidence: %s" % json.dumps([e.get("ref") for e in doc.get("evidence", [])]))
print("files: %s" % sorted(os.listdir(".")))
"""

ROLE = """[roles.{name}]
provider = "command:{provider}"
model = "scripted"
auth = "none"
billing = "none"
transport = "exec"
authority = "{authority}"
unattended = true
timeout_s = {timeout}
"""
UNIT = (PY, "-m", "unittest", "-q")
READ_ROLES = ("orchestrator", "planner", "researcher", "qa", "verifier", "critic")


def _s(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string


def policy(*, modes: Mapping[str, str] | None = None, external: tuple[str, ...] = (),
           autopilot: tuple[str, ...] = (), roles: tuple[str, ...] = READ_ROLES,
           implementer: bool = True, extra: str = "", timeout: int = 60) -> str:  # fmt: skip
    """The default branch's `oms.toml`: one check (unittest), a `command:<role>` provider per
    run role (engine `command:<role>`, model `scripted`), an implementer and a grader.
    `modes` picks a role's behaviour; a role in `external` declares `external = true`
    (so it needs a transfer); `autopilot` lists roles whose transfers an autopilot rule
    approves."""
    modes = dict(modes or {})
    out = ["version = 1", "", "[[checks]]", 'name = "unit"',
           "cmd = [" + ", ".join(_s(a) for a in UNIT) + "]", "timeout_s = 120", "",
           "[work]", 'grader = "grader"', "max_attempts = 2", ""]  # fmt: skip
    names = list(roles) + (["implementer"] if implementer else []) + ["grader"]
    for name in names:
        authority = "worktree-write" if name == "implementer" else "read-only"
        mode = modes.get(name, {"implementer": "implement", "grader": "grade"}.get(name, "answer"))
        out.append(ROLE.format(name=name, provider=name, authority=authority, timeout=timeout))
        out += [f"[providers.{name}]", f'cmd = [{_s(PY)}, "-c", {_s(SCRIPT)}, {_s(mode)}]']
        if name in external:
            out.append("external = true")
        out.append("")
    for name in autopilot:
        out += ["[[transfer.autopilot]]", f'name = "auto-{name}"',
                f'destinations = ["command:{name}:scripted"]', "max_bytes = 10000000",
                'context = ["repo", "none"]', "require_clean_pushed = false", ""]  # fmt: skip
    out.append(extra)
    return "\n".join(out)


TEST_MOD = ("import unittest\n\n\nclass T(unittest.TestCase):\n"
            "    def test_ok(self):\n        self.assertTrue(True)\n")  # fmt: skip


@dataclass
class RunLab:
    """A repository for runs: `set_policy` commits a new `oms.toml` to main and trusts it
    (`oms policy trust` at a pty)."""

    root: Path
    repo: Path
    env: dict[str, str]
    n: int = 0

    def set_policy(self, text: str) -> None:
        self.n += 1
        commit_on(self.repo, "main", {"oms.toml": text}, env=self.env,
                  index=self.root / f"index-{self.n}", message="policy")  # fmt: skip
        trust_tip(self.repo, env=self.env)  # a human trusts it at a terminal


def run_lab(tmp_path: Path, env: dict[str, str], **policy_args: Any) -> RunLab:
    """A repository with `test_mod.py`, the runs policy on main, `oms init`ed."""
    repo = make_repo(tmp_path / "repo", {"test_mod.py": TEST_MOD,
                                         "oms.toml": policy(**policy_args)}, env=env)  # fmt: skip
    init(repo)
    return RunLab(tmp_path, repo, env)


def module_env(root: Path, mp: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a module-scoped lab under `root`: its own HOME, `$OMS_HOME` and
    `$OMS_WORK_DIR`, set in this process too (`oms init` and the runs functions run here)
    through `mp`, and the clean git environment."""
    home = root / "home"
    home.mkdir(exist_ok=True)
    env = {**clean_env(home, root / "oms-state"), "OMS_WORK_DIR": str(root / "work")}
    for k in ("HOME", "OMS_HOME", "OMS_WORK_DIR"):
        mp.setenv(k, env[k])
    mp.delenv("XDG_STATE_HOME", raising=False)
    use_clean_git_here(env, mp)
    return env


# -- a real MCP client ------------------------------------------------------------------------

MAX_RESULT_BYTES = 8 * 1024


@dataclass
class Mcp:
    """`oms mcp --repo` of a lab as a subprocess, with a real client session on a portal
    thread; every result is measured as sent against the 8 KiB bound."""

    lab: RunLab
    sizes: dict[str, int] = field(default_factory=dict)  # the largest result of each tool
    # The agent run this server answers for, as the broker of `oms agent run` starts the
    # `oms mcp` outside that the relay inside reaches (`mcp_relay.RUN_ID_ENV`).
    agent_run: str | None = None

    def __enter__(self) -> Mcp:
        name = f"mcp-{self.agent_run}" if self.agent_run else "mcp"
        self._errlog = open(self.lab.root / f"{name}.stderr", "w")  # closed in __exit__
        self._portal_cm = start_blocking_portal()
        portal = self._portal_cm.__enter__()
        env = {**self.lab.env, RUN_ID_ENV: self.agent_run} if self.agent_run else self.lab.env
        command, args = warm.command(["mcp", "--repo", str(self.lab.repo), "--tools", "all"], env)
        params = StdioServerParameters(command=command, args=args, env=env, cwd=str(self.lab.root))
        self._session_cm = portal.wrap_async_context_manager(mcp_session(params, self._errlog, 300))
        self.session = self._session_cm.__enter__()
        self.portal = portal
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._session_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)
            self._errlog.close()

    def call(self, name: str, args: dict[str, Any] | None = None) -> types.CallToolResult:
        result = self.portal.call(lambda: self.session.call_tool(name, args or {}, 300))
        assert isinstance(result, types.CallToolResult)
        sent = text_of(result)
        size = len(sent.encode())
        assert size <= MAX_RESULT_BYTES, f"{name}: {size} bytes sent, over 8 KiB"
        self.sizes[name] = max(size, self.sizes.get(name, 0))
        return result

    def doc(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """A tool that answers a result (ok or not): its `{ok, truncated, data}`."""
        result = self.call(name, args)
        assert not result.is_error, (name, args, result.content)
        [c] = result.content
        assert isinstance(c, types.TextContent)
        doc = json.loads(c.text)
        assert doc == result.structured_content
        return doc

    def ok(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        doc = self.doc(name, args)
        assert doc["ok"] is True, (name, doc)
        data: dict[str, Any] = doc["data"]
        return data

    def error(self, name: str, args: dict[str, Any]) -> str:
        result = self.call(name, args)
        assert result.is_error, (name, args)
        [c] = result.content
        assert isinstance(c, types.TextContent) and "\n" not in c.text.strip()
        return c.text
