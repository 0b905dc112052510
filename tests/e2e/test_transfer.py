"""The transfer gate (the data boundary): preview, approve, release, show, list.

Real git repositories, the real scanners and the real `oms` CLI (as a subprocess where
the exit code and the JSON contract matter). Approvals that a test only needs as a
precondition are given in-process through a stand-in for the terminal; the terminal
itself is exercised through a real pseudo-terminal. Fake secrets are built at run time
from pieces, never written literally in this file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import random
import re
import secrets
import shlex
import string
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support.env import use_clean_git_here
from support.pty import oms_at_pty

from evidence import Draft, EvidenceStore, repo_id_for
from gatekeeper.cli import render as output
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import Blocked, UsageError, classify
from gatekeeper.gates import records
from gatekeeper.gates.transfer import approve as tx_approve
from gatekeeper.gates.transfer import clock, tty
from gatekeeper.gates.transfer import preview as tx_preview
from gatekeeper.gates.transfer import release as tx_release
from gatekeeper.gates.transfer import state as tx_state
from gatekeeper.gates.transfer.payloads import HumanApprover
from gatekeeper.gates.transfer.visibility import visibility
from gatekeeper.repo.git import open_repo

DEST = "anthropic:claude"
OTHER_DEST = "openai:gpt"
PURPOSE = "explain the parser"
REDACTION_PREFIX = "[oms: line redacted:"
APPROVE_RE = re.compile(r"oms transfer approve (sha256:[0-9a-f]{64}) --code ([0-9a-f]{8})")

# [transfer] approval_ttl_s = 30: the shortest approval the policy allows.
TTL_POLICY = "version = 1\n[transfer]\napproval_ttl_s = 30\n"
AUTOPILOT_MAX = 4096
AUTOPILOT_POLICY = f"""version = 1

[[transfer.autopilot]]
name = "small"
destinations = ["{DEST}"]
max_bytes = {AUTOPILOT_MAX}
context = ["paths"]
require_clean_pushed = true
"""
PERMISSIVE_POLICY = f"""version = 1

[[transfer.autopilot]]
name = "agent-wrote-this"
destinations = ["{DEST}"]
max_bytes = 1000000
context = ["repo", "diff", "paths", "none"]
require_clean_pushed = false
"""

ESC, BEL, DEL = "\x1b", "\x07", "\x7f"
RLO, LRI, PDI, ZWSP, ZWJ, BOM = "\u202e", "\u2066", "\u2069", "\u200b", "\u200d", "\ufeff"


def forbidden_chars(text: str) -> list[str]:
    """Characters that must never reach a terminal from an approval packet."""
    return [
        repr(c)
        for c in text
        if ord(c) < 32
        or c == DEL
        or 0x200B <= ord(c) <= 0x200F
        or 0x202A <= ord(c) <= 0x202E
        or 0x2066 <= ord(c) <= 0x2069
        or c == BOM
    ]


def fake_github_token() -> str:
    alnum = string.ascii_letters + string.digits
    return "gh" + "p_" + "".join(secrets.choice(alnum) for _ in range(36))


def fake_private_key() -> tuple[str, list[str]]:
    """A PEM-looking RSA private key block and its body lines (random base64)."""
    body = base64.b64encode(secrets.token_bytes(720)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    kind = "RSA " + "PRIVATE" + " KEY"
    return f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {kind}-----\n", lines


def approval_command(res: dict[str, Any]) -> tuple[str, str]:
    """(digest, code) from the packet's copyable_text_block, the one command a human copies."""
    block = res["approval_packet"]["copyable_text_block"]
    m = APPROVE_RE.fullmatch(block)
    assert m, f"no approval command in the packet: {block!r}"
    assert m[1] == res["digest"]
    return m[1], m[2]


def parse_payload(data: bytes) -> tuple[dict[str, Any], list[tuple[dict[str, Any], bytes]]]:
    """The release format (release.payload_of): manifest JSON line, then header + bytes + NL."""
    first, _, rest = data.partition(b"\n")
    manifest = json.loads(first)
    items = []
    while rest:
        header_raw, _, rest = rest.partition(b"\n")
        header = json.loads(header_raw)
        body, rest = rest[: header["bytes"]], rest[header["bytes"] :]
        assert rest[:1] == b"\n", "an item is not followed by a newline"
        rest = rest[1:]
        items.append((header, body))
    return manifest, items


@dataclass
class Tx:
    """One repository with its own `$OMS_HOME`, and everything the CLI printed."""

    repo: Path
    home: Path
    tmp: Path
    env: dict[str, str]
    run_oms: Callable[..., subprocess.CompletedProcess[str]]
    parse_json: Callable[[subprocess.CompletedProcess[str]], dict[str, Any]]
    monkeypatch: pytest.MonkeyPatch
    terminal_calls: list[list[str]]
    transcript: list[str] = field(default_factory=list)

    # -- git -------------------------------------------------------------------------
    def git(self, *args: str) -> str:
        proc = subprocess.run(
            ["git", "-C", str(self.repo), *args],
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
        )
        assert proc.returncode == 0, f"git {args}: {proc.stderr}"
        return proc.stdout

    def commit(self, message: str = "change", *extra: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", *extra, "-m", message)

    def write(self, rel: str, content: str | bytes) -> Path:
        p = self.repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            p.write_text(content)
        else:
            p.write_bytes(content)
        return p

    # -- the CLI (a subprocess, no controlling terminal) -------------------------------
    def cli(
        self, *args: str, expect: int, text_mode: bool = False, repo: bool = True, **kw: Any
    ) -> Any:
        """Run `oms ARGS` (with `--repo` unless `repo` is false; `cwd=` moves it elsewhere)."""
        argv = [*args, "--repo", str(self.repo)] if repo else list(args)
        if not text_mode:
            argv.append("--json")
        if "input" not in kw:
            kw["stdin"] = subprocess.DEVNULL
        proc = self.run_oms(argv, start_new_session=True, **kw)
        self.transcript += [proc.stdout, proc.stderr]
        assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
        return proc.stdout if text_mode else self.parse_json(proc)

    def preview_cli(
        self, *args: str, expect: int, to: str = DEST, purpose: str = PURPOSE, **kw: Any
    ) -> Any:
        return self.cli(
            "transfer", "preview", "--to", to, "--purpose", purpose, *args, expect=expect, **kw
        )

    def release_cli(self, digest: str, out: Path, expect: int) -> Any:
        return self.cli("transfer", "release", digest, "--out", str(out), expect=expect)

    # -- the gate in-process -----------------------------------------------------------
    def preview(
        self,
        context: str = "repo",
        paths: tuple[str, ...] = (),
        *,
        to: str = DEST,
        purpose: str = PURPOSE,
        base: str | None = None,
        redact: bool = False,
    ) -> dict[str, Any]:
        previewed = tx_preview.preview(self.repo, to, purpose, context, list(paths), base, redact)
        res = previewed.to_json()
        self.transcript.append(json.dumps(res, ensure_ascii=False))
        return res

    def approve_as_human(self, digest: str, code: str) -> dict[str, Any]:
        """Approve with a stand-in for the human at the terminal (a test precondition)."""
        with self.monkeypatch.context() as mp:
            human = HumanApprover(name="tester", uid=os.getuid())
            mp.setattr(tx_approve, "confirm_at_terminal", lambda summary: human)
            res = tx_approve.approve(self.repo, digest, code).to_json()
        assert res["approver"]["kind"] == "human"
        return res

    def preview_approved(
        self, context: str = "repo", paths: tuple[str, ...] = (), **kw: Any
    ) -> str:
        res = self.preview(context, paths, **kw)
        assert res["status"] == "previewed", res["manifest"]["block_reasons"]
        digest, code = approval_command(res)
        self.approve_as_human(digest, code)
        return digest

    # -- the state root ----------------------------------------------------------------
    def log(self) -> list[dict[str, Any]]:
        path = self.home / "repos" / repo_id_for(self.repo / ".git") / "evidence/log.jsonl"
        return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]

    def entries(self, kind: str, digest: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.log()
            if e["kind"] == kind and (digest is None or e["data"].get("digest") == digest)
        ]

    def envelope_path(self, digest: str) -> Path:
        (path,) = self.home.glob(f"repos/*/transfers/{digest.removeprefix('sha256:')}.dsse.json")
        return path

    def stored(self, sha256: str) -> bytes:
        (path,) = self.home.glob(f"repos/*/evidence/blobs/{sha256[:2]}/{sha256[2:]}")
        return path.read_bytes()

    def item_bytes(self, manifest: dict[str, Any], item: dict[str, Any]) -> bytes:
        """An item's bytes from the manifest's stored payload pack, checked by its digest."""
        pack = self.stored(manifest["payload_blob"])
        at = 0
        for it in manifest["items"]:
            if it is item or it == item:
                data = pack[at : at + it["bytes"]]
                assert hashlib.sha256(data).hexdigest() == it["sha256"]
                return data
            at += it["bytes"]
        raise AssertionError("item not in manifest")

    def state_files(self, *, blobs: bool = True) -> Iterator[tuple[Path, bytes]]:
        """Every file under $OMS_HOME, plus the decoded payload of every manifest envelope."""
        for p in sorted(self.home.rglob("*")):
            if not p.is_file() or (not blobs and "blobs" in p.parts):
                continue
            data = p.read_bytes()
            yield p, data
            if p.name.endswith(".dsse.json"):
                yield p, base64.b64decode(json.loads(data)["payload"])

    def assert_nowhere(self, needle: str, *extra: bytes, blobs: bool = True) -> None:
        """`needle` is in no output, no file under $OMS_HOME, no decoded manifest, no extra."""
        raw = needle.encode()
        for text in self.transcript:
            assert needle not in text, "found in CLI output"
        for path, data in self.state_files(blobs=blobs):
            assert raw not in data, f"found under $OMS_HOME: {path.relative_to(self.home)}"
        for i, data in enumerate(extra):
            assert raw not in data, f"found in extra #{i}"


