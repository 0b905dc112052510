"""`action.yml`: valid against SchemaStore's action schema, and its `run:` steps work.

GitHub itself cannot run here, so this is a stand-in for the runner: it reads the
composite action's steps, substitutes the `${{ }}` expressions of each step's `env:` (the
only place they may appear: no `run:` script holds one, so an untrusted value can never
become shell code), sets GITHUB_ACTION_PATH, GITHUB_WORKSPACE, GITHUB_STEP_SUMMARY,
GITHUB_OUTPUT and RUNNER_TEMP, and runs each script as GitHub runs `shell: bash`
(`bash --noprofile --norc -eo pipefail FILE`), skipping a step whose `if:` (only the forms
`steps.ID.outputs.NAME != ''` and `inputs.NAME == 'value'` are understood) is false, and
stopping at a step that fails. `uses:` steps (setup-python,
actions/cache, upload-sarif) are GitHub's own and are not run: the SARIF upload-sarif would
upload is validated instead, and actions/cache is played by hand (its paths, taken from
action.yml, are kept across a wiped runner temp dir, as a restore would put them back).

The install step runs for real, once for the module (`installed`): pip installs a copy of
this checkout into a fresh venv whose dependencies come from the shared venv (a path
entry, so nothing but the build backend is fetched, from PyPI); the jobs then run on that
venv and skip the step, as on a runner whose tool cache holds it. The gate runs on a real
repository with a real candidate, with a default branch whose name would run a command
if it were ever interpolated.

Mode verify runs against a bare remote (a local stand-in for the GitHub repository the
checkout cloned) that holds a READY attestation in `refs/notes/oms`, made on a developer's
repository by the real gate and `oms evidence attest`, and written there with plain
`git notes` (publishing is `oms evidence publish`'s job, tested on its own).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.repos import commit_on, commit_policy, git, make_repo
from support.secrets import fake_aws_key

from gatekeeper.repo.notes import note_line

ROOT = Path(__file__).parents[2]
DATA = ROOT / "tests" / "data"
ACTION_SCHEMA_SHA256 = "224326cc5a334bdb97b56b6fc320cd4381ba7d61b477b425ed506e6a420b52ba"
EXPR = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")
HOSTILE_BRANCH = "base$(touch${IFS}PWNED)"  # a valid git branch name, and shell if expanded
POLICY = """version = 1

