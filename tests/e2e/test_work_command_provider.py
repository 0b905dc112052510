"""A `command:` provider end to end: the adapter (gatekeeper/work/providers/command.py) runs
a scripted implementer under the real `oms agent run` (real bwrap, real git, the real
evidence log) with the task on stdin and as `$OMS_TASK_FILE`, never in argv.

The script is committed on the default branch, so the workspace clone holds it; it prints
start and end markers, so that a refusal to run is never mistaken for a result.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from support.repos import git, make_repo

from evidence import EvidenceStore, state_root
from gatekeeper.agent.inside import TASK_FILE
from gatekeeper.agent.workspace import new_run_id
from gatekeeper.errors import Blocked, UsageError
from gatekeeper.gates.records import init
from gatekeeper.repo.git import open_repo
from gatekeeper.work.providers import adapter
from gatekeeper.work.providers.base import ProviderReceipt, ProviderRequest, Role
from gatekeeper.work.roles import require, resolve, schema_of, trusted_policy

PY = "/usr/bin/python3"
pytestmark = pytest.mark.skipif(
    not os.access("/usr/bin/bwrap", os.X_OK) or not os.access(PY, os.X_OK),
    reason="needs /usr/bin/bwrap and /usr/bin/python3",
)
# Shell metacharacters, a leading `--` and quotes: were any of it argv or shell code, the
# script would see it in a command line or find PWNED.
TASK = (b"--help; $(touch /workspace/PWNED) `touch /workspace/PWNED2` | rm -rf / && "
        b"echo 'single' \"double\" ${HOME}\nsecond line: implement feature X\n")  # fmt: skip
IMPL = r"""
import json, os, subprocess, sys
print("oms-impl-start", flush=True)
task = sys.stdin.buffer.read()
with open(os.environ["OMS_TASK_FILE"], "rb") as f:
    from_file = f.read()
cmdlines = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdlines.append(f.read().split(b"\0"))
        except OSError:
            pass
seen = any(task.splitlines()[0] in part or b"implement feature" in part
           for line in cmdlines for part in line)
try:
    with open(os.environ["OMS_TASK_FILE"], "ab") as f:
        f.write(b"changed")
    task_file_writable = True
except OSError:
    task_file_writable = False
try:
    with open("feature.txt", "w") as f:
        f.write("implemented\n")
    subprocess.run(["git", "add", "feature.txt"], check=True)
    subprocess.run(["git", "-c", "user.name=impl", "-c", "user.email=impl@example.invalid",
                    "commit", "-q", "-m", "add the feature"], check=True)
    wrote = True
except (OSError, subprocess.CalledProcessError):
    wrote = False
print(json.dumps({"argv": sys.argv, "same": task == from_file, "task_len": len(task),
                  "task_file": os.environ["OMS_TASK_FILE"], "seen_in_argv": seen,
                  "task_file_writable": task_file_writable, "wrote": wrote}))
print("oms-impl-end", flush=True)
"""
POLICY = f"""version = 1

[roles.impl]
provider = "command:impl"
model = "scripted"
auth = "none"
billing = "none"
transport = "exec"
authority = "worktree-write"
unattended = true

[roles.advisor]
provider = "command:impl"
model = "scripted"
auth = "none"
billing = "none"
transport = "exec"
authority = "read-only"
unattended = true

[roles.grader]
provider = "command:grade"
model = "fixed"
auth = "none"
billing = "none"
transport = "exec"
unattended = true

[roles.hang]
provider = "command:hang"
model = "none"
auth = "none"
billing = "none"
transport = "exec"
unattended = true
timeout_s = 2

[providers.impl]
cmd = ["{PY}", "impl.py"]

[providers.grade]
cmd = ["{PY}", "grade.py"]
output_schema = "schemas/grade.json"

[providers.hang]
cmd = ["{PY}", "-c", "import time; print('oms-hang-start', flush=True); time.sleep(600)"]
"""
GRADER = r"""
import json, os, sys
task = sys.stdin.buffer.read()
with open(os.environ["OMS_SCHEMA_FILE"]) as f:
    schema = json.load(f)
