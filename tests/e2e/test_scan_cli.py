"""`oms scan`: both scanners over paths, a commit range or stdin, SARIF out, no secret values.

Fake secrets are built at runtime from pieces; this file holds no scanner-matchable string.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.oms import parse_single_json
from support.secrets import fake_aws_key

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
RunOms = Callable[..., subprocess.CompletedProcess[str]]


def fp(secret: str) -> str:
    return hashlib.sha256(b"oms-finding-v1\x00" + secret.encode()).hexdigest()


def assert_no_secret(key: str, *texts: str) -> None:
    for text in texts:
        assert key not in text and key[4:] not in text


def scan_json(run_oms: RunOms, args: list[str], **kw: Any) -> tuple[int, dict[str, Any], str]:
    """(exit code, the one JSON object, everything printed)."""
    proc = run_oms(["scan", *args, "--json"], **kw)
    return proc.returncode, parse_single_json(proc), proc.stdout + proc.stderr


def test_scan_path_with_fake_key_is_blocked_and_clean_file_passes(
    tmp_path: Path, run_oms: RunOms
) -> None:
    key = fake_aws_key()
    dirty = tmp_path / "dirty.py"
    dirty.write_text(f'import os\nKEY = "{key}"\n')
    clean = tmp_path / "clean.py"
    clean.write_text("print('hello')\n")

    code, out, printed = scan_json(run_oms, [str(dirty)])
    assert code == 3 and out["ok"] is False
    assert {f["scanner"] for f in out["findings"]} == {"gitleaks", "detect-secrets"}
    for f in out["findings"]:
        assert f["file"] == str(dirty) and f["line"] == 2 and f["fingerprint"] == fp(key)
        assert f["allowed"] is False
    assert out["blocking"] == len(out["findings"])
    assert_no_secret(key, printed)

    code, out, _ = scan_json(run_oms, [str(clean)])
    assert code == 0 and out["ok"] is True
    assert out["findings"] == [] and out["blocking"] == 0 and out["scanned_items"] == 1
    assert {s["name"] for s in out["scanners"]} == {"gitleaks", "detect-secrets"}


def test_scan_diff_reports_only_what_the_range_adds(
    git_repo: Path, run_git: Callable[..., str], run_oms: RunOms
) -> None:
    old, new = fake_aws_key(), fake_aws_key()
    (git_repo / "old.py").write_text(f'OLD = "{old}"\n')
    run_git(git_repo, "add", "old.py")
    run_git(git_repo, "commit", "-q", "-m", "old")
    (git_repo / "new.py").write_text(f'\n\nNEW = "{new}"\n')
    run_git(git_repo, "add", "new.py")
    run_git(git_repo, "commit", "-q", "-m", "new")

    code, out, printed = scan_json(run_oms, ["--diff", "HEAD~1..HEAD", "--repo", str(git_repo)])
    assert code == 3
    assert {(f["file"], f["line"], f["fingerprint"]) for f in out["findings"]} == {
        ("new.py", 3, fp(new))
    }
    assert_no_secret(old, printed)
    assert_no_secret(new, printed)


def test_scan_stdin(run_oms: RunOms) -> None:
    key = fake_aws_key()
    code, out, printed = scan_json(run_oms, ["--stdin"], input=f"export K={key}\n")
    assert code == 3
    assert out["findings"] and all(
        f["file"] == "<stdin>" and f["line"] == 1 and f["fingerprint"] == fp(key)
        for f in out["findings"]
    )
    assert_no_secret(key, printed)


def test_scan_writes_sarif_2_1_0_without_secret_values(tmp_path: Path, run_oms: RunOms) -> None:
    key = fake_aws_key()
    dirty = tmp_path / "dirty.json"
    dirty.write_text(json.dumps({"access": key}, indent=2) + "\n")
    sarif_path = tmp_path / "out.sarif.json"
    code, out, printed = scan_json(run_oms, [str(dirty), "--sarif", str(sarif_path)])
    assert code == 3
    text = sarif_path.read_text()
    assert_no_secret(key, text, printed)
    sarif = json.loads(text)
    assert sarif["version"] == "2.1.0"
    runs = {r["tool"]["driver"]["name"]: r for r in sarif["runs"]}
    assert set(runs) == {"gitleaks", "detect-secrets"}
    for run in runs.values():
        assert run["results"]
        rule_ids = {r["id"] for r in run["tool"]["driver"]["rules"]}
        for result in run["results"]:
            assert result["ruleId"] in rule_ids
            assert result["partialFingerprints"] == {"omsSecretSha256/v1": fp(key)}
            loc = result["locations"][0]["physicalLocation"]
            assert loc["artifactLocation"]["uri"] == dirty.as_uri()  # outside any repository
            assert loc["region"]["startLine"] == 2
    assert sum(len(r["results"]) for r in runs.values()) == len(out["findings"])


def test_scan_with_nothing_to_scan_is_a_usage_error(run_oms: RunOms) -> None:
    code, out, _ = scan_json(run_oms, [])
    assert code == 2 and out["error"]["kind"] == "usage"


def test_scan_sarif_never_writes_through_a_symlink(tmp_path: Path, run_oms: RunOms) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "out.sarif"
    link.symlink_to(target)
    proc = run_oms(["scan", "--stdin", "--sarif", str(link), "--json"],
                   input=f'key = "{fake_aws_key()}"\n')  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "symlink" in parse_single_json(proc)["error"]["message"]
    assert target.read_text() == "keep me\n" and link.is_symlink()


def test_only_the_sarif_file_this_scan_writes_is_left_out_and_a_committed_one_is_found(
    git_repo: Path, run_git: Callable[..., str], run_oms: RunOms
) -> None:
    key = fake_aws_key()
    (git_repo / "cfg.py").write_text(f'KEY = "{key}"\n')
    out_file = git_repo / "out.sarif"
    repo = ["--repo", str(git_repo)]
    # Twice into the worktree: the second run does not read the first run's report as code.
    for n in range(2):
        code, out, _ = scan_json(run_oms, ["--sarif", str(out_file), *repo])
        assert code == 3 and {f["file"] for f in out["findings"]} == {"cfg.py"}
        skip = {"path": "out.sarif", "reason": "oms_output", "bytes": None}
        assert (skip in out["skipped"]) == (n == 1)
    # Likewise `--format sarif --output FILE`, beside the first report (which is read).
    for _ in range(2):
        proc = run_oms(["scan", "--format", "sarif", "--output", str(git_repo / "two.sarif"),
                        *repo])  # fmt: skip
        assert proc.returncode == 3
        found = json.loads((git_repo / "two.sarif").read_text())["runs"]
        files = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                 for run in found for r in run["results"]}  # fmt: skip
        assert files == {"cfg.py", "out.sarif"}
    # A committed report that holds a secret is the user's file: scanned as any other.
    (git_repo / "cfg.py").unlink()
    (git_repo / "leaked.sarif").write_text(json.dumps({"snippet": f'KEY = "{key}"'}))
    run_git(git_repo, "add", "leaked.sarif")
    run_git(git_repo, "commit", "-q", "-m", "report")
    elsewhere = git_repo.parent / "elsewhere.sarif"
    code, out, _ = scan_json(run_oms, ["--sarif", str(elsewhere), *repo])
    assert code == 3 and "leaked.sarif" in {f["file"] for f in out["findings"]}
    assert all(s["reason"] != "oms_output" for s in out["skipped"])
    # And the report a previous run left in the worktree is read by a run that writes elsewhere.
    assert "out.sarif" in {f["file"] for f in out["findings"]}