[[checks]]
name = "unit"
cmd = ["/usr/bin/python3", "-m", "unittest", "-q"]
timeout_s = 60
"""
MOD = "def add(a, b):\n    return a + b\n"
TEST = "import unittest\n\nimport mod\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n"
TEST += "        self.assertEqual(mod.add(1, 2), 3)\n"


def action() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "action.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_action_yml_is_valid_against_the_github_action_schema() -> None:
    raw = (DATA / "github-action.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == ACTION_SCHEMA_SHA256  # the vendored copy
    schema = json.loads(raw)
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(action())
    a = action()
    assert a["runs"]["using"] == "composite"
    assert {"mode", "base", "head", "python-version", "upload-sarif"} <= set(a["inputs"])
    assert a["inputs"]["upload-sarif"]["default"] == "true"
    assert a["inputs"]["mode"]["default"] == "gate"  # the gate stays what the action does
    assert {"exit-code", "verified", "sarif-file"} <= set(a["outputs"])
    uses = [s["uses"] for s in a["runs"]["steps"] if "uses" in s]
    assert any(u.startswith("github/codeql-action/upload-sarif@") for u in uses)


def test_no_run_script_interpolates_an_expression() -> None:
    for step in action()["runs"]["steps"]:
        if "run" in step:
            assert "${{" not in step["run"], step.get("name")
            assert step["shell"] == "bash"


class Runner:
    """Runs the action's `run:` steps in order, as GitHub would for a composite action."""

    def __init__(self, tmp: Path, workspace: Path, action_dir: Path, env: Mapping[str, str]):
        self.tmp, self.workspace, self.action_dir, self.env = tmp, workspace, action_dir, env
        self.runner_temp = tmp / "runner-temp"
        self.runner_temp.mkdir()
        self.summary = tmp / "step-summary.md"
        self.summary.write_text("")
        self.outputs: dict[str, dict[str, str]] = {}
        self.logs: dict[str, str] = {}  # step name -> its stdout and stderr

    def value(self, expr: str, inputs: Mapping[str, str]) -> str:
        known = {"github.action_path": str(self.action_dir),
                 "github.workspace": str(self.workspace),
                 "runner.temp": str(self.runner_temp)}  # fmt: skip
        if expr.startswith("inputs."):
            return inputs[expr.removeprefix("inputs.")]
        if expr.startswith("steps."):
            step, _, name = expr.removeprefix("steps.").partition(".outputs.")
            return self.outputs.get(step, {}).get(name, "")
        return known[expr]

    def sub(self, text: str, inputs: Mapping[str, str]) -> str:
        return EXPR.sub(lambda m: self.value(m.group(1), inputs), text)

    def wanted(self, step: Mapping[str, Any], inputs: Mapping[str, str]) -> bool:
        cond = step.get("if")
        if cond is None:
            return True
        m = re.fullmatch(r"(steps\.[\w-]+\.outputs\.[\w-]+|inputs\.[\w-]+) (!=|==) '(\w*)'", cond)
        assert m, f"the stand-in runner does not understand if: {cond}"
        return (self.value(m[1], inputs) == m[3]) == (m[2] == "==")

    def run(self, inputs: Mapping[str, str], skip: tuple[str, ...] = ("Install oms",),
            until: str | None = None) -> dict[str, int]:  # fmt: skip
        """Each `run:` step wanted, by name: its exit code. Inputs not given take the
        action's plain defaults; a step that fails ends the job, as on GitHub. "Install oms"
        ran once for the module (`installed`); `until` names the last step to run."""
        a = action()
        defaults = {k: str(v["default"]) for k, v in a["inputs"].items()
                    if "${{" not in str(v.get("default", "${{"))}  # fmt: skip
        inputs = {**defaults, **inputs}
        codes = {}
        for n, step in enumerate(a["runs"]["steps"]):
            if "run" not in step or step["name"] in skip or not self.wanted(step, inputs):
                continue
            env = {k: self.sub(str(v), inputs) for k, v in step.get("env", {}).items()}
            codes[step["name"]] = self.step(n, step, env)
            if codes[step["name"]] != 0 or step["name"] == until:
                break
        return codes

    def step(self, n: int, step: Mapping[str, Any], env: Mapping[str, str]) -> int:
        script = self.tmp / f"step-{n}.sh"
        script.write_text(step["run"])
        out_file = self.tmp / f"output-{n}"
        out_file.write_text("")
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=self.workspace,
            env={**self.env, **env, "GITHUB_ACTION_PATH": str(self.action_dir),
                 "GITHUB_WORKSPACE": str(self.workspace), "RUNNER_TEMP": str(self.runner_temp),
                 "GITHUB_STEP_SUMMARY": str(self.summary), "GITHUB_OUTPUT": str(out_file)},
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        self.logs[step["name"]] = proc.stdout + proc.stderr
        if "id" in step:
            pairs = (line.split("=", 1) for line in out_file.read_text().splitlines() if line)
            self.outputs[step["id"]] = dict(pairs)
        assert proc.returncode == 0 or step.get("name", "").startswith("Fail"), proc.stderr
        return proc.returncode


@dataclass(frozen=True)
class Installed:
    """The runner's Python after the action's real "Install oms" step ran once (gate mode:
    the Gitleaks wheel by digest, then oms from the action's checkout), shared by this
    module's jobs as a runner image's tool cache would be: each job then skips that step."""

    venv: Path
    action_dir: Path

    def env(self, home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A job's environment: this venv first on PATH, HOME at `home`."""
        env = clean_env(home)
        env.pop("PYTHONPATH", None)  # the installed copy, not this checkout, must run
        env["PATH"] = f"{self.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        return {**env, **(extra or {})}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A fresh venv seeing the shared venv's packages as a path entry (so nothing but the
    build backend is fetched, from PyPI), where the action's "Install oms" step runs."""
    tmp = tmp_path_factory.mktemp("action-install")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "shared-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = Installed(venv, copy_of_checkout(tmp / "action"))
    workspace = make_repo(tmp / "workspace", env=clean_env(tmp))
    runner = Runner(tmp, workspace, done.action_dir, done.env(tmp))
    codes = runner.run({"mode": "gate", "base": "", "head": "", "default-branch": "main"},
                       skip=(), until="Install oms")  # fmt: skip
    assert codes == {"Fail on an unknown mode": 0, "Install oms": 0}, runner.logs
    assert (venv / "bin" / "oms").is_file()  # the step installed it
    return done


def copy_of_checkout(dest: Path) -> Path:
    """This checkout's files (tracked and new, as git lists them) without build debris."""
    names = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, names.split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("action-repo")
    env = clean_env(root)
    files = {"oms.toml": POLICY, "mod.py": MOD, "test_mod.py": TEST}
    repo = make_repo(root / "repo", files, env=env)
    git(repo, "branch", "-m", "main", HOSTILE_BRANCH, env=env)
    return repo, env


