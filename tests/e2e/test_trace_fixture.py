"""`oms trace fixture`: the whole local ticket path, end to end, as the user runs it.

GitHub itself cannot be reached here: the tracer's own loopback GitHub-shaped server
stands in for it (issues, pull requests), and every provider is a scripted `command:`
role. Everything else is real: git and a bare remote on disk, `oms events sync github`,
the conductor bridge's tools, a worker pane on a private tmux server, `oms agent run`
(bwrap) for the executor, the result gate with both scanners and a grade, the push and
the draft PR's read-back. The tracer's JSON names each id on the path; the test checks
the ones it can check from outside, and that the user's own state root stayed empty.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.env import clean_env

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs tmux (Debian: apt-get install tmux) and /usr/bin/bwrap",
)


def test_the_fixture_goes_from_a_github_issue_to_a_verified_draft_pr(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    own_state = tmp_path / "users-state"
    env = clean_env(home, own_state)
    proc = subprocess.run([sys.executable, "-m", "gatekeeper", "trace", "fixture", "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["ok"] is True and out["certifying"] is False
    assert out["decision"] == "READY_FOR_HUMAN"
    assert out["delivery"] == "confirmed" and out["draft"] is True
    assert out["advice"] == "approve"
    assert out["branch"] == f"oms/{out['ticket']}"
    assert len(out["commit"]) == 40 and out["pr"] > 0
    for key, prefix in (("ticket", "t-"), ("goal", "g-"), ("conductor", "c-"),
                        ("intent", "i-"), ("dispatch", "d-"), ("team", "team-")):  # fmt: skip
        assert str(out[key]).startswith(prefix), (key, out[key])
    # Each step said what it did, on stderr, in order.
    steps = [line for line in proc.stderr.splitlines() if line.startswith("oms: ")]
    order = ["events sync github", "bridge prepare_dispatch", "bridge advise_dispatch",
             "bridge propose_dispatch", "bridge start_team", "worker receipt",
             "bridge process_result"]  # fmt: skip
    seen = [next(i for i, s in enumerate(steps) if s.startswith(f"oms: {o}")) for o in order]
    assert seen == sorted(seen), steps
    # The tracer worked in its own temporary state root: the user's was never made.
    assert not own_state.exists()