print(json.dumps({"grade": "pass", "reasons": [f"{len(task)} bytes"], "schema": schema}))
"""
SCHEMA = {"type": "object", "required": ["grade"], "properties": {"grade": {"type": "string"}}}


@pytest.fixture
def repo(tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    files = {"oms.toml": POLICY, "impl.py": IMPL, "grade.py": GRADER,
             "schemas/grade.json": json.dumps(SCHEMA)}  # fmt: skip
    made = make_repo(tmp_path / "repo", files, env=oms_env)
    init(made)
    monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
    return made


def role_of(repo: Path, name: str) -> Role:
    return require(resolve(trusted_policy(repo), name), unattended=True)


def run(repo: Path, name: str, run_id: str | None = None) -> tuple[ProviderReceipt, str]:
    role = role_of(repo, name)
    rid = run_id or new_run_id()
    base = git(repo, "rev-parse", "HEAD").strip()
    schema = schema_of(repo, role)
    got = adapter(role)(ProviderRequest(repo, base, role, rid, TASK, output_schema=schema,
                                        loaded=trusted_policy(repo)))  # fmt: skip
    assert got.run_id == rid and got.base == base and got.engine == role.engine
    return got, base


def report(receipt: ProviderReceipt) -> dict[str, Any]:
    lines = receipt.output.splitlines()
    assert lines[0] == "oms-impl-start" and lines[-1] == "oms-impl-end", receipt.output
    found: dict[str, Any] = json.loads(lines[-2])
    return found


def store_of(repo: Path) -> EvidenceStore:
    r = open_repo(repo)
    return EvidenceStore.open(state_root(), r.repo_id, common_dir=r.common_dir)


def test_the_implementer_gets_the_task_on_stdin_and_as_a_read_only_file_never_in_argv(
    repo: Path,
) -> None:
    receipt, base = run(repo, "impl")
    assert receipt.exit_code == 0 and not receipt.timed_out, receipt
    got = report(receipt)
    assert got["same"] is True and got["task_len"] == len(TASK)
    assert got["task_file"] == TASK_FILE and got["task_file_writable"] is False
    # argv is exactly the policy's cmd; no process inside has the task in its command line.
    assert got["argv"] == ["impl.py"] and got["seen_in_argv"] is False
    # The argv oms recorded as run is the policy's cmd, byte for byte.
    start = store_of(repo).entries("agent.run.start")[-1]
    want = "sha256:" + hashlib.sha256(f"{PY}\0impl.py".encode()).hexdigest()
    assert start.data["argv_digest"] == want
    # The commit comes back as the candidate, with the recorded base.
    assert (
        receipt.candidate is not None and receipt.candidate_ref == f"refs/oms/runs/{receipt.run_id}"
    )
    assert git(repo, "rev-parse", receipt.candidate_ref).strip() == receipt.candidate
    assert git(repo, "rev-parse", f"{receipt.candidate}^").strip() == base
    assert git(repo, "show", f"{receipt.candidate}:feature.txt") == "implemented\n"
    tree = git(repo, "ls-tree", "-r", "--name-only", receipt.candidate).split()
    assert "PWNED" not in tree and "PWNED2" not in tree
    assert receipt.usage is None and receipt.evidence_seq == store_of(repo).head() - 1


def test_a_read_only_role_gets_no_candidate_and_cannot_write_its_workspace(repo: Path) -> None:
    refs_before = git(repo, "for-each-ref")
    receipt, _ = run(repo, "advisor")
    assert receipt.exit_code == 0, receipt
    got = report(receipt)
    assert got["wrote"] is False and got["same"] is True
    assert receipt.candidate is None and receipt.candidate_ref is None
    assert git(repo, "for-each-ref") == refs_before  # nothing was fetched
    end = store_of(repo).entries("agent.run.end")[-1]
    assert end.data["candidate"] is None


def test_a_run_id_is_used_once_and_a_second_run_with_it_changes_nothing(repo: Path) -> None:
    rid = new_run_id()
    first, _ = run(repo, "impl", rid)
    assert first.candidate is not None
    store = store_of(repo)
    seq, refs = store.head(), git(repo, "for-each-ref")
    with pytest.raises(Blocked, match="used once"):
        run(repo, "impl", rid)
    assert store_of(repo).head() == seq and git(repo, "for-each-ref") == refs


def test_a_run_id_that_is_not_one_is_refused_before_anything_starts(repo: Path) -> None:
    seq = store_of(repo).head()
    with pytest.raises(UsageError, match="not a run id"):
        run(repo, "impl", "../../etc")
    assert store_of(repo).head() == seq


def test_a_grader_reads_its_schema_from_the_default_branch_as_a_read_only_file(
    repo: Path,
) -> None:
    (repo / "schemas" / "grade.json").write_text('{"type": "string"}')  # the worktree: ignored
    receipt, _ = run(repo, "grader")
    assert receipt.exit_code == 0 and receipt.candidate is None, receipt
    answer = json.loads(receipt.output)
    assert answer["grade"] == "pass" and answer["schema"] == SCHEMA
    assert answer["reasons"] == [f"{len(TASK)} bytes"]


def test_a_provider_that_hangs_is_stopped_at_its_roles_timeout(repo: Path) -> None:
    receipt, _ = run(repo, "hang")
    assert receipt.timed_out is True and receipt.exit_code is None
    assert receipt.candidate is None