def test_the_action_steps_gate_a_real_candidate(
    tmp_path: Path, repo: tuple[Path, dict[str, str]], installed: Installed
) -> None:
    workspace, git_env = repo
    key = fake_aws_key()
    base = git(workspace, "rev-parse", "HEAD", env=git_env).strip()
    ix = tmp_path / "ix"
    head = commit_on(workspace, "pr", {"cloud.py": f'KEY = "{key}"\n'}, env=git_env, index=ix,
                     parent=HOSTILE_BRANCH)  # fmt: skip
    env = installed.env(tmp_path, {k: v for k, v in git_env.items() if "GIT" in k})
    runner = Runner(tmp_path, workspace, installed.action_dir, env)
    inputs = {"base": base, "head": head, "default-branch": HOSTILE_BRANCH,
              "python-version": "3.11", "upload-sarif": "true"}  # fmt: skip
    codes = runner.run(inputs)
    # BLOCKED: the job fails with oms' code. The policy names no toolchain: no cache, no
    # prepare step.
    assert codes == {"Fail on an unknown mode": 0, "Find the base's toolchains": 0,
                     "Run the result gate": 0, "Fail unless READY_FOR_HUMAN": 3}  # fmt: skip
    assert runner.outputs["toolchains"] == {"init-exit": "0", "key": ""}
    assert runner.outputs["gate"]["exit-code"] == "3"
    assert not (workspace / "PWNED").exists() and not (tmp_path / "PWNED").exists()
    summary = runner.summary.read_text()
    assert summary.startswith("## oms result gate: ⛔ BLOCKED") and key not in summary
    sarif_path = Path(runner.outputs["gate"]["sarif-file"])
    sarif = json.loads(sarif_path.read_text())
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(sarif)
    assert key not in sarif_path.read_text()
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for run in sarif["runs"] for r in run["results"]}  # fmt: skip
    assert uris == {"cloud.py"}


TOOLCHAIN_POLICY = """version = 1

[[toolchains]]
name = "vendored"
kind = "command"
lock = "vendor.lock"
cmd = {build}

[[checks]]
name = "unit"
cmd = ["/usr/bin/python3", "-m", "unittest", "-q"]
toolchain = "vendored"
timeout_s = 60
"""
BUILD_OK = '["/bin/sh", "-c", "cp vendor.lock \\"$OMS_TOOLCHAIN_OUT/\\""]'
BUILD_FAILS = '["/bin/sh", "-c", "exit 7"]'


def _toolchain_repo(root: Path, build: str) -> tuple[Path, dict[str, str], str, str]:
    env = clean_env(root)
    files = {"oms.toml": TOOLCHAIN_POLICY.format(build=build), "vendor.lock": "v1\n",
             "mod.py": MOD, "test_mod.py": TEST}  # fmt: skip
    repo = make_repo(root / "repo", files, env=env)
    base = git(repo, "rev-parse", "HEAD", env=env).strip()
    head = commit_on(repo, "pr", {"README.md": "more\n"}, env=env, index=root / "ix",
                     parent="main")  # fmt: skip
    return repo, env, base, head


def _cached_paths(runner: Runner) -> list[Path]:
    """The paths of the actions/cache step, as GitHub would expand them."""
    [step] = [s for s in action()["runs"]["steps"] if str(s.get("uses", "")).startswith(
        "actions/cache@")]  # fmt: skip
    assert step["with"]["key"] == "${{ steps.toolchains.outputs.key }}"
    return [Path(runner.sub(line.strip(), {})) for line in step["with"]["path"].splitlines()
            if line.strip()]  # fmt: skip


