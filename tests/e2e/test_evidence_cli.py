"""`oms evidence log|blob|verify`, `export` without `--dsse`, and digests named by a unique
prefix, through the real CLI on a real repository: one result gate run (real bwrap, real
scanners) and one transfer preview make the entries these commands read."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.env import clean_env
from support.oms import OMS, parse_single_json, run_oms
from support.repos import commit_on, make_repo

POLICY = r"""version = 1

[[checks]]
name = "talk"
cmd = ["/bin/sh", "-c", "echo out-line; printf 'err-line \\033]0;owned\\007\\n' >&2"]
timeout_s = 60
"""


@dataclass
class World:
    root: Path
    repo: Path
    env: dict[str, str]
    result_seq: int = -1
    digest: str = ""

    def run(self, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return run_oms(list(args), env=self.env, cwd=cwd or self.repo, timeout=300)

    def json(self, *args: str | Path, cwd: Path | None = None) -> tuple[int, dict[str, Any]]:
        proc = self.run(*args, "--json", cwd=cwd)
        return proc.returncode, parse_single_json(proc)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("ev-cli")
    (root / "home").mkdir()
    env = clean_env(root / "home", root / "oms-state")
    repo = make_repo(root / "repo", {"oms.toml": POLICY}, env=env)
    w = World(root, repo, env)
    assert w.json("init")[0] == 0
    cand = commit_on(repo, "cand", {"x.txt": "x\n"}, env=env, index=root / "idx")
    code, out = w.json("process-result", "--candidate", cand)
    assert code == 0, out
    w.result_seq = out["evidence_seq"]
    code, out = w.json("transfer", "preview", "--to", "anthropic:claude", "--purpose", "p")
    assert code == 0, out
    w.digest = out["digest"]
    yield w


# -- log ---------------------------------------------------------------------------------


def test_log_lists_recent_entries_newest_last_with_a_summary(world: World) -> None:
    code, out = world.json("evidence", "log")
    assert code == 0, out
    kinds = [e["kind"] for e in out["entries"]]
    assert kinds[0] == "genesis" and kinds[-1] == "transfer.preview", kinds
    seqs = [e["seq"] for e in out["entries"]]
    assert seqs == sorted(seqs)
    (result,) = [e for e in out["entries"] if e["kind"] == "result"]
    assert result["seq"] == world.result_seq
    assert result["summary"].startswith("READY_FOR_HUMAN "), result
    assert result["data"]["decision"] == "READY_FOR_HUMAN" and result["subject"]
    assert set(result) == {"seq", "time", "kind", "subject", "data", "summary"}
    (preview,) = [e for e in out["entries"] if e["kind"] == "transfer.preview"]
    assert preview["summary"].startswith(world.digest), preview


def test_log_filters_by_kind_and_limits(world: World) -> None:
    code, out = world.json("evidence", "log", "--kind", "result")
    assert code == 0 and [e["kind"] for e in out["entries"]] == ["result.start", "result"]
    code, out = world.json("evidence", "log", "--kind", "transfer")
    assert [e["kind"] for e in out["entries"]] == ["transfer.preview"], out
    code, out = world.json("evidence", "log", "--limit", "1")
    assert [e["kind"] for e in out["entries"]] == ["transfer.preview"], out
    code, out = world.json("evidence", "log", "--limit", "0")
    assert code == 2, out
    proc = world.run("evidence", "log", "--kind", "note")
    assert proc.returncode == 0 and proc.stdout == "no entries\n"
    proc = world.run("evidence", "log", "--kind", "nonsense")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.count("\n") == 1 and "result, toolchain, transfer, work" in proc.stderr


def test_log_human_lines(world: World) -> None:
    proc = world.run("evidence", "log")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if " result " in x)
    assert line.split()[0] == str(world.result_seq) and "READY_FOR_HUMAN" in line


# -- blob --------------------------------------------------------------------------------


def test_blob_prints_a_checks_output_raw(world: World) -> None:
    proc = world.run("evidence", "blob", str(world.result_seq), "talk.stdout")
    assert proc.returncode == 0 and proc.stdout == "out-line\n", proc
    proc = world.run("evidence", "blob", str(world.result_seq), "talk.stderr")
    assert proc.returncode == 0 and proc.stdout == "err-line \x1b]0;owned\x07\n", proc


def test_blob_on_a_terminal_is_sanitised_not_raw(world: World) -> None:
    # The candidate wrote this output: on a terminal its escape sequence is shown, not run.
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.run(
            [*OMS, "evidence", "blob", str(world.result_seq), "talk.stderr"],
            stdout=secondary, stderr=subprocess.PIPE, env=world.env, cwd=world.repo,
            timeout=120, check=False,
        )  # fmt: skip
        os.close(secondary)
        shown = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(primary)
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b" not in shown and b"\x07" not in shown
    assert b"err-line \\u001b]0;owned\\u0007" in shown


def test_blob_by_digest_prefix_and_as_json(world: World) -> None:
    code, out = world.json("evidence", "blob", str(world.result_seq), "talk.stdout")
    assert code == 0 and out["text"] == "out-line\n" and out["bytes"] == 9, out
    digest = out["blob"]
    for name in (digest, digest[:12], "sha256:" + digest[:16]):
        code, again = world.json("evidence", "blob", str(world.result_seq), name)
        assert code == 0 and again["blob"] == digest and again["text"] == "out-line\n", again
    code, out = world.json("evidence", "blob", str(world.result_seq), digest[:11])
    assert code == 2, out


def test_blob_refusals(world: World) -> None:
    code, out = world.json("evidence", "blob", str(world.result_seq), "nope.stdout")
    assert code == 2 and out["error"]["kind"] == "not_found", out
    assert "talk.stdout" in out["error"]["message"], out
    code, out = world.json("evidence", "blob", "0", "anything")
    assert code == 2 and "no blobs" in out["error"]["message"], out
    code, out = world.json("evidence", "blob", "999", "talk.stdout")
    assert code == 2 and out["error"]["kind"] == "not_found", out


# -- export, verify ----------------------------------------------------------------------


def export(world: World, *extra: str) -> Path:
    code, out = world.json("evidence", "export", str(world.result_seq), *extra)
    assert code == 0, out
    path = world.root / f"env{len(extra)}.json"
    path.write_text(json.dumps(out["envelope"]))
    return path


def test_export_needs_no_dsse_flag_and_still_takes_it(world: World) -> None:
    a = json.loads(export(world).read_text())
    b = json.loads(export(world, "--dsse").read_text())
    assert a["payloadType"] == b["payloadType"] == "application/vnd.in-toto+json"
    assert a["payload"] == b["payload"]


def test_verify_an_exported_envelope_offline(world: World) -> None:
    path = export(world)
    code, out = world.json("evidence", "verify", path)
    assert code == 0 and out["valid"] and out["signature"], out
    assert out["predicate_type"] == "https://slsa.dev/verification_summary/v1", out
    assert out["payload_type"] == "application/vnd.in-toto+json" and out["subjects"], out
    code, key = world.json("evidence", "key")
    pem = world.root / "pub.pem"
    pem.write_text(key["public_key_pem"])
    # With --key from anywhere, without a state root at all.
    env = {**world.env, "OMS_HOME": str(world.root / "no-state")}
    proc = run_oms(["evidence", "verify", path, "--key", pem, "--json"], env=env, cwd=world.root)
    assert proc.returncode == 0 and parse_single_json(proc)["valid"], proc.stdout
    proc = world.run("evidence", "verify", path)
    assert proc.returncode == 0 and proc.stdout.startswith("valid: "), proc


def test_verify_refuses_another_key_and_a_changed_envelope(world: World) -> None:
    path = export(world)
    other = world.root / "other.pem"
    other.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))  # fmt: skip
    code, out = world.json("evidence", "verify", path, "--key", other)
    assert code == 3 and not out["valid"] and not out["signature"], out
    env = json.loads(path.read_text())
    env["payload"] = env["payload"][:-8] + "AAAAAAAA"
    bad = world.root / "bad.json"
    bad.write_text(json.dumps(env))
    code, out = world.json("evidence", "verify", bad)
    assert code == 3 and out["reasons"], out
    bad.write_text("not json")
    code, out = world.json("evidence", "verify", bad)
    assert code == 3 and out["reasons"] == ["the file is not JSON"], out
    code, out = world.json("evidence", "verify", world.root / "missing.json")
    assert code == 2, out
    garbage = world.root / "garbage.pem"
    garbage.write_text("no key\n")
    code, out = world.json("evidence", "verify", path, "--key", garbage)
    assert code == 4 and out["error"]["kind"] == "unavailable", out


# -- digest prefixes ---------------------------------------------------------------------


def test_transfer_show_by_a_unique_prefix_from_any_directory(world: World) -> None:
    hexd = world.digest.removeprefix("sha256:")
    for name in (hexd[:12], "sha256:" + hexd[:20], hexd.upper()[:12]):
        code, out = world.json("transfer", "show", name, cwd=world.root)
        assert code == 0 and out["digest"] == world.digest, out
    code, out = world.json("transfer", "show", hexd[:12], "--repo", world.repo)
    assert code == 0 and out["digest"] == world.digest, out


def test_a_short_or_unknown_prefix_is_refused(world: World) -> None:
    hexd = world.digest.removeprefix("sha256:")
    code, out = world.json("transfer", "show", hexd[:11])
    assert code == 2 and "at least 12" in out["error"]["message"], out
    code, out = world.json("transfer", "approve", hexd[:11], "--code", "00000000")
    assert code == 2 and "at least 12" in out["error"]["message"], out
    other = "f" * 12 if not hexd.startswith("f" * 12) else "e" * 12
    code, out = world.json("transfer", "release", other, "--out", str(world.root / "o"))
    assert code == 2 and "no manifest starts with" in out["error"]["message"], out
    assert not (world.root / "o").exists()


def test_an_ambiguous_prefix_says_how_many_match(world: World) -> None:
    (transfers,) = Path(world.env["OMS_HOME"]).glob("repos/*/transfers")
    prefix = "abcdef012345"
    planted = [transfers / f"{prefix}{c * 52}.dsse.json" for c in "01"]
    for p in planted:
        p.write_text("{}")
    try:
        code, out = world.json("transfer", "show", prefix)
        assert code == 2 and "ambiguous: 2 manifests" in out["error"]["message"], out
    finally:
        for p in planted:
            p.unlink()


# -- a log that does not verify is not listed ---------------------------------------------


def test_log_refuses_a_tampered_log(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    env = clean_env(tmp_path / "home", tmp_path / "oms-state")
    repo = make_repo(tmp_path / "repo", env=env)
    w = World(tmp_path, repo, env)
    assert w.json("init")[0] == 0
    assert w.json("evidence", "note", "-m", "original words")[0] == 0
    (log,) = (tmp_path / "oms-state").glob("repos/*/evidence/log.jsonl")
    log.write_text(log.read_text().replace("original words", "different word"))
    code, out = w.json("evidence", "log")
    assert code == 3 and out["error"]["kind"] == "tampered", out