@pytest.fixture(autouse=True)
def _in_process_env(oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process gate calls see the same clean git environment as the subprocesses."""
    use_clean_git_here(oms_env, monkeypatch)


@pytest.fixture
def terminal_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """In-process, the real terminal is never touched: a call is recorded and refused."""
    calls: list[list[str]] = []

    def no_terminal(summary: list[str]) -> HumanApprover:
        calls.append(summary)
        raise Blocked("approval needs a human at a terminal (test stand-in: no terminal)")

    monkeypatch.setattr(tx_approve, "confirm_at_terminal", no_terminal)
    return calls


@pytest.fixture
def make_tx(
    git_repo: Path,
    tmp_path: Path,
    oms_env: dict[str, str],
    oms_home: Path,
    run_oms: Callable[..., subprocess.CompletedProcess[str]],
    parse_json: Callable[[subprocess.CompletedProcess[str]], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    terminal_calls: list[list[str]],
) -> Callable[..., Tx]:
    """`make_tx(files, policy=None, push=False)`: files committed on `main`, `oms init` done.

    With `push`, a bare repository is `origin` and `main` is pushed with upstream
    tracking, so that the repository is clean-pushed.
    """

    def make(
        files: dict[str, str | bytes] | None = None,
        *,
        policy: str | None = None,
        push: bool = False,
    ) -> Tx:
        tx = Tx(
            git_repo, oms_home, tmp_path, oms_env, run_oms, parse_json, monkeypatch, terminal_calls
        )
        for rel, content in (files or {}).items():
            tx.write(rel, content)
        if policy is not None:
            tx.write("oms.toml", policy)
        tx.commit("files", "--allow-empty")
        if push:
            origin = tmp_path / "origin.git"
            subprocess.run(
                ["git", "init", "-q", "--bare", "-b", "main", str(origin)],
                env=oms_env,
                check=True,
                capture_output=True,
            )
            tx.git("remote", "add", "origin", str(origin))
            tx.git("push", "-q", "-u", "origin", "main")
        records.init(tx.repo)
        return tx

    return make


SOURCES = {
    "src/app.py": "def parse(text):\n    return text.split()\n",
    "docs/guide.md": "# Guide\n\nRun the parser.\n",
    "docs/faq.md": "# FAQ\n\nNothing yet.\n",
}


# --------------------------------------------------------------------------------------
# Approvals are single-use, bound to one manifest, and expire
# --------------------------------------------------------------------------------------


def test_release_replay_is_refused_and_payload_not_written_again(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx(SOURCES)
    digest = tx.preview_approved("repo")
    first, second = tx.tmp / "first.payload", tx.tmp / "second.payload"
    out = tx.release_cli(digest, first, expect=0)
    assert out["status"] == "released"
    payload = first.read_bytes()
    _, items = parse_payload(payload)
    assert "sha256:" + hashlib.sha256(payload.split(b"\n", 1)[0]).hexdigest() == digest
    assert {h["path"]: body for h, body in items} == {
        "README.md": b"hello\n",
        **{k: v.encode() for k, v in SOURCES.items()},
    }

    refused = tx.release_cli(digest, second, expect=3)
    assert refused["error"]["kind"] == "blocked"
    assert "already released" in refused["error"]["message"]
    assert not second.exists()
    assert len(tx.entries("transfer.release", digest)) == 1


def test_approval_of_one_manifest_does_not_release_another(make_tx: Callable[..., Tx]) -> None:
    tx = make_tx(SOURCES)
    a = tx.preview_approved("paths", ("docs",))
    b_res = tx.preview("paths", ("src",))
    b, _ = approval_command(b_res)
    refused = tx.release_cli(b, tx.tmp / "b.payload", expect=3)
    assert refused["error"]["kind"] == "blocked"
    assert b in refused["error"]["message"]
    assert not (tx.tmp / "b.payload").exists()
    assert tx.entries("transfer.release") == []
    # A's approval was not spent by the attempt on B.
    assert tx.release_cli(a, tx.tmp / "a.payload", expect=0)["status"] == "released"


def test_manifest_is_released_at_most_once_even_with_two_approvals(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx(SOURCES)
    res = tx.preview("paths", ("docs",))
    digest, code = approval_command(res)
    tx.approve_as_human(digest, code)
    try:
        tx.approve_as_human(digest, code)  # refusing a second approval is a fix as well
    except Blocked:
        pass
    tx.release_cli(digest, tx.tmp / "one.payload", expect=0)
    tx.release_cli(digest, tx.tmp / "two.payload", expect=3)
    assert not (tx.tmp / "two.payload").exists()


def test_expired_approval_is_refused_at_release(
    make_tx: Callable[..., Tx], monkeypatch: pytest.MonkeyPatch
) -> None:
    tx = make_tx(SOURCES, policy=TTL_POLICY)
    digest = tx.preview_approved("paths", ("docs",))
    (approval,) = tx.entries("transfer.approve", digest)
    later = datetime.now(UTC) + timedelta(seconds=31)
    with monkeypatch.context() as mp:
        mp.setattr(clock, "now", lambda: later)
        with pytest.raises(Blocked, match="no unused, unexpired approval") as exc:
            tx_release.release(tx.repo, digest, str(tx.tmp / "late.payload"))
        assert classify(exc.value) == (3, "blocked")
        assert tx_state.show(tx.repo, digest).to_json()["status"] == "expired"
    assert tx.entries("transfer.release") == []
    assert approval["data"]["expires"] <= clock.stamp(later)
    # Within the 30 s the same approval is good: the refusal was the clock's.
    assert tx_release.release(tx.repo, digest, None)[0].to_json()["status"] == "released"


def test_expired_manifest_cannot_be_approved(
    make_tx: Callable[..., Tx], monkeypatch: pytest.MonkeyPatch
) -> None:
    tx = make_tx(SOURCES)
    res = tx.preview("paths", ("docs",))
    digest, code = approval_command(res)
    expires = datetime.strptime(res["manifest"]["expires"], "%Y-%m-%dT%H:%M:%SZ")
    later = expires.replace(tzinfo=UTC) + timedelta(seconds=1)
    with monkeypatch.context() as mp:
        mp.setattr(clock, "now", lambda: later)
        with pytest.raises(Blocked, match="expired") as exc:
            tx.approve_as_human(digest, code)
        assert classify(exc.value) == (3, "blocked")
        assert tx_state.show(tx.repo, digest).to_json()["status"] == "expired"
    assert tx.entries("transfer.approve") == []


# --------------------------------------------------------------------------------------
# Release re-reads every byte: anything changed after approval is refused
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        ("edit", "src/app.py changed since the preview"),
        ("add", "added or removed"),
        ("delete", "added or removed"),
        ("head", "HEAD moved since the preview"),
    ],
)
def test_release_refused_when_repository_changed_after_approval(
    make_tx: Callable[..., Tx], change: str, cause: str
) -> None:
    tx = make_tx(SOURCES)
    digest = tx.preview_approved("repo")
    if change == "edit":
        tx.write("src/app.py", SOURCES["src/app.py"] + "# one more line\n")
    elif change == "add":
        tx.write("src/new.py", "NEW = 1\n")
    elif change == "delete":
        (tx.repo / "docs/faq.md").unlink()
    else:
        tx.git("commit", "-q", "--allow-empty", "-m", "moved")
    out = tx.tmp / "payload"
    refused = tx.release_cli(digest, out, expect=3)
    assert refused["error"]["kind"] == "blocked"
    assert cause in refused["error"]["message"]
    assert not out.exists()
    assert tx.entries("transfer.release") == []
    assert len(tx.entries("transfer.approve", digest)) == 1


def test_a_tampered_payload_blob_is_refused_at_release_after_the_worktree_check(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx(SOURCES)
    digest = tx.preview_approved("repo")
    envelope = json.loads(tx.envelope_path(digest).read_bytes())
    pack = json.loads(base64.b64decode(envelope["payload"]))["payload_blob"]
    (blob,) = tx.home.glob(f"repos/*/evidence/blobs/{pack[:2]}/{pack[2:]}")
    blob.chmod(0o600)
    blob.write_bytes(blob.read_bytes().replace(b"parse", b"parsE"))
    tx.write("src/app.py", SOURCES["src/app.py"] + "# edited\n")
    changed = tx.release_cli(digest, tx.tmp / "payload", expect=3)  # the worktree check first
    assert "src/app.py changed since the preview" in changed["error"]["message"]
    tx.write("src/app.py", SOURCES["src/app.py"])
    tampered = tx.release_cli(digest, tx.tmp / "payload", expect=3)
    assert tampered["error"]["kind"] == "tampered", tampered
    assert not (tx.tmp / "payload").exists()
    assert tx.entries("transfer.release") == []


def test_release_refused_when_redacted_file_edited_after_approval(
    make_tx: Callable[..., Tx],
) -> None:
    token = fake_github_token()
    tx = make_tx({"config.py": f'NAME = "svc"\ntoken = "{token}"\n\n\nDEBUG = False\n'})
    digest = tx.preview_approved("paths", ("config.py",), redact=True)
    tx.write("config.py", f'NAME = "svc"\ntoken = "{token}"\n\n\nDEBUG = True\n')
    tx.release_cli(digest, tx.tmp / "payload", expect=3)


def test_release_refused_when_file_added_to_selected_folder(make_tx: Callable[..., Tx]) -> None:
    tx = make_tx(SOURCES)
    digest = tx.preview_approved("paths", ("docs",))
    tx.write("docs/new.md", "# New page\n")
    tx.release_cli(digest, tx.tmp / "payload", expect=3)


def test_preview_of_a_repository_with_a_thousand_files(make_tx: Callable[..., Tx]) -> None:
    tx = make_tx()
    for i in range(1000):
        tx.write(f"pkg{i // 100}/m{i}.py", f"N = {i}\n")
    res = tx.preview("repo")
    assert res["status"] == "previewed"
    assert res["manifest"]["totals"]["items"] == 1001


# --------------------------------------------------------------------------------------
# What is never selected, and never read
# --------------------------------------------------------------------------------------


def test_symlinks_and_paths_outside_the_repository_are_excluded_and_never_read(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx(SOURCES)
    marker = "HOSTMARK-" + secrets.token_hex(12)
    host = tx.tmp / "host-secret.txt"
    host.write_text(f"host data {marker}\n")
    fifo = tx.tmp / "host.fifo"  # opening this for reading would hang: a read is visible
    os.mkfifo(fifo)
    os.symlink(host, tx.repo / "link.txt")
    os.symlink(fifo, tx.repo / "pipe.txt")

    whole = tx.preview_cli("--context", "repo", expect=0, timeout=30)
    excluded = {e["path"]: e["reason"] for e in whole["manifest"]["excluded"]}
    assert excluded["link.txt"] == "symlink leaving the repository"
    assert excluded["pipe.txt"] == "symlink leaving the repository"
    sent = {i["path"] for i in whole["manifest"]["items"]}
    assert sent == {"README.md", *SOURCES}

    asked = ["../host-secret.txt", str(host), "link.txt", "pipe.txt", "docs"]
    path_args = [arg for p in asked for arg in ("--path", p)]
    named = tx.preview_cli("--context", "paths", *path_args, expect=0, timeout=30)
    excluded = {e["path"]: e["reason"] for e in named["manifest"]["excluded"]}
    assert excluded["../host-secret.txt"] == "outside the repository"
    assert excluded[str(host)] == "outside the repository"
    assert "outside the repository" in excluded["link.txt"]
    assert "outside the repository" in excluded["pipe.txt"]
    assert {i["path"] for i in named["manifest"]["items"]} == {"docs/faq.md", "docs/guide.md"}

    digest, code = approval_command(whole)
    tx.approve_as_human(digest, code)
    out = tx.tmp / "payload"
    tx.release_cli(digest, out, expect=0)
    tx.assert_nowhere(marker, out.read_bytes())


def test_secret_names_dependency_dirs_ignored_large_and_binary_files_are_excluded(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx({**SOURCES, ".gitignore": "ignored.log\n"})
    marker = "NAMEMARK-" + secrets.token_hex(12)
    secret_names = [".env", "id_rsa", "x.pem", ".npmrc", "credentials.json"]
    for name in secret_names:
        tx.write(name, f"value = {marker}\n")
    tx.write("node_modules/pkg/index.js", f"// {marker}\n")
    tx.write("build/out.js", f"// {marker}\n")
    tx.write("ignored.log", f"{marker}\n")
    tx.write("blob.dat", b"head\0" + marker.encode() + b"\n")
    with open(tx.repo / "big.txt", "wb") as f:  # sparse: 50 MB of nothing, written in no time
        f.truncate(50 << 20)

    res = tx.preview("repo")
    excluded = {e["path"]: e["reason"] for e in res["manifest"]["excluded"]}
    for name in secret_names:
        assert excluded[name] == "secret-looking name", name
    assert excluded["node_modules/pkg/index.js"] == "dependency or build folder"
    assert excluded["build/out.js"] == "dependency or build folder"
    assert excluded["ignored.log"] == "gitignored"
    assert excluded["big.txt"].startswith("over the size limit")
    assert excluded["blob.dat"] == "binary"
    assert {i["path"] for i in res["manifest"]["items"]} == {"README.md", ".gitignore", *SOURCES}
    tx.assert_nowhere(marker)


# --------------------------------------------------------------------------------------
# Untrusted text in the approval packet
# --------------------------------------------------------------------------------------


def test_approval_packet_neutralises_escapes_bidi_and_zero_width(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx(SOURCES)
    tx.write(f"notes{ESC}[31mred{RLO}gpj.exe{ZWSP}.md", "notes\n")
    tx.git("checkout", "-q", "-b", f"feature{RLO}evil{ZWSP}{ZWJ}")
    purpose = (
        f"fix {ESC}[2J{ESC}]0;owned{BEL} {RLO}txt.exe {ZWSP}{BOM} {LRI}x{PDI} "
        f"tab\there\r\nsecond line{DEL}"
    )
    to = f"anthropic:claude{ESC}[31m{RLO}"
    res = tx.preview_cli("--context", "repo", expect=0, to=to, purpose=purpose)
    packet = res["approval_packet"]
    strings = [*packet["summary"], packet["copyable_text_block"]]
    assert set(packet) == {"summary", "copyable_text_block"}
    for s in strings:
        assert isinstance(s, str)
        assert forbidden_chars(s) == [], s
    text = "\n".join(strings)
    assert "\\u202e" in text and "\\u001b" in text  # shown, not silently dropped
    assert any(s.startswith("purpose: fix ") for s in packet["summary"])
    approval_command(res)
    # The human-readable `show` prints the same, neutralised, summary.
    shown = tx.cli("transfer", "show", res["digest"], expect=0, text_mode=True)
    for line in shown.splitlines():
        assert forbidden_chars(line) == [], line


def test_transfer_list_text_neutralises_the_destination(make_tx: Callable[..., Tx]) -> None:
    tx = make_tx(SOURCES)
    tx.preview("none", to=f"anthropic:claude{ESC}]0;owned{BEL}{RLO}")
    listed = tx.cli("transfer", "list", expect=0, text_mode=True)
    for line in listed.splitlines():
        assert forbidden_chars(line) == [], line


# --------------------------------------------------------------------------------------
# Approval comes from the controlling terminal, never from stdin
# --------------------------------------------------------------------------------------


def approve_at_pty(
    tx: Tx,
    digest: str,
    code: str,
    answer: bytes,
    *,
    command: list[str] | None = None,
    cwd: Path | None = None,
    env_extra: dict[str, str] | None = None,
) -> tuple[int, str, str, str]:
    """Run `oms transfer approve` with a pseudo-terminal as its controlling terminal and
    stdin on /dev/null (support/pty.py); type `answer` at the prompt. (exit code, stdout,
    stderr, screen).

    `command`: the argv after `oms` instead (e.g. the copied approval command, as is)."""
    args = command or ["transfer", "approve", digest, "--code", code, "--repo", str(tx.repo)]
    got = oms_at_pty([*args, "--json"], answer, env={**tx.env, **(env_extra or {})},
                     cwd=cwd or tx.tmp)  # fmt: skip
    tx.transcript += [got.out, got.err]
    return got.code, got.out, got.err, got.screen


def test_approval_without_a_terminal_is_refused_even_with_yes_on_stdin(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx(SOURCES)
    res = tx.preview("paths", ("docs",), to=OTHER_DEST)
    digest, code = approval_command(res)
    stdin_variants: list[dict[str, Any]] = [{}, {"input": "yes\n"}]
    for kw in stdin_variants:
        refused = tx.cli("transfer", "approve", digest, "--code", code, expect=3, **kw)
        assert refused["error"]["kind"] == "blocked"
        assert "terminal" in refused["error"]["message"]
    assert tx.entries("transfer.approve") == []
    assert tx_state.show(tx.repo, digest).to_json()["status"] == "previewed"


@pytest.mark.parametrize(("answer", "accepted"), [(b"yes\r\n", True), (b"no\r\n", False)])
def test_approval_at_a_pseudo_terminal(
    make_tx: Callable[..., Tx], answer: bytes, accepted: bool
) -> None:
    tx = make_tx(SOURCES)
    purpose = f"review {ESC}[31m{RLO}gpj.exe{ZWSP}"
    res = tx.preview("paths", ("docs",), to=OTHER_DEST, purpose=purpose)
    digest, code = approval_command(res)
    rc, out, err, screen = approve_at_pty(tx, digest, code, answer)
    # The terminal showed the summary, neutralised (the pty turns \n into \r\n).
    assert "destination: openai:gpt (api)" in screen
    assert "Approve this transfer?" in screen
    for line in screen.replace("\r\n", "\n").split("\n"):
        assert forbidden_chars(line) == [], line
    obj = json.loads(out)
    assert obj["oms_exit_code"] == rc, (out, err)
    if accepted:
        assert rc == 0, (out, err)
        assert obj["approver"]["kind"] == "human"
        assert obj["approver"]["uid"] == os.getuid()
        (entry,) = tx.entries("transfer.approve", digest)
        assert entry["data"]["approver"] == obj["approver"]
    else:
        assert rc == 3, (out, err)
        assert obj["error"]["kind"] == "blocked"
        assert "not approved" in obj["error"]["message"]
        assert tx.entries("transfer.approve") == []


def test_ctrl_c_at_the_approval_prompt_exits_130_and_approves_nothing(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx(SOURCES)
    res = tx.preview("paths", ("docs",), to=OTHER_DEST)
    digest, code = approval_command(res)
    # Ctrl-C typed at the terminal: the line discipline sends SIGINT to the foreground group.
    rc, out, err, screen = approve_at_pty(tx, digest, code, b"\x03")
    assert "Approve this transfer?" in screen
    obj = json.loads(out)
    assert rc == 130 and obj["oms_exit_code"] == 130, (out, err)
    assert obj["error"]["kind"] == "interrupted"
    assert obj["error"]["message"] == "interrupted by Ctrl-C"
    assert tx.entries("transfer.approve") == []
    assert tx_state.show(tx.repo, digest).to_json()["status"] == "previewed"


# --------------------------------------------------------------------------------------
# Autopilot: bounded, from the default branch's policy, never with findings
# --------------------------------------------------------------------------------------


@pytest.fixture
def autopilot_tx(make_tx: Callable[..., Tx]) -> Tx:
    """A clean-pushed repository whose `main` policy has the rule `small` (max N bytes)."""
    return make_tx(
        {
            **SOURCES,
            "docs/exact.txt": "x" * AUTOPILOT_MAX,
            "docs/over.txt": "x" * (AUTOPILOT_MAX + 1),
        },
        policy=AUTOPILOT_POLICY,
        push=True,
    )


def test_autopilot_approves_a_manifest_of_exactly_max_bytes(autopilot_tx: Tx) -> None:
    tx = autopilot_tx
    res = tx.preview("paths", ("docs/exact.txt",))
    assert res["manifest"]["visibility"]["state"] == "clean-pushed"
    assert res["manifest"]["totals"]["bytes"] == AUTOPILOT_MAX
    assert res["manifest"]["autopilot_rule"] == "small"
    assert "autopilot rule that applies: small" in res["approval_packet"]["summary"]
    digest, code = approval_command(res)
    ok = tx.cli("transfer", "approve", digest, "--code", code, expect=0)  # no terminal at all
    assert ok["approver"] == {"kind": "policy", "name": "policy:small"}
    (entry,) = tx.entries("transfer.approve", digest)
    assert entry["data"]["approver"] == ok["approver"]


def test_autopilot_does_not_approve_one_byte_over_max_bytes(autopilot_tx: Tx) -> None:
    tx = autopilot_tx
    res = tx.preview("paths", ("docs/over.txt",))
    assert res["manifest"]["totals"]["bytes"] == AUTOPILOT_MAX + 1
    assert res["manifest"]["autopilot_rule"] is None
    digest, code = approval_command(res)
    refused = tx.cli("transfer", "approve", digest, "--code", code, expect=3)
    assert "terminal" in refused["error"]["message"]
    assert tx.entries("transfer.approve") == []


@pytest.mark.parametrize("why", ["another destination", "dirty worktree"])
def test_autopilot_does_not_apply(autopilot_tx: Tx, why: str) -> None:
    tx = autopilot_tx
    to = DEST
    if why == "another destination":
        to = OTHER_DEST
    else:  # the item itself: same size, other bytes than any commit holds
        tx.write("docs/exact.txt", "y" * AUTOPILOT_MAX)
    res = tx.preview("paths", ("docs/exact.txt",), to=to)
    assert res["manifest"]["totals"]["bytes"] == AUTOPILOT_MAX
    assert res["manifest"]["autopilot_rule"] is None
    if why == "dirty worktree":
        assert res["manifest"]["visibility"]["state"] == "dirty"
    digest, code = approval_command(res)
    with pytest.raises(Blocked, match="terminal"):
        tx_approve.approve(tx.repo, digest, code)
    assert len(tx.terminal_calls) == 1  # it asked for a human
    assert tx.entries("transfer.approve") == []


def test_autopilot_never_approves_a_manifest_with_findings(autopilot_tx: Tx) -> None:
    tx = autopilot_tx
    tx.write("docs/leak.txt", f"token = {fake_github_token()}\n")
    tx.commit("leak")
    tx.git("push", "-q")
    res = tx.preview("paths", ("docs/leak.txt",))
    assert res["manifest"]["visibility"]["state"] == "clean-pushed"
    assert res["status"] == "blocked"
    assert res["manifest"]["autopilot_rule"] is None
    refused = tx.cli(
        "transfer", "approve", res["digest"], "--code", res["manifest"]["nonce"][:8], expect=3
    )
    assert refused["error"]["kind"] == "blocked"
    assert tx.entries("transfer.approve") == []


def test_autopilot_takes_a_redacted_manifest_but_never_one_with_findings_left(
    autopilot_tx: Tx,
) -> None:
    # Decision (docs/transfer.md, the demo flow): a rule may approve a manifest
    # whose every finding was redacted and whose re-scan was clean; never one that
    # still carries findings (those are blocked).
    tx = autopilot_tx
    tx.write("docs/leak.txt", f"token = {fake_github_token()}\n")
    tx.commit("leak")
    tx.git("push", "-q")
    blocked = tx.preview("paths", ("docs/leak.txt",))
    assert blocked["status"] == "blocked"
    assert blocked["manifest"]["autopilot_rule"] is None
    res = tx.preview("paths", ("docs/leak.txt",), redact=True)
    assert res["status"] == "previewed"
    assert res["manifest"]["redactions"]
    assert res["manifest"]["autopilot_rule"] is not None


def test_autopilot_rule_outside_the_default_branch_is_ignored(make_tx: Callable[..., Tx]) -> None:
    tx = make_tx(SOURCES, push=True)
    tx.git("checkout", "-q", "-b", "agent")
    tx.write("oms.toml", PERMISSIVE_POLICY)
    tx.commit("let me through")
    res = tx.preview("paths", ("docs",))
    assert res["manifest"]["autopilot_rule"] is None
    tx.write("oms.toml", PERMISSIVE_POLICY.replace("agent-wrote-this", "worktree-rule"))
    res = tx.preview("paths", ("docs",))
    assert res["manifest"]["autopilot_rule"] is None
    digest, code = approval_command(res)
    with pytest.raises(Blocked, match="terminal"):
        tx_approve.approve(tx.repo, digest, code)
    assert tx.entries("transfer.approve") == []


# --------------------------------------------------------------------------------------
# Secrets: blocked, redacted, and never written anywhere
# --------------------------------------------------------------------------------------


def test_planted_key_blocks_preview_and_approval_and_is_never_printed(
    make_tx: Callable[..., Tx],
) -> None:
    token = fake_github_token()
    tx = make_tx({**SOURCES, "config.py": f'NAME = "svc"\ntoken = "{token}"\n'})
    res = tx.preview_cli("--context", "repo", expect=3)
    assert res["status"] == "blocked"
    m = res["manifest"]
    assert m["blocked"] and m["block_reasons"]
    assert res["approval_packet"]["copyable_text_block"] == ""
    assert any(f["file"] == "config.py" and f["line"] == 2 for f in m["findings"])
    # The human preview names the file that holds it (not the value).
    shown = tx.preview_cli("--context", "repo", expect=3, text_mode=True)
    assert "BLOCKED: " in shown and "secret in config.py line 2: " in shown
    refused = tx.cli("transfer", "approve", res["digest"], "--code", m["nonce"][:8], expect=3)
    assert refused["error"]["kind"] == "blocked"
    assert "blocked" in refused["error"]["message"]
    assert tx.entries("transfer.approve") == []
    tx.cli("transfer", "show", res["digest"], expect=0)
    tx.cli("transfer", "list", expect=0, text_mode=True)
    # The value: in no output, evidence line or manifest (blobs: see the xfail below).
    tx.assert_nowhere(token, blobs=False)
    tx.assert_nowhere(token[4:], blobs=False)


def test_blocked_preview_writes_no_secret_under_oms_home(make_tx: Callable[..., Tx]) -> None:
    token = fake_github_token()
    tx = make_tx({"config.py": f'token = "{token}"\n'})
    assert tx.preview("paths", ("config.py",))["status"] == "blocked"
    tx.assert_nowhere(token)


def test_secret_in_the_purpose_is_not_echoed_or_stored(make_tx: Callable[..., Tx]) -> None:
    token = fake_github_token()
    tx = make_tx(SOURCES)
    res = tx.preview_cli("--context", "none", expect=3, purpose=f"use {token} to log in")
    assert "purpose" in " ".join(res["manifest"]["block_reasons"])
    tx.assert_nowhere(token)


def test_redact_sends_markers_not_secrets_including_a_multiline_private_key(
    make_tx: Callable[..., Tx],
) -> None:
    token = fake_github_token()
    key, body = fake_private_key()
    tx = make_tx(
        {
            **SOURCES,
            "config.py": f'NAME = "svc"\ntoken = "{token}"\n',
            "docs/deploy.md": "# Deploy\n\nUse this key:\n\n" + key,
        }
    )
    res = tx.preview_cli(
        "--context", "paths", "--path", "config.py", "--path", "docs", "--redact", expect=0
    )
    assert res["status"] == "previewed"
    m = res["manifest"]
    redacted = {(r["path"], r["line"]) for r in m["redactions"]}
    assert ("config.py", 2) in redacted
    assert ("docs/deploy.md", 5) in redacted  # the BEGIN line
    assert all(set(r) == {"rule", "path", "line"} and r["rule"] for r in m["redactions"])
    modes = {i["path"]: i["mode"] for i in m["items"]}
    assert modes == {
        "config.py": "redacted",
        "docs/deploy.md": "redacted",
        "docs/faq.md": "full",
        "docs/guide.md": "full",
    }
    for item in m["items"]:
        if item["mode"] == "redacted":
            blob = tx.item_bytes(m, item).decode()
            assert REDACTION_PREFIX in blob
            assert token not in blob
            assert not [line for line in body if line in blob]

    digest, code = approval_command(res)
    tx.approve_as_human(digest, code)
    out = tx.tmp / "payload"
    tx.release_cli(digest, out, expect=0)
    payload = out.read_bytes()
    _, items = parse_payload(payload)
    sent = {h["path"]: data.decode() for h, data in items}
    assert sent["config.py"].startswith('NAME = "svc"\n' + REDACTION_PREFIX)
    assert sent["docs/deploy.md"].startswith("# Deploy\n\nUse this key:\n\n" + REDACTION_PREFIX)
    assert "PRIVATE KEY" not in sent["docs/deploy.md"]
    tx.cli("transfer", "show", digest, expect=0)
    tx.cli("transfer", "list", expect=0, text_mode=True)
    for needle in [token, token[4:], *body]:
        tx.assert_nowhere(needle, payload)


def test_redaction_replaces_only_the_lines_holding_the_secret(make_tx: Callable[..., Tx]) -> None:
    # Regression: Gitleaks end lines once kept the stream header's offset, and the two
    # lines after every secret were redacted too.
    token = fake_github_token()
    tx = make_tx({"config.py": f'before = 1\ntoken = "{token}"\nafter = 2\nlast = 3\n'})
    res = tx.preview("paths", ("config.py",), redact=True)
    (item,) = res["manifest"]["items"]
    lines = tx.item_bytes(res["manifest"], item).decode().split("\n")
    assert lines[0] == "before = 1"
    assert lines[1].startswith(REDACTION_PREFIX)
    assert lines[2:] == ["after = 2", "last = 3", ""]


# --------------------------------------------------------------------------------------
# The stored manifest is signed: tampering is detected
# --------------------------------------------------------------------------------------


def test_tampered_stored_manifest_is_refused(make_tx: Callable[..., Tx]) -> None:
    tx = make_tx(SOURCES)
    a = tx.preview_approved("paths", ("docs",))
    b, b_code = approval_command(tx.preview("paths", ("src",)))
    a_path, b_path = tx.envelope_path(a), tx.envelope_path(b)
    a_env = json.loads(a_path.read_text())
    a_code = json.loads(base64.b64decode(a_env["payload"]))["nonce"][:8]

    # One byte of A's payload changed, re-encoded; the signature is left as it was.
    raw = bytearray(base64.b64decode(a_env["payload"]))
    at = raw.index(PURPOSE.encode())
    raw[at] ^= 0x20
    a_path.write_text(json.dumps({**a_env, "payload": base64.b64encode(bytes(raw)).decode()}))
    for args in (
        ("release", a, "--out", str(tx.tmp / "a.payload")),
        ("approve", a, "--code", a_code),
    ):
        refused = tx.cli("transfer", *args, expect=3)
        assert refused["error"]["kind"] == "tampered", args
    assert not (tx.tmp / "a.payload").exists()

    # B carrying A's (valid, but not B's) signature.
    b_env = json.loads(b_path.read_text())
    b_path.write_text(json.dumps({**b_env, "signatures": a_env["signatures"]}))
    for b_args in (("approve", b, "--code", b_code), ("show", b)):
        refused = tx.cli("transfer", *b_args, expect=3)
        assert refused["error"]["kind"] == "tampered", b_args

    assert tx.entries("transfer.release") == []
    assert len(tx.entries("transfer.approve")) == 1  # A's, from before the tampering
    rows = {r["digest"]: r["status"] for r in tx.cli("transfer", "list", expect=0)["transfers"]}
    assert rows[a].startswith("unverifiable") and rows[b].startswith("unverifiable")


# --------------------------------------------------------------------------------------
# Context kinds
# --------------------------------------------------------------------------------------


def test_context_none_sends_only_the_purpose(make_tx: Callable[..., Tx]) -> None:
    tx = make_tx(SOURCES)
    digest = tx.preview_approved("none")
    m = tx_state.show(tx.repo, digest).to_json()["manifest"]
    assert m["items"] == [] and m["totals"]["bytes"] == 0
    out = tx.tmp / "payload"
    tx.release_cli(digest, out, expect=0)
    manifest, items = parse_payload(out.read_bytes())
    assert items == [] and manifest["purpose"] == PURPOSE


def test_context_diff_sends_per_file_diffs_against_base(make_tx: Callable[..., Tx]) -> None:
    tx = make_tx(SOURCES)
    tx.git("checkout", "-q", "-b", "feature")
    tx.write("src/app.py", SOURCES["src/app.py"] + "\n\ndef count(text):\n    return 1\n")
    tx.commit("feature")
    res = tx.preview_cli("--context", "diff", "--base", "main", expect=0)
    m = res["manifest"]
    assert m["base"] == tx.git("rev-parse", "main").strip()
    assert [(i["path"], i["mode"]) for i in m["items"]] == [("src/app.py", "diff")]
    blob = tx.item_bytes(m, m["items"][0])
    assert blob.startswith(b"diff --git a/src/app.py b/src/app.py")
    assert b"+def count(text):" in blob


def test_context_paths_sends_only_those_files(make_tx: Callable[..., Tx]) -> None:
    tx = make_tx(SOURCES)
    res = tx.preview("paths", ("docs",))
    assert sorted(i["path"] for i in res["manifest"]["items"]) == ["docs/faq.md", "docs/guide.md"]
    assert all(i["mode"] == "full" for i in res["manifest"]["items"])


# --------------------------------------------------------------------------------------
# show / list
# --------------------------------------------------------------------------------------


def test_show_and_list_report_each_state(
    make_tx: Callable[..., Tx], monkeypatch: pytest.MonkeyPatch
) -> None:
    tx = make_tx({**SOURCES, "leak.txt": f"token = {fake_github_token()}\n"}, policy=TTL_POLICY)
    previewed, _ = approval_command(tx.preview("paths", ("docs/faq.md",)))
    approved = tx.preview_approved("paths", ("docs/guide.md",))
    released = tx.preview_approved("paths", ("src",))
    tx_release.release(tx.repo, released, None)
    blocked = tx.preview("paths", ("leak.txt",))["digest"]
    want = {previewed: "previewed", approved: "approved", released: "released", blocked: "blocked"}

    rows = tx.cli("transfer", "list", expect=0)["transfers"]
    assert {r["digest"]: r["status"] for r in rows} == want
    for digest, status in want.items():
        assert tx.cli("transfer", "show", digest, expect=0)["status"] == status

    # The approval (30 s) lapses first, then the manifest itself.
    for delay, later in (
        (31, {approved: "expired"}),
        (3601, {approved: "expired", previewed: "expired"}),
    ):
        now = datetime.now(UTC) + timedelta(seconds=delay)
        with monkeypatch.context() as mp:
            mp.setattr(clock, "now", lambda now=now: now)
            rows = tx_state.list_transfers(tx.repo).to_json()["transfers"]
            got = {r["digest"]: r["status"] for r in rows}
            assert got == {**want, **later}, delay
            for digest, status in {**want, **later}.items():
                assert tx_state.show(tx.repo, digest).to_json()["status"] == status


# --------------------------------------------------------------------------------------
# The bytes that leave are what is judged (oms' own worktree reads)
# --------------------------------------------------------------------------------------


def test_a_symlinked_parent_directory_serves_nothing_in_a_transfer(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx({**SOURCES, "d/f.txt": "inside\n"})
    marker = "HOSTMARK-" + secrets.token_hex(12)
    host = tx.tmp / "host-dir"
    host.mkdir()
    (host / "f.txt").write_text(f"{marker}\n")
    (tx.repo / "d" / "f.txt").unlink()
    (tx.repo / "d").rmdir()
    (tx.repo / "d").symlink_to(host, target_is_directory=True)  # git still indexes d/f.txt
    for context, paths in (("repo", ()), ("paths", ("d/f.txt",)), ("diff", ())):
        res = tx.preview(context, paths, base="HEAD" if context == "diff" else None)
        excluded = {e["path"]: e["reason"] for e in res["manifest"]["excluded"]}
        assert "d/f.txt" not in {i["path"] for i in res["manifest"]["items"]}, context
        if context != "paths":
            assert excluded.get("d/f.txt") == "a parent directory is a symlink", excluded
    tx.assert_nowhere(marker)


def test_context_diff_of_a_file_named_star_carries_only_that_file(
    make_tx: Callable[..., Tx],
) -> None:
    marker = "ENVMARK-" + secrets.token_hex(12)
    tx = make_tx({"*": "star\n", ".env": "A=1\n", **SOURCES})
    tx.write("*", "star, edited\n")
    tx.write(".env", f"A={marker}\n")
    res = tx.preview("diff", base="HEAD")
    items = res["manifest"]["items"]
    assert [i["path"] for i in items] == ["*"]
    assert marker.encode() not in tx.item_bytes(res["manifest"], items[0])
    assert b"+star, edited" in tx.item_bytes(res["manifest"], items[0])
    tx.assert_nowhere(marker)


def test_preview_and_release_run_no_clean_filter_of_the_repository(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx(SOURCES)
    spy = tx.tmp / "filter-ran"
    tx.git("config", "filter.spy.clean", f"touch {spy}; cat")
    tx.write(".gitattributes", "* filter=spy\n")
    os.utime(tx.repo / "src/app.py", (1, 1))  # stat-dirty, same bytes: git status would filter
    digest = tx.preview_approved("repo")
    tx.release_cli(digest, tx.tmp / "payload", expect=0)
    assert not spy.exists(), "a clean filter of the repository ran"


@pytest.mark.parametrize(
    ("change", "state"),
    [
        ("none", "clean-pushed"),
        ("assume-unchanged, edited", "dirty"),
        ("skip-worktree, edited", "dirty"),
        ("skip-worktree, same bytes", "dirty"),
        ("committed, not pushed", "unpushed"),
        ("untracked item", "dirty"),
    ],
)
def test_visibility_is_decided_from_the_items_bytes_and_the_index_flags(
    make_tx: Callable[..., Tx], change: str, state: str
) -> None:
    tx = make_tx(SOURCES, push=True)
    item = "docs/guide.md"
    if change.startswith(("assume-unchanged", "skip-worktree")):
        flag = "--assume-unchanged" if change.startswith("assume") else "--skip-worktree"
        tx.git("update-index", flag, item)
        if change.endswith("edited"):
            tx.write(item, "# Guide\n\nedited where git status does not look\n")
    elif change == "committed, not pushed":
        tx.write(item, "# Guide\n\nnewer\n")
        tx.commit("local only")
    elif change == "untracked item":
        item = "docs/new.md"
        tx.write(item, "# New\n")
    res = tx.preview("paths", (item,))
    assert res["manifest"]["visibility"]["state"] == state
    assert visibility(open_repo(tx.repo), []).state == (
        "dirty" if change.startswith(("assume", "skip")) else
        "unpushed" if change == "committed, not pushed" else "clean-pushed"
    )  # fmt: skip


@pytest.mark.parametrize("ignored", [True, False], ids=["now-ignored", "now-untracked"])
def test_context_diff_never_reads_a_base_file_that_left_the_index(
    make_tx: Callable[..., Tx], ignored: bool
) -> None:
    marker = "LOGMARK-" + secrets.token_hex(12)
    tx = make_tx({**SOURCES, "notes.log": "old notes\n"})
    base = tx.git("rev-parse", "HEAD").strip()
    tx.git("rm", "-q", "--cached", "notes.log")
    tx.write(".gitignore", "notes.log\n" if ignored else "other.log\n")
    tx.git("add", ".gitignore")
    tx.git("commit", "-q", "-m", "stop tracking notes")
    tx.write("notes.log", f"{marker}\n")  # still in the worktree, still in the base
    m = tx.preview("diff", base=base)["manifest"]
    items = {i["path"]: tx.item_bytes(m, i) for i in m["items"]}
    if ignored:
        assert set(items) == {".gitignore"}
        assert ("notes.log", "gitignored") in {(e["path"], e["reason"]) for e in m["excluded"]}
    else:  # shown deleted, as `git diff BASE` shows it: the worktree copy is not read
        assert set(items) == {".gitignore", "notes.log"}
        assert items["notes.log"].endswith(b"-old notes\n")
    tx.assert_nowhere(marker)


# One digest, one spelling: parsed at the boundary, stored normalised, matched exactly
# --------------------------------------------------------------------------------------


def _spell(digest: str, how: str) -> str:
    hex_ = digest.removeprefix("sha256:")
    return {
        "canonical": digest,
        "bare": hex_,
        "upper": "SHA256:" + hex_.upper(),
        "bare-upper": hex_.upper(),
    }[how]


@pytest.mark.parametrize(
    ("first", "second"),
    [("bare", "canonical"), ("canonical", "bare"), ("upper", "canonical"), ("bare", "upper")],
)
def test_one_approval_gives_one_release_whatever_spelling_names_it(
    make_tx: Callable[..., Tx], first: str, second: str
) -> None:
    tx = make_tx(SOURCES)
    digest = tx.preview_approved("paths", ("docs",))
    out = tx.release_cli(_spell(digest, first), tx.tmp / "one.payload", expect=0)
    assert out["digest"] == digest
    refused = tx.release_cli(_spell(digest, second), tx.tmp / "two.payload", expect=3)
    assert "already released" in refused["error"]["message"]
    assert not (tx.tmp / "two.payload").exists()
    (entry,) = tx.entries("transfer.release")
    assert entry["data"]["digest"] == digest


def test_uppercase_digest_is_accepted_and_stored_normalised(make_tx: Callable[..., Tx]) -> None:
    tx = make_tx(SOURCES)
    res = tx.preview("paths", ("docs",))
    digest, code = approval_command(res)
    assert res["digest"] == digest and re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    upper = _spell(digest, "upper")
    approved = tx.approve_as_human(upper, code)
    assert approved["digest"] == digest
    shown = tx.cli("transfer", "show", _spell(digest, "bare-upper"), expect=0)
    assert shown["digest"] == digest and shown["status"] == "approved"
    tx.release_cli(upper, tx.tmp / "payload", expect=0)
    for kind in ("transfer.preview", "transfer.approve", "transfer.release"):
        (entry,) = tx.entries(kind)
        assert entry["data"]["digest"] == digest, kind
        assert entry["subject"][0]["digest"] == {"sha256": digest.removeprefix("sha256:")}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "sha256:",
        "sha256:" + "a" * 63,
        "sha256:" + "a" * 65,
        "sha512:" + "a" * 64,
        " sha256:" + "a" * 64,
        "sha256:" + "a" * 63 + "g",
        "sha256:" + "a" * 63 + "\uff41",  # fullwidth a
        "sha256: " + "a" * 64,
        "--repo",
    ],
)
def test_anything_but_a_sha256_digest_is_a_usage_error(
    make_tx: Callable[..., Tx], text: str
) -> None:
    with pytest.raises(UsageError):
        Sha256Digest.parse(text)
    if text:
        tx = make_tx()
        refused = tx.cli("transfer", "show", "--", text, expect=2)
        assert refused["error"]["kind"] == "usage"


def test_sha256_digest_parses_every_spelling_to_one_value() -> None:
    hex_ = hashlib.sha256(b"x").hexdigest()
    spellings = [f"sha256:{hex_}", hex_, hex_.upper(), f"SHA256:{hex_}", f"Sha256:{hex_.upper()}"]
    parsed = {Sha256Digest.parse(s) for s in spellings}
    assert parsed == {Sha256Digest(hex_)} == {Sha256Digest.of(b"x")}
    (one,) = parsed
    assert str(one) == f"sha256:{hex_}" and one.hex == hex_
    assert Sha256Digest.parse(one) is one


def _forge(tx: Tx, kind: str, data: dict[str, Any]) -> None:
    """Append an entry through the real store: the chain is intact, only the content lies."""
    store = EvidenceStore.open(tx.home, repo_id_for(tx.repo / ".git"))
    store.append(Draft(kind=kind, data=data))


@pytest.mark.parametrize(
    "forgery",
    ["digest in the approver name", "digest in another field", "uppercase digest", "a note"],
)
def test_an_entry_naming_the_digest_elsewhere_is_not_an_approval(
    make_tx: Callable[..., Tx], forgery: str
) -> None:
    # A transfer.approve entry that does not fit its model (a missing or unknown key, a
    # digest in another spelling) is tampering, refused; a note is never an approval.
    tx = make_tx(SOURCES)
    target, _ = approval_command(tx.preview("paths", ("docs",)))
    other, _ = approval_command(tx.preview("paths", ("src",)))
    expires = clock.stamp(datetime.now(UTC) + timedelta(minutes=10))
    approval = {
        "digest": other,
        "approval_id": secrets.token_hex(16),
        "time": expires,
        "expires": expires,
        "approver": {"kind": "human", "name": "x", "uid": 0},
    }
    if forgery == "digest in the approver name":  # what `LOGNAME=sha256:…` once gave
        _forge(tx, "transfer.approve", {**approval, "approver": {"name": target}})
    elif forgery == "digest in another field":
        _forge(tx, "transfer.approve", {**approval, "note": target})
    elif forgery == "uppercase digest":
        _forge(tx, "transfer.approve", {**approval, "digest": _spell(target, "upper")})
    else:
        message = f'"kind":"transfer.approve" "digest":"{target}"'
        _forge(tx, "note", {**approval, "digest": None, "message": message})
    if forgery == "a note":
        assert tx.cli("transfer", "show", target, expect=0)["status"] == "previewed"
        refused = tx.release_cli(target, tx.tmp / "payload", expect=3)
        assert "no unused, unexpired approval" in refused["error"]["message"]
    else:
        shown = tx.cli("transfer", "show", target, expect=3)
        assert shown["error"]["kind"] == "tampered"
        assert "does not fit its model" in shown["error"]["message"]
        refused = tx.release_cli(target, tx.tmp / "payload", expect=3)
        assert refused["error"]["kind"] == "tampered"
        assert tx.cli("transfer", "list", expect=3)["error"]["kind"] == "tampered"
    assert not (tx.tmp / "payload").exists()


def test_an_approval_landing_while_the_human_reads_is_not_doubled(
    make_tx: Callable[..., Tx], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two approvals racing: the second to reach the lock finds the first and refuses.
    tx = make_tx(SOURCES)
    digest, code = approval_command(tx.preview("paths", ("docs",)))

    def slow_human(lines: list[str]) -> HumanApprover:
        tx.approve_as_human(digest, code)  # the other approval, while this prompt is open
        return HumanApprover(name="tester", uid=os.getuid())

    monkeypatch.setattr(tx_approve, "confirm_at_terminal", slow_human)
    with pytest.raises(Blocked, match="already has an unused approval"):
        tx_approve.approve(tx.repo, digest, code)
    assert len(tx.entries("transfer.approve", digest)) == 1


# --------------------------------------------------------------------------------------
# The approver is the uid; the prompt shows everything that leaves, or refuses
# --------------------------------------------------------------------------------------


def test_approver_is_named_from_the_uid_not_from_logname_or_user(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx(SOURCES)
    digest, code = approval_command(tx.preview("paths", ("docs",), to=OTHER_DEST))
    env = {"LOGNAME": "mallory", "USER": "mallory", "LNAME": "mallory", "USERNAME": "mallory"}
    rc, out, err, _ = approve_at_pty(tx, digest, code, b"yes\n", env_extra=env)
    assert rc == 0, (out, err)
    want = {"kind": "human", "name": pwd.getpwuid(os.getuid()).pw_name, "uid": os.getuid()}
    assert json.loads(out)["approver"] == want
    (entry,) = tx.entries("transfer.approve", digest)
    assert entry["data"]["approver"] == want
    assert "mallory" not in json.dumps(tx.log())


def test_a_5000_character_purpose_is_shown_in_full_at_the_terminal(
    make_tx: Callable[..., Tx],
) -> None:
    tx = make_tx(SOURCES)
    words = [f"step{i} of the review" for i in range(400)]
    purpose = " ".join(words)[:4999] + "Z"
    assert len(purpose) == 5000
    res = tx.preview("paths", ("docs",), to=OTHER_DEST, purpose=purpose)
    assert res["manifest"]["purpose"] == purpose
    assert f"purpose: {purpose}" in res["approval_packet"]["summary"]  # not cut either
    digest, code = approval_command(res)
    rc, out, err, screen = approve_at_pty(tx, digest, code, b"yes\n")
    assert rc == 0, (out, err)
    lines = screen.replace("\r\n", "\n").split("\n")
    at = lines.index("purpose (5000 characters, in full):")
    chunks = []
    for line in lines[at + 1 :]:
        if not line.startswith("  "):
            break
        assert len(line) <= 2 + 76, "the purpose is wrapped for the terminal"
        chunks.append(line[2:])
    assert len(chunks) > 1
    assert "".join(chunks) == purpose


def test_a_purpose_over_the_limit_is_a_usage_error_not_cut(make_tx: Callable[..., Tx]) -> None:
    tx = make_tx()
    refused = tx.preview_cli("--context", "none", expect=2, purpose="p" * 20_001)
    assert "--purpose is longer than 20000" in refused["error"]["message"]
    assert tx.entries("transfer.preview") == []


def test_the_prompt_lists_every_file_that_leaves_and_every_name_in_the_manifest(
    make_tx: Callable[..., Tx], terminal_calls: list[list[str]]
) -> None:
    tx = make_tx({**SOURCES, ".env": "A=1\n"})
    for i in range(300):
        tx.write(f"many/f{i:03}.txt", f"{i}\n")
    tx.write(f"odd{RLO}name{ESC}[2J.md", "odd\n")
    res = tx.preview("repo")
    digest, code = approval_command(res)
    with pytest.raises(Blocked):
        tx_approve.approve(tx.repo, digest, code)
    (lines,) = terminal_calls
    for item in res["manifest"]["items"]:
        path = item["path"].replace(RLO, "\\u202e").replace(ESC, "\\u001b")
        assert f"  {path} ({item['bytes']} bytes, {item['mode']})" in lines, path
    assert "  .env: secret-looking name" in lines
    assert f"files that leave ({len(res['manifest']['items'])}):" in lines
    for line in lines:
        assert forbidden_chars(line) == [], line


def test_a_prompt_too_long_for_a_terminal_is_refused_before_the_terminal_opens(
    make_tx: Callable[..., Tx], monkeypatch: pytest.MonkeyPatch
) -> None:
    tx = make_tx(SOURCES)
    digest, code = approval_command(tx.preview("repo"))
    opened: list[str] = []
    real_open = os.open

    def watch_open(path: Any, *args: Any, **kw: Any) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kw)

    monkeypatch.setattr(tx_approve, "confirm_at_terminal", tty.confirm_at_terminal)
    monkeypatch.setattr(tty, "MAX_PROMPT_LINES", 8)
    monkeypatch.setattr(tty.os, "open", watch_open)
    with pytest.raises(Blocked, match="narrow the transfer"):
        tx_approve.approve(tx.repo, digest, code)
    assert "/dev/tty" not in opened
    assert tx.entries("transfer.approve") == []


def test_wrap_exact_drops_no_character() -> None:
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(rng.choice("ab  -\\u") for _ in range(rng.randint(0, 500)))
        lines = tty.wrap_exact(text, 20)
        assert "".join(lines) == text
        assert all(len(line) <= 20 for line in lines)


# --------------------------------------------------------------------------------------
# The copied command works from any directory; the digest finds its repository
# --------------------------------------------------------------------------------------


def _another_repo(run_git: Callable[..., str], path: Path) -> None:
    run_git(path, "init", "-q")
    ident = ("-c", "user.name=Other", "-c", "user.email=other@example.invalid")
    run_git(path, *ident, "commit", "-q", "--allow-empty", "-m", "other")


@pytest.mark.parametrize("where", ["no repository", "another repository", "a subdirectory"])
def test_copied_approval_command_works_as_copied_from_any_directory(
    make_tx: Callable[..., Tx], run_git: Callable[..., str], where: str
) -> None:
    tx = make_tx(SOURCES)
    res = tx.preview("paths", ("docs",), to=OTHER_DEST)
    digest, _ = approval_command(res)
    elsewhere = tx.tmp / "elsewhere"
    elsewhere.mkdir()
    if where == "another repository":
        _another_repo(run_git, elsewhere)
        records.init(elsewhere)
    elif where == "a subdirectory":
        elsewhere = tx.repo / "docs"
    copied = shlex.split(res["approval_packet"]["copyable_text_block"])
    assert copied[:3] == ["oms", "transfer", "approve"] and "--repo" not in copied
    rc, out, err, _ = approve_at_pty(tx, "", "", b"yes\n", command=copied[1:], cwd=elsewhere)
    assert rc == 0, (out, err)
    assert len(tx.entries("transfer.approve", digest)) == 1
    shown = tx.cli("transfer", "show", digest, expect=0, repo=False, cwd=elsewhere)
    assert shown["status"] == "approved"
    out_file = tx.tmp / "payload"
    released = tx.cli(
        "transfer", "release", digest, "--out", str(out_file), expect=0, repo=False, cwd=elsewhere
    )
    assert released["status"] == "released"
    _, items = parse_payload(out_file.read_bytes())
    assert {h["path"] for h, _ in items} == {"docs/faq.md", "docs/guide.md"}


def test_digest_claimed_by_no_repository_or_by_two_is_refused(
    make_tx: Callable[..., Tx], run_git: Callable[..., str]
) -> None:
    tx = make_tx(SOURCES)
    digest, code = approval_command(tx.preview("paths", ("docs",)))
    elsewhere = tx.tmp / "elsewhere"
    elsewhere.mkdir()
    unknown = "sha256:" + "0" * 64
    for args in (("show", unknown), ("release", unknown, "--out", str(tx.tmp / "p"))):
        refused = tx.cli("transfer", *args, expect=2, repo=False, cwd=elsewhere)
        assert "no manifest" in refused["error"]["message"]
    # A copy of the envelope under a second repository: which one is meant is not guessed.
    _another_repo(run_git, elsewhere)
    other_id = records.init(elsewhere).repo_id
    planted = tx.home / "repos" / other_id / "transfers"
    planted.mkdir(mode=0o700, exist_ok=True)
    source = tx.envelope_path(digest)
    (planted / source.name).write_bytes(source.read_bytes())
    for args in (("show", digest), ("approve", digest, "--code", code)):
        refused = tx.cli("transfer", *args, expect=3, repo=False, cwd=tx.tmp)
        assert refused["error"]["kind"] == "tampered", args
        assert "2 repositories" in refused["error"]["message"]
    # Named with --repo, the copy under the other repository does not verify as its own.
    wrong = tx.run_oms(["transfer", "show", digest, "--repo", str(elsewhere), "--json"])
    assert wrong.returncode == 3 and "does not name" in json.loads(wrong.stdout)["error"]["message"]
    assert tx.cli("transfer", "show", digest, expect=0)["status"] == "previewed"


# --------------------------------------------------------------------------------------
# --json is ASCII: a file name cannot put a control or bidi character on a terminal
# --------------------------------------------------------------------------------------


def _printable_ascii_line(out: str) -> bool:
    return out.endswith("\n") and all(32 <= ord(c) < 127 for c in out[:-1])


def test_json_output_is_ascii_even_with_bidi_and_controls_in_file_names(
    make_tx: Callable[..., Tx],
) -> None:
    names = [f"a{RLO}gpj.exe.md", f"b{ESC}]0;owned{BEL}.md", f"c{DEL}{ZWSP}\u0085\u00e9.md"]
    tx = make_tx({**SOURCES, **{n: "text\n" for n in names}})
    res = tx.preview_cli("--context", "repo", expect=0, purpose=f"see {RLO}{ESC}[2J")
    digest = res["digest"]
    assert {i["path"] for i in res["manifest"]["items"]} >= set(names)  # round-trips exactly
    for args in (("transfer", "show", digest), ("transfer", "list")):
        tx.cli(*args, expect=0)
    for proc_out in tx.transcript[::2]:  # stdout of every CLI call above
        assert _printable_ascii_line(proc_out), proc_out


def test_ascii_json_escapes_del_and_everything_non_ascii() -> None:
    obj = {"k": f"x{DEL}{RLO}\u0085{ESC}\udcff"}
    text = output.ascii_json(obj)
    assert all(32 <= ord(c) < 127 for c in text), text
    assert json.loads(text) == obj


@pytest.mark.parametrize("step", ["approve", "release"])
def test_visibility_is_recomputed_at_approve_and_at_release(autopilot_tx: Tx, step: str) -> None:
    tx = autopilot_tx
    res = tx.preview("paths", ("docs/exact.txt",))
    assert res["manifest"]["visibility"]["state"] == "clean-pushed"
    digest, code = approval_command(res)
    if step == "release":
        tx.cli("transfer", "approve", digest, "--code", code, expect=0)
    # HEAD and the item's bytes stay; the remote no longer holds HEAD.
    tx.git("push", "-q", "--force", "origin", "HEAD~1:refs/heads/main")
    if step == "approve":
        refused = tx.cli("transfer", "approve", digest, "--code", code, expect=3)
        assert tx.entries("transfer.approve") == []
    else:
        refused = tx.release_cli(digest, tx.tmp / "payload", expect=3)
        assert tx.entries("transfer.release") == []
    assert "clean-pushed to unpushed" in refused["error"]["message"], refused