def test_the_action_prepares_the_toolchains_under_a_cache_keyed_by_their_ids(
    tmp_path: Path, installed: Installed
) -> None:
    """The base names a toolchain: the key is made of its id, it is prepared in the cached
    dir, the gate uses it (READY); a second job whose cache brought back only the cached
    paths (the rest of the runner's temp dir is gone) finds it prepared, not rebuilt."""
    repo, git_env, base, head = _toolchain_repo(tmp_path / "r", BUILD_OK)
    env = installed.env(tmp_path, {k: v for k, v in git_env.items() if "GIT" in k})
    runner = Runner(tmp_path, repo, installed.action_dir, env)
    inputs = {"base": base, "head": head, "default-branch": "main", "python-version": "3.11",
              "upload-sarif": "false"}  # fmt: skip
    codes = runner.run(inputs)
    assert set(codes.values()) == {0} and "Prepare the toolchains" in codes, codes
    listed = subprocess.run(
        ["oms", "toolchain", "list", "--repo", str(repo), "--json"], cwd=repo, check=True,
        capture_output=True, text=True,
        env={**env, "OMS_HOME": str(runner.runner_temp / "oms-home"),
             "OMS_TOOLCHAIN_DIR": str(runner.runner_temp / "oms-toolchains")},
    )  # fmt: skip
    [tc] = json.loads(listed.stdout)["policy"]
    assert tc["state"] == "prepared" and tc["dir"].startswith(str(runner.runner_temp))
    digest = hashlib.sha256(tc["id"].encode()).hexdigest()
    assert runner.outputs["toolchains"]["key"].endswith(f"-{digest}")
    assert runner.summary.read_text().startswith("## oms result gate: ✅ READY_FOR_HUMAN")

    # The next job: a fresh runner temp dir, the cached paths restored where they were.
    kept = tmp_path / "cache"
    for n, path in enumerate(_cached_paths(runner)):
        shutil.move(path, kept / str(n))
    shutil.rmtree(runner.runner_temp)
    runner.runner_temp.mkdir()
    for n, path in enumerate(_cached_paths(runner)):
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(kept / str(n), path)
    runner.summary.write_text("")
    codes = runner.run(inputs)
    assert set(codes.values()) == {0}, codes
    assert "cached" in runner.logs["Prepare the toolchains"], runner.logs
    assert "built" not in runner.logs["Prepare the toolchains"], runner.logs
    assert runner.summary.read_text().startswith("## oms result gate: ✅ READY_FOR_HUMAN")


def test_a_toolchain_that_cannot_be_prepared_still_gets_its_summary(
    tmp_path: Path, installed: Installed
) -> None:
    """UNAVAILABLE writes the markdown page to the job summary as every other verdict."""
    repo, git_env, base, head = _toolchain_repo(tmp_path / "r", BUILD_FAILS)
    env = installed.env(tmp_path, {k: v for k, v in git_env.items() if "GIT" in k})
    runner = Runner(tmp_path, repo, installed.action_dir, env)
    inputs = {"base": base, "head": head, "default-branch": "main", "python-version": "3.11",
              "upload-sarif": "false"}  # fmt: skip
    codes = runner.run(inputs)
    assert codes["Prepare the toolchains"] == 0  # it says so; the gate decides
    assert "could not be prepared" in runner.logs["Prepare the toolchains"]
    assert runner.outputs["gate"]["exit-code"] == "4"
    assert codes["Fail unless READY_FOR_HUMAN"] == 4
    summary = runner.summary.read_text()
    assert summary.startswith("## oms result gate: ⚠️ UNAVAILABLE"), summary
    assert "vendored" in summary and "refused before a verdict" not in summary


def test_an_unknown_mode_fails_the_job_with_one_line(tmp_path: Path) -> None:
    """The first step refuses it (exit 2) before anything is installed or run."""
    workspace = make_repo(tmp_path / "repo", env=clean_env(tmp_path))
    runner = Runner(tmp_path, workspace, copy_of_checkout(tmp_path / "action"),
                    clean_env(tmp_path))  # fmt: skip
    codes = runner.run({"mode": "gate; touch PWNED", "base": "", "head": "",
                        "default-branch": "main"})  # fmt: skip
    assert codes == {"Fail on an unknown mode": 2}, codes
    log = runner.logs["Fail on an unknown mode"]
    assert log == "oms: unknown mode gate\\;\\ touch\\ PWNED: use gate or verify\n", log
    assert not (workspace / "PWNED").exists() and runner.summary.read_text() == ""


