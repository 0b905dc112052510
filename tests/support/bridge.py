"""A repository for the conductor bridge: the runs lab's scripted `command:` roles (an
implementer, read-only roles, a grader) and a scripted `advisor` whose verdict the intent's
task picks (`[revise]`, `[reject]`, `[garbage]` for an answer that is not the schema's), and
one conductor session record."""

from __future__ import annotations

import json
from pathlib import Path

from gatekeeper.work.conductor import sessions
from gatekeeper.work.fence import Work
from support.runs import PY, RunLab, run_lab
from support.work import nonce

ADVISE = r"""
import json, sys
doc = json.loads(sys.stdin.buffer.read() or b"{}")
task = doc.get("document", {}).get("task", "")
if "[garbage]" in task:
    print(json.dumps({"verdict": "yes please", "extra": 1}))
elif "[revise]" in task:
    print(json.dumps({"verdict": "revise", "reasons": ["split the task"]}))
elif "[reject]" in task:
    print(json.dumps({"verdict": "reject", "reasons": ["out of scope"]}))
else:
    print(json.dumps({"verdict": "approve", "reasons": ["advised %s" % doc.get("digest")]}))
"""

ADVISOR = f"""
[roles.advisor]
provider = "command:advisor"
model = "scripted"
auth = "none"
billing = "none"
transport = "exec"
authority = "read-only"
unattended = true
timeout_s = 60

[providers.advisor]
cmd = [{json.dumps(PY)}, "-c", {json.dumps(ADVISE)}]
"""


def bridge_lab(root: Path, env: dict[str, str]) -> RunLab:
    return run_lab(root, env, roles=("planner",), extra=ADVISOR)


def new_session(work: Work) -> str:
    """A conductor session record (`oms conductor start` writes it before its pane)."""
    return sessions.create(work, "/nonexistent/tmux.sock", "oms-test", ["claude"], nonce()).id
