"""`--format` and `--output` on the real `oms scan` and `oms process-result`: every
format of a READY, a FAILED and a BLOCKED verdict from one gate run each, the exit code
unchanged by the format, `--json` as `--format json`, and the refusals of `--output`.

Fake secrets are built at runtime; no scanner-matchable string is in this file.
"""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.repos import commit_on, make_repo
from support.secrets import fake_aws_key

DATA = Path(__file__).parents[1] / "data"
PY = "/usr/bin/python3"  # Debian's python: present inside the sandbox
POLICY = f"""version = 1

[[checks]]
name = "unit"
cmd = ["{PY}", "-m", "unittest", "-q"]
timeout_s = 60

[protected]
paths = ["secrets/"]
"""
MOD = "def add(a, b):\n    return a + b\n"
TEST = "import unittest\n\nimport mod\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n"
TEST += "        self.assertEqual(mod.add(1, 2), 3)\n"
FORMATS = ("sarif", "markdown", "junit", "text", "json")


@dataclass
class World:
    root: Path
    repo: Path
    env: dict[str, str]
    n: int = 0

    def run(self, *args: str | Path, **kw: Any) -> subprocess.CompletedProcess[str]:
        return run_oms(args, env=self.env, cwd=self.root, timeout=180, **kw)

    def commit(self, branch: str, files: dict[str | bytes, Any]) -> str:
        self.n += 1
        return commit_on(self.repo, branch, files, env=self.env, index=self.root / f"ix{self.n}")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("formats")
    (root / "home").mkdir()
    env = clean_env(root / "home", root / "oms-state")
    files = {"oms.toml": POLICY, "mod.py": MOD, "test_mod.py": TEST}
    w = World(root, make_repo(root / "repo", files, env=env), env)
    proc = w.run("init", "--repo", w.repo, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return w


def sarif_validator() -> jsonschema.protocols.Validator:
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
    return jsonschema.Draft4Validator(
        schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER
    )


def gate_all_formats(
    w: World, name: str, candidate: str
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One gate run writing every format to a file, `--json` on stdout."""
    out = w.root / name
    out.mkdir()
    args: list[str | Path] = ["process-result", "--repo", w.repo, "--candidate", candidate]
    for fmt in FORMATS:
        args += ["--format", fmt, "--output", out / f"v.{fmt}"]
    proc = w.run(*args, "--json")
    files = {fmt: (out / f"v.{fmt}").read_text() for fmt in FORMATS}
    return proc.returncode, parse_single_json(proc), files


@pytest.mark.parametrize("outcome", ["ready", "failed", "blocked"])
def test_every_format_of_a_verdict_from_one_gate_run(world: World, outcome: str) -> None:
    key = fake_aws_key()
    change = {
        "ready": {"mod.py": MOD + "\n\ndef mul(a, b):\n    return a * b\n"},
        "failed": {"mod.py": MOD.replace("a + b", "a - b")},
        "blocked": {"cloud.py": f'KEY = "{key}"\n'},
    }[outcome]
    sha = world.commit(f"cand/{outcome}", change)
    code, verdict, files = gate_all_formats(world, outcome, sha)
    decision, expected = {"ready": ("READY_FOR_HUMAN", 0), "failed": ("FAILED", 1),
                          "blocked": ("BLOCKED", 3)}[outcome]  # fmt: skip
    assert verdict["decision"] == decision and code == expected  # the format changes no code
    assert json.loads(files["json"]) == verdict  # the file holds exactly what --json prints
    assert files["text"].startswith(f"{decision}: {sha[:12]}")
    for text in files.values():
        assert key not in text and key[4:] not in text
    sarif = json.loads(files["sarif"])
    sarif_validator().validate(sarif)
    results = [r for run in sarif["runs"] for r in run["results"]]
    junit = ET.fromstring(files["junit"].encode())
    failures = int(junit.get("failures", "-1"))
    assert files["markdown"].startswith("## oms result gate: ")
    if outcome == "ready":
        assert results == [] and failures == 0 and junit.get("tests") == "3"
    elif outcome == "failed":
        assert [r["ruleId"] for r in results] == ["oms/check-failed"] and failures == 1
        assert "<details><summary>Output of <code>unit</code></summary>" in files["markdown"]
    else:
        uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
        assert uris == {"cloud.py"} and failures == 1
        assert "| <code>cloud.py</code> | 1 |" in files["markdown"]


def test_markdown_verdict_on_stdout_keeps_the_exit_code(world: World) -> None:
    sha = world.commit("cand/md", {"mod.py": MOD.replace("a + b", "a * b")})
    proc = world.run("process-result", "--repo", world.repo, "--candidate", sha,
                     "--format", "markdown")  # fmt: skip
    assert proc.returncode == 1
    assert proc.stdout.startswith("## oms result gate: ❌ FAILED")
    assert "oms:" not in proc.stdout  # any progress goes to stderr, never into the page


@pytest.fixture
def dirty(world: World) -> Path:
    path = world.root / "dirty.py"
    path.write_text(f'KEY = "{fake_aws_key()}"\n')
    return path


def test_scan_formats_on_stdout_and_json_is_the_json_shorthand(world: World, dirty: Path) -> None:
    sarif = world.run("scan", dirty, "--format", "sarif")
    assert sarif.returncode == 3
    sarif_validator().validate(json.loads(sarif.stdout))
    as_format = world.run("scan", dirty, "--format", "json")
    as_flag = world.run("scan", dirty, "--json")
    assert as_format.returncode == as_flag.returncode == 3
    assert parse_single_json(as_format) == parse_single_json(as_flag)
    refused = world.run("scan", world.root / "missing.py", "--format", "json")
    assert refused.returncode == 2 and parse_single_json(refused)["error"]["kind"] == "usage"
    junit = world.run("scan", dirty, "--format", "junit")
    assert junit.returncode == 3 and ET.fromstring(junit.stdout.encode()).get("failures") == "1"


def test_json_with_another_format_is_a_usage_error(world: World, dirty: Path) -> None:
    proc = world.run("scan", dirty, "--json", "--format", "sarif")
    assert proc.returncode == 2
    assert "--json is --format json" in parse_single_json(proc)["error"]["message"]


def test_output_file_gets_the_format_and_stdout_the_text(world: World, dirty: Path) -> None:
    out = world.root / "scan.sarif"
    proc = world.run("scan", dirty, "--format", "sarif", "--output", out)
    assert proc.returncode == 3
    assert "finding(s) not allowed by policy" in proc.stdout  # the text summary
    sarif_validator().validate(json.loads(out.read_text()))
    proc = world.run("scan", dirty, "--format", "markdown", "--output", "-")
    assert proc.returncode == 3 and proc.stdout.startswith("## oms scan:")


def test_output_refuses_a_symlink_a_fifo_and_a_directory(world: World, dirty: Path) -> None:
    target = world.root / "precious.txt"
    target.write_text("keep")
    link = world.root / "link.sarif"
    link.symlink_to(target)
    fifo = world.root / "fifo.sarif"
    os.mkfifo(fifo)
    for path, why in ((link, "symlink"), (fifo, "not a regular file"), (world.root, "directory")):
        proc = world.run("scan", dirty, "--format", "sarif", "--output", path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stdout == "" and proc.stderr.count("\n") == 1 and why in proc.stderr
        proc = world.run("scan", dirty, "--format", "sarif", "--output", path, "--json")
        assert proc.returncode == 2 and why in parse_single_json(proc)["error"]["message"]
    assert link.is_symlink() and target.read_text() == "keep"
    assert fifo.exists() and not fifo.is_file()