@pytest.fixture(scope="module")
def attested(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A developer's repository whose default branch trusts its own evidence key as signer
    `laptop`; a READY attestation of `pr`'s head in its `refs/notes/oms`; `main`, `pr`,
    `bare` (a commit with no note) and the notes ref pushed to a bare remote, where the
    default branch is named `HOSTILE_BRANCH`."""
    root = tmp_path_factory.mktemp("verify-repo")
    env = clean_env(root, root / "oms-home")
    dev = make_repo(root / "dev", {"oms.toml": POLICY, "mod.py": MOD, "test_mod.py": TEST},
                    env=env)  # fmt: skip
    assert run_oms(["init", "--repo", dev], env=env, cwd=dev).returncode == 0
    key = parse_single_json(run_oms(["evidence", "key", "--json"], env=env, cwd=dev))
    trust = f'\n[trust]\nsigners = [{{ name = "laptop", key = "{key["signer_key"]}" }}]\n'
    commit_policy(dev, env=env, text=POLICY + trust)
    head = commit_on(dev, "pr", {"mod.py": MOD + "\n# more\n"}, env=env, index=root / "ix")
    bare = commit_on(dev, "bare", {"mod.py": MOD + "\n# other\n"}, env=env, index=root / "ix")
    for sha in (head, bare):
        gate = parse_single_json(run_oms(["process-result", "--candidate", sha, "--json"],
                                         env=env, cwd=dev, timeout=300))  # fmt: skip
        assert gate["decision"] == "READY_FOR_HUMAN", gate
    out = parse_single_json(run_oms(["evidence", "attest", head, "--json"], env=env, cwd=dev,
                                    timeout=120))  # fmt: skip
    (root / "note").write_bytes(note_line(out["envelope"]))
    git(dev, "notes", "--ref=oms", "add", "-F", str(root / "note"), head, env=env)
    remote = root / "remote.git"
    git(root, "init", "-q", "--bare", str(remote), env=env)
    # The default branch on the remote has a name that would be shell if interpolated.
    git(dev, "push", "-q", str(remote), f"main:refs/heads/{HOSTILE_BRANCH}", "pr", "bare",
        "refs/notes/oms", env=env)  # fmt: skip
    return {"root": root, "remote": remote, "head": head, "bare": bare, "env": env}


def _checkout(tmp: Path, attested: dict[str, Any], sha: str) -> Path:
    """What actions/checkout with fetch-depth 0 leaves: every branch as origin/*, the head
    checked out, no notes."""
    workspace = tmp / "workspace"
    git(tmp, "clone", "-q", str(attested["remote"]), str(workspace), env=attested["env"])
    git(workspace, "checkout", "-q", "--detach", sha, env=attested["env"])
    assert git(workspace, "for-each-ref", "refs/notes", env=attested["env"]) == ""
    return workspace


def test_verify_mode_passes_on_a_trusted_attestation_and_fails_naming_the_note_check(
    tmp_path: Path, attested: dict[str, Any], installed: Installed
) -> None:
    """Mode verify: no bwrap, no Gitleaks, no `oms init`; the verifier fetches the notes
    ref from origin and reads the policy from origin's default branch. The attested head
    passes (verified, signer laptop); a commit READY but never attested fails (exit 3)."""
    workspace = _checkout(tmp_path, attested, attested["head"])
    git_env = {k: v for k, v in attested["env"].items() if "GIT" in k}
    env = installed.env(tmp_path, git_env)
    runner = Runner(tmp_path, workspace, installed.action_dir, env)
    inputs = {"mode": "verify", "base": "", "head": attested["head"],
              "default-branch": HOSTILE_BRANCH}  # fmt: skip
    codes = runner.run(inputs)
    assert codes == {
        "Fail on an unknown mode": 0,
        "Verify the head's attestation": 0,
        "Fail unless verified": 0,
    }, runner.logs
    assert runner.outputs["verify"] == {"exit-code": "0", "verified": "true"}
    home = runner.runner_temp / "oms-verify" / "home"  # the step's OMS_HOME: no key made
    assert not (runner.runner_temp / "oms-home").exists() and not (home / "keys").exists()
    summary = runner.summary.read_text()
    assert summary.startswith("## oms provenance: ✅ verified"), summary
    assert f"Commit {attested['head']}: signer laptop;" in summary
    for check in ("note", "signature", "subject", "decision", "inclusion"):
        assert f"| {check} | ✅ ok |" in summary, summary

    # The next job: the same runner, a head with a READY verdict but no attestation.
    git(workspace, "checkout", "-q", "--detach", attested["bare"], env=attested["env"])
    runner.summary.write_text("")
    codes = runner.run({**inputs, "head": attested["bare"]})
    assert codes["Verify the head's attestation"] == 0 and codes["Fail unless verified"] == 3
    assert runner.outputs["verify"] == {"exit-code": "3", "verified": "false"}
    assert not list(tmp_path.rglob("PWNED")) and not list(attested["root"].rglob("PWNED"))
    assert "no trusted READY attestation covers the head (exit 3)" in runner.logs[
        "Fail unless verified"]  # fmt: skip
    summary = runner.summary.read_text()
    assert summary.startswith("## oms provenance: ⛔ not verified"), summary
    assert f"Commit {attested['bare']}: no trusted signer;" in summary
    assert "| note | ❌ failed |" in summary, summary
