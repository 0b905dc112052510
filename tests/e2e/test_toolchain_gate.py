"""Trusted toolchains end to end: a Python project's own pytest suite runs in the gate with
dependencies built from the base's hash-pinned lockfile, never from the agent's tree.

One module-scoped world: a private `$OMS_HOME`, `$OMS_TOOLCHAIN_DIR` and HOME, a real
repository whose `main` holds `oms.toml`, `requirements.lock` (real wheels from PyPI, every
hash real) and a pytest suite, and one `oms toolchain prepare`. Only `prepare` contacts
anything (PyPI, through pip, outside the sandbox); the checks have no network. Tests that
break the toolchain make their own world.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.pty import trust_tip
from support.repos import commit_on, git, make_repo
from support.toolchains import python_lock

READY, FAILED, UNAVAILABLE = "READY_FOR_HUMAN", "FAILED", "UNAVAILABLE"
POLICY = """version = 1

[[toolchains]]
name = "py"
kind = "python-venv"
lock = "requirements.lock"
python = "/usr/bin/python3"
{extra}
[[checks]]
name = "tests"
cmd = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
toolchain = "py"
timeout_s = 300
"""
APP = "import six\n\n\ndef shout(s):\n    return six.ensure_str(s).upper()\n"
TESTS = (
    "import idna\n\nimport app\n\n\n"
    "def test_shout():\n    assert app.shout('hi') == 'HI'\n\n\n"
    "def test_idna():\n    assert idna.encode('example.org') == b'example.org'\n"
)


@dataclass
class World:
    root: Path
    repo: Path
    env: dict[str, str]
    toolchains: Path
    _n: int = 0
    outputs: list[str] = field(default_factory=list)

    def commit(self, branch: str, files: dict[str | bytes, Any], parent: str = "main") -> str:
        self._n += 1
        return commit_on(self.repo, branch, files, env=self.env, parent=parent,
                         index=self.root / f"index-{self._n}")  # fmt: skip

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = run_oms(args, env=self.env, cwd=self.root, timeout=600)
        self.outputs += [proc.stdout, proc.stderr]
        return proc

    def json(self, *args: str) -> tuple[int, dict[str, Any]]:
        proc = self.run(*args, "--json")
        return proc.returncode, parse_single_json(proc)

    def gate(self, candidate: str) -> tuple[int, dict[str, Any]]:
        return self.json("process-result", "--repo", str(self.repo), "--candidate", candidate)

    def prepare(self, *names: str) -> tuple[int, dict[str, Any]]:
        return self.json("toolchain", "prepare", "--repo", str(self.repo), *names)

    def entries(self, kind: str | None = None) -> list[dict[str, Any]]:
        (log,) = Path(self.env["OMS_HOME"]).glob("repos/*/evidence/log.jsonl")
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        return [e for e in lines if kind is None or e["kind"] == kind]


def make_world(root: Path, pip_cache: Path, extra: str = "") -> World:
    home = root / "home"
    home.mkdir(parents=True)
    env = clean_env(home, root / "oms-state")
    toolchains = root / "toolchains"
    env.update(OMS_TOOLCHAIN_DIR=str(toolchains), PIP_CACHE_DIR=str(pip_cache),
               XDG_CACHE_HOME=str(home / ".cache"))  # fmt: skip
    repo = make_repo(root / "repo", {
        "oms.toml": POLICY.format(extra=extra), "requirements.lock": python_lock(),
        "app.py": APP, "tests/test_app.py": TESTS,
    }, env=env)  # fmt: skip
    world = World(root, repo, env, toolchains)
    code, out = world.json("init", "--repo", str(repo))
    assert code == 0, out
    return world


@pytest.fixture(scope="module")
def pip_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pip-cache")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, pip_cache: Path) -> Iterator[World]:
    w = make_world(tmp_path_factory.mktemp("tc-world"), pip_cache)
    code, out = w.prepare()
    assert code == 0, out
    yield w


def test_prepare_builds_once_and_records_it(world: World) -> None:
    entries = world.entries("toolchain.prepare")
    assert len(entries) == 1
    built = entries[0]["data"]["build"]
    assert built["name"] == "py" and built["kind"] == "python-venv"
    assert set(built["inputs"]) == {"requirements.lock"} and not built["allow_build"]
    code, out = world.prepare()  # the second run builds nothing
    assert code == 0, out
    (tc,) = out["toolchains"]
    assert tc["state"] == "cached" and tc["evidence_seq"] is None
    assert tc["tree_digest"] == built["tree_digest"]
    assert len(world.entries("toolchain.prepare")) == 1
    assert Path(tc["dir"]).parent == world.toolchains.resolve()
    code, out = world.json("toolchain", "verify", "--repo", str(world.repo))
    assert code == 0 and out["intact"] and out["toolchains"][0]["state"] == "ok", out


def test_the_projects_suite_is_green_with_the_toolchain(world: World) -> None:
    cand = world.commit("green", {"tests/test_more.py": "import six\n\n\ndef test_six():\n"
                                  "    assert six.PY3\n"})  # fmt: skip
    code, out = world.gate(cand)
    assert (code, out["decision"]) == (0, READY), out
    assert "3 passed" in out["checks"][0]["stdout_tail"], out["checks"][0]
    (used,) = out["toolchains"]
    assert used["name"] == "py" and not used["lock_changed"]
    _, listed = world.json("toolchain", "list", "--repo", str(world.repo))
    assert used["tree_digest"] == listed["policy"][0]["tree_digest"]
    record = world.entries("result")[-1]["data"]
    assert record["toolchains"][0]["tree_digest"] == used["tree_digest"]


def test_a_broken_test_fails(world: World) -> None:
    cand = world.commit("broken", {"app.py": APP.replace(".upper()", ".lower()")})
    code, out = world.gate(cand)
    assert (code, out["decision"]) == (1, FAILED), out
    assert "test_shout" in out["checks"][0]["stdout_tail"]


def test_an_import_of_an_unlocked_package_fails_visibly(world: World) -> None:
    cand = world.commit("unlocked", {"tests/test_new.py": "import attr\n\n\ndef test_x():\n"
                                     "    assert attr\n"})  # fmt: skip
    code, out = world.gate(cand)
    assert (code, out["decision"]) == (1, FAILED), out
    tails = out["checks"][0]["stdout_tail"] + out["checks"][0]["stderr_tail"]
    assert "No module named 'attr'" in tails


def test_a_module_planted_in_the_worktree_venv_has_no_effect(world: World) -> None:
    # The agent's worktree holds a .venv whose six would make the failing test pass.
    planted = world.repo / ".venv" / "lib" / "python3.11" / "site-packages"
    planted.mkdir(parents=True)
    (planted / "six.py").write_text("PLANTED = True\ndef ensure_str(s):\n    return s\n")
    (world.repo / "six.py").write_text("PLANTED = True\n")  # untracked, beside app.py too
    try:
        cand = world.commit("planted", {"tests/test_planted.py":
                                        "import six\n\n\ndef test_planted():\n"
                                        "    assert getattr(six, 'PLANTED', False)\n"})  # fmt: skip
        code, out = world.gate(cand)
    finally:
        (world.repo / "six.py").unlink()
    assert (code, out["decision"]) == (1, FAILED), out
    assert "test_planted" in out["checks"][0]["stdout_tail"]


def test_a_changed_lockfile_is_checked_with_the_bases_toolchain(world: World) -> None:
    lock = python_lock() + "attrs==24.2.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"
    cand = world.commit("relock", {"requirements.lock": lock})
    code, out = world.gate(cand)
    assert (code, out["decision"]) == (0, READY), out
    assert out["toolchains"][0]["lock_changed"] is True
    human = world.run("process-result", "--repo", str(world.repo), "--candidate", cand)
    assert "changes requirements.lock" in human.stdout


def test_a_missing_toolchain_is_unavailable_with_the_remedy(
    tmp_path: Path, pip_cache: Path
) -> None:
    w = make_world(tmp_path, pip_cache)
    cand = w.commit("c", {"tests/test_x.py": "def test_x():\n    pass\n"})
    code, out = w.gate(cand)
    assert (code, out["decision"]) == (4, UNAVAILABLE), out
    assert "not prepared" in out["error"]["message"]
    assert "oms toolchain prepare" in out["error"]["message"]
    assert out["checks"] == []
    code, out = w.json("toolchain", "verify", "--repo", str(w.repo))
    assert code == 4 and out["toolchains"][0]["state"] == "missing", out
    # doctor says "not ready" whenever the next gate would refuse, and how to fix it
    _, report = w.json("doctor", "--repo", str(w.repo))
    assert not report["ready"] and "toolchain py is missing" in report["problems"], report
    assert any(r.startswith("oms toolchain prepare") for r in report["remedies"])
    assert w.prepare()[0] == 0
    _, report = w.json("doctor", "--repo", str(w.repo))
    assert report["toolchains"][0]["state"] == "ok" and not any(
        "toolchain" in p for p in report["problems"]), report  # fmt: skip


def test_auto_prepare_builds_first_and_records_it(tmp_path: Path, pip_cache: Path) -> None:
    w = make_world(tmp_path, pip_cache, extra="auto_prepare = true\n")
    cand = w.commit("c", {"tests/test_x.py": "def test_x():\n    pass\n"})
    proc = w.run("process-result", "--repo", str(w.repo), "--candidate", cand, "--json")
    out = parse_single_json(proc)
    assert (proc.returncode, out["decision"]) == (0, READY), out
    assert "preparing it (auto_prepare)" in proc.stderr
    kinds = [e["kind"] for e in w.entries()]
    assert kinds.index("result.start") < kinds.index("toolchain.prepare") < kinds.index("result")


def test_a_modified_toolchain_is_refused_then_rebuilt(tmp_path: Path, pip_cache: Path) -> None:
    w = make_world(tmp_path, pip_cache)
    assert w.prepare()[0] == 0
    (tc_dir,) = [p for p in w.toolchains.iterdir() if not p.name.startswith(".")]
    six = next(tc_dir.glob("lib/python*/site-packages/six.py"))
    os.chmod(six, 0o644)
    six.write_text(six.read_text() + "\nPLANTED = True\n")
    cand = w.commit("c", {"tests/test_x.py": "def test_x():\n    pass\n"})
    code, out = w.gate(cand)
    assert (code, out["decision"]) == (4, UNAVAILABLE), out
    assert "was modified since it was prepared" in out["error"]["message"]
    code, out = w.json("toolchain", "verify", "--repo", str(w.repo))
    assert code == 4 and out["toolchains"][0]["state"] == "modified", out
    code, out = w.prepare()
    assert code == 0 and out["toolchains"][0]["state"] == "rebuilt", out
    assert "PLANTED" not in six.read_text()
    assert w.gate(cand)[1]["decision"] == READY


def test_a_toolchain_of_an_older_lockfile_is_stale(tmp_path: Path, pip_cache: Path) -> None:
    w = make_world(tmp_path, pip_cache)
    assert w.prepare()[0] == 0
    new_main = w.commit("main", {"requirements.lock": python_lock() + "# relocked\n"})
    git(w.repo, "reset", "-q", "--hard", new_main, env=w.env)
    trust_tip(w.repo, env=w.env)  # the human trusts the new lock on main
    cand = w.commit("c", {"tests/test_x.py": "def test_x():\n    pass\n"})
    code, out = w.gate(cand)
    assert (code, out["decision"]) == (4, UNAVAILABLE), out
    assert "is stale" in out["error"]["message"]
    code, out = w.json("toolchain", "list", "--repo", str(w.repo))
    assert out["policy"][0]["state"] == "stale" and len(out["prepared"]) == 1, out
    # gc keeps what the base names; the old tree is unused only after --keep-days
    code, out = w.json("toolchain", "gc", "--repo", str(w.repo), "--keep-days", "0")
    assert code == 0 and len(out["removed"]) == 1, out
    assert w.json("toolchain", "list", "--repo", str(w.repo))[1]["prepared"] == []


def test_prepare_refuses_an_unknown_name_and_a_missing_lock(
    tmp_path: Path, pip_cache: Path
) -> None:
    w = make_world(tmp_path, pip_cache)
    code, out = w.prepare("nope")
    assert code == 2 and "no toolchain named 'nope'" in out["error"]["message"], out
    new_main = w.commit("main", {"requirements.lock": None})
    git(w.repo, "reset", "-q", "--hard", new_main, env=w.env)
    trust_tip(w.repo, env=w.env)  # the human trusts main without its lock
    code, out = w.prepare()
    assert code == 2 and "requirements.lock does not exist" in out["error"]["message"], out
    assert not any(p for p in w.toolchains.glob("*") if not p.name.startswith("."))
