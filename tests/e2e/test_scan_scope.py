"""What the scanners see of a candidate: everything a push of it would send beyond its base.

Real git repositories in `tmp_path` (commits written with plumbing, so raw bytes,
merges and unrelated histories are exact), the real Gitleaks and detect-secrets.
Fake secrets are built at run time (bench/corpus.py): this file holds nothing a
scanner or push protection would flag.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path
from typing import Any

import corpus
import pytest

import gatekeeper.repo.change as change_module
from gatekeeper.errors import EXIT_BLOCKED, classify
from gatekeeper.gates.result.protected import protected_changes
from gatekeeper.repo.change import PATHS_LABEL, ChangeTooLarge, read_change, scan_set
from gatekeeper.repo.paths import secret_looking
from gatekeeper.scan import Finding, ScanItem, fingerprint
from gatekeeper.scan.combined import scan_both
from gatekeeper.scan.decode import guess_encoding, text_views
from gatekeeper.scan.gitleaks import Gitleaks
from gatekeeper.scan.pieces import (
    OVERLAP_BYTES,
    PIECE_BYTES,
    SEGMENT_BYTES,
    cut_pieces,
    virtual_lines,
)
from policy import DEFAULT_GITLEAKS_SHA256

PIN = DEFAULT_GITLEAKS_SHA256
TIMEOUT_S = 120
_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def aws_key(rng: random.Random) -> str:
    """A fake AWS key id both scanners match, clear of Gitleaks' entropy floor."""
    while True:
        key = corpus.aws_access_key_id(rng)
        if len(set(key[4:])) >= 12:
            return key


class Git:
    """A real repository; commits are written with plumbing from exact bytes."""

    def __init__(self, top: Path, env: dict[str, str]) -> None:
        self.top = top
        self.env = env

    def __call__(self, *args: str, input: bytes | None = None) -> str:
        proc = subprocess.run(["git", "-C", str(self.top), *args], input=input,
                              capture_output=True, env=self.env, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        return proc.stdout.decode("utf-8", "surrogateescape").strip()

    def blob(self, data: bytes) -> str:
        return self("hash-object", "-w", "--stdin", input=data)

    def tree(self, files: dict[str, bytes | tuple[str, bytes]]) -> str:
        """A tree of `files` (path: bytes, or (mode, bytes) for a symlink)."""
        env_index = self.top / ".git" / "oms-test-index"
        env_index.unlink(missing_ok=True)
        records = b""
        for path, value in files.items():
            mode, data = value if isinstance(value, tuple) else ("100644", value)
            records += f"{mode} {self.blob(data)}\t{path}".encode() + b"\0"
        env = {**self.env, "GIT_INDEX_FILE": str(env_index)}
        subprocess.run(["git", "-C", str(self.top), "update-index", "-z", "--index-info"],
                       input=records, env=env, check=True)  # fmt: skip
        out = subprocess.run(["git", "-C", str(self.top), "write-tree"], env=env,
                             capture_output=True, check=True)  # fmt: skip
        return out.stdout.decode().strip()

    def commit(self, files: dict[str, bytes | tuple[str, bytes]], *parents: str,
               message: str = "change") -> str:  # fmt: skip
        args = [a for p in parents for a in ("-p", p)]
        return self("commit-tree", self.tree(files), *args, "-m", message)

    def raw_commit(self, raw: bytes) -> str:
        return self("hash-object", "-t", "commit", "-w", "--literally", "--stdin", input=raw)


@pytest.fixture
def repo(git_repo: Path, oms_env: dict[str, str]) -> Git:
    return Git(git_repo, oms_env)


def scan_range(repo: Git, base: str, candidate: str) -> list[Finding]:
    scope = scan_set(repo.top, read_change(repo.top, base, candidate))
    found, _ = scan_both(list(scope.items), PIN, TIMEOUT_S)
    return scope.new_findings(found)


def fingerprints(findings: list[Finding]) -> set[str]:
    return {f.fingerprint for f in findings}


# --- commits, merges, histories -----------------------------------------------------------


def test_secret_added_in_one_commit_and_deleted_in_the_next_is_found(repo: Git) -> None:
    key = aws_key(random.Random(1))
    base = repo.commit({"a.py": b"x = 1\n"})
    leak = repo.commit({"a.py": b"x = 1\n", "cfg.py": f'KEY = "{key}"\n'.encode()}, base)
    gone = repo.commit({"a.py": b"x = 2\n"}, leak)
    found = scan_range(repo, base, gone)
    assert {(f.scanner, f.file) for f in found if f.fingerprint == fingerprint(key)} == {
        ("gitleaks", "cfg.py"),
        ("detect-secrets", "cfg.py"),
    }


def test_merged_unrelated_history_is_scanned_whole(repo: Git) -> None:
    key = aws_key(random.Random(2))
    base = repo.commit({"a.py": b"x = 1\n"})
    stranger = repo.commit({"leak.txt": f"token {key}\n".encode()})  # a root commit
    # the merge keeps only our tree: the secret is in no tree the candidate ends with
    merge = repo.commit({"a.py": b"x = 1\n"}, base, stranger, message="merge")
    assert fingerprint(key) in fingerprints(scan_range(repo, base, merge))


def test_content_a_merge_adds_beyond_both_parents_is_found(repo: Git) -> None:
    key = aws_key(random.Random(3))
    base = repo.commit({"a.py": b"x = 1\n"})
    left = repo.commit({"a.py": b"x = 1\n", "l.py": b"left\n"}, base)
    right = repo.commit({"a.py": b"x = 1\n", "r.py": b"right\n"}, base)
    files = {"a.py": f'x = 1\nK = "{key}"\n'.encode(), "l.py": b"left\n", "r.py": b"right\n"}
    evil = repo.commit(files, left, right, message="merge")
    found = scan_range(repo, base, evil)
    assert {f.file for f in found if f.fingerprint == fingerprint(key)} == {"a.py"}


def test_a_merge_taking_one_side_reports_nothing_new(repo: Git) -> None:
    key = aws_key(random.Random(4))
    old = f'K = "{key}"\n'.encode()
    base = repo.commit({"a.py": old})
    left = repo.commit({"a.py": old + b"y = 2\n"}, base)
    right = repo.commit({"a.py": old, "r.py": b"right\n"}, base)
    merge = repo.commit({"a.py": old + b"y = 2\n", "r.py": b"right\n"}, left, right)
    assert scan_range(repo, base, merge) == []  # the base's own secret is not reported again


def test_author_committer_and_raw_message_bytes_are_scanned(repo: Git) -> None:
    rng = random.Random(5)
    in_name, in_mail, after_nul, in_utf16 = (aws_key(rng) for _ in range(4))
    base = repo.commit({"a.py": b"x = 1\n"})
    tree = repo("rev-parse", f"{base}^{{tree}}")
    message = b"subject\n\nbody\x00 hidden " + after_nul.encode() + b"\n"
    raw = (f"tree {tree}\nparent {base}\n"
           f"author Dev {in_name} <dev@example.invalid> 1700000000 +0000\n"
           f"committer Bot <{in_mail}@example.invalid> 1700000000 +0000\n"
           "encoding UTF-16LE\n\n").encode() + message  # fmt: skip
    first = repo.raw_commit(raw)
    utf16 = (f"tree {tree}\nparent {first}\n"
             "author Dev <dev@example.invalid> 1700000000 +0000\n"
             "committer Dev <dev@example.invalid> 1700000000 +0000\nencoding UTF-16LE\n\n"
             ).encode() + f"subject\n\nkey {in_utf16}\n".encode("utf-16-le")  # fmt: skip
    second = repo.raw_commit(utf16)
    found = scan_range(repo, base, second)
    where = {f.fingerprint: f.file for f in found}
    for key in (in_name, in_mail):
        assert where.get(fingerprint(key)) == f"commit:{first} (headers)", key
    assert where.get(fingerprint(after_nul)) == f"commit:{first}"
    assert where.get(fingerprint(in_utf16)) == f"commit:{second}"


def test_path_names_and_symlink_targets_are_scanned(repo: Git) -> None:
    rng = random.Random(6)
    in_name, in_target = aws_key(rng), aws_key(rng)
    base = repo.commit({"a.py": b"x = 1\n"})
    cand = repo.commit({"a.py": b"x = 1\n", f"notes/token={in_name}.txt": b"hi\n",
                        "link": ("120000", f"/srv/{in_target}".encode())}, base)  # fmt: skip
    where = {f.fingerprint: f.file for f in scan_range(repo, base, cand)}
    assert where.get(fingerprint(in_name)) == PATHS_LABEL
    assert where.get(fingerprint(in_target)) == "link"


# --- modified files: the whole new version, findings on added lines ----------------------


def test_key_body_written_between_begin_and_end_lines_the_base_had_is_found(repo: Git) -> None:
    pem = corpus.private_key(random.Random(7), "RSA").split("\n")
    base = repo.commit({"k.pem.txt": "\n".join([pem[0], pem[-1], ""]).encode()})
    cand = repo.commit({"k.pem.txt": ("\n".join(pem) + "\n").encode()}, base)
    found = scan_range(repo, base, cand)
    assert {f.scanner for f in found if f.file == "k.pem.txt"} == {"gitleaks", "detect-secrets"}


def test_secret_the_base_already_had_is_not_reported_again(repo: Git) -> None:
    key = aws_key(random.Random(8))
    base = repo.commit({"cfg.py": f'A = 1\nKEY = "{key}"\nB = 2\n'.encode()})
    cand = repo.commit({"cfg.py": f'A = 10\nKEY = "{key}"\nB = 2\nC = 3\n'.encode()}, base)
    assert scan_range(repo, base, cand) == []


@pytest.mark.parametrize(
    "how",
    ["nul-bytes", "binary-attribute", "big-file-threshold"],
)
def test_added_line_of_a_file_git_calls_binary_is_found(repo: Git, how: str) -> None:
    key = aws_key(random.Random(9))
    head = b"\x00\x01\x02 binary-looking\n" if how == "nul-bytes" else b"text\n"
    files: dict[str, bytes | tuple[str, bytes]] = {"data.bin": head + b"x" * 4000 + b"\n"}
    if how == "binary-attribute":
        files[".gitattributes"] = b"* binary -diff -text\n"
    if how == "big-file-threshold":
        repo("config", "core.bigFileThreshold", "1k")
    base = repo.commit(files)
    files["data.bin"] = head + b"x" * 4000 + b"\n" + f'KEY = "{key}"\n'.encode()
    cand = repo.commit(files, base)
    assert fingerprint(key) in fingerprints(scan_range(repo, base, cand))


# --- sizes before reading -------------------------------------------------------------------


def test_blob_over_the_cap_is_refused_before_any_object_is_read(
    repo: Git, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(change_module, "MAX_SCAN_BYTES", 64 << 10)
    base = repo.commit({"a.py": b"x = 1\n"})
    cand = repo.commit({"a.py": b"x = 1\n", "zeros.bin": b"\0" * (4 << 20)}, base)
    read: list[object] = []
    monkeypatch.setattr(change_module, "_read", lambda *a: read.append(a) or {})
    with pytest.raises(ChangeTooLarge) as caught:
        scan_set(repo.top, read_change(repo.top, base, cand))
    assert read == []  # refused from the sizes alone: the blob itself was never read
    assert classify(caught.value) == (EXIT_BLOCKED, "blocked")
    assert "more than oms scans" in str(caught.value)


def test_sizes_of_new_and_replaced_blobs_are_asked_in_one_git_run(
    repo: Git, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = repo.commit({"cfg.py": b"A = 1\n", "same.py": b"x\n"})
    cand = repo.commit({"cfg.py": b"A = 1\nB = 2\n", "same.py": b"x\n", "new.py": b"n\n"}, base)
    change = read_change(repo.top, base, cand)
    asked: list[tuple[str, ...]] = []
    real = change_module.git

    def counting(top: Path, *args: str, **kw: Any) -> bytes:
        asked.append(args)
        return real(top, *args, **kw)

    monkeypatch.setattr(change_module, "git", counting)
    scope = scan_set(repo.top, change)
    assert asked == [("cat-file", "--batch-check")]
    assert scope.added == {"cfg.py": frozenset({2})}  # the replaced blob was read all the same


# --- UTF-16 and UTF-32 ------------------------------------------------------------------------

ENCODINGS = [
    ("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff"),
    ("utf-32-le", b"\xff\xfe\x00\x00"), ("utf-32-be", b"\x00\x00\xfe\xff"),
    ("utf-16-le", b""), ("utf-16-be", b""), ("utf-32-le", b""), ("utf-32-be", b""),
]  # fmt: skip


def test_utf16_and_utf32_text_with_or_without_a_bom_is_decoded_and_scanned() -> None:
    rng = random.Random(10)
    keys = [aws_key(rng) for _ in ENCODINGS]
    items = []
    for (encoding, bom), key in zip(ENCODINGS, keys, strict=True):
        data = bom + f'# settings\nKEY = "{key}"\n'.encode(encoding)
        assert guess_encoding(data) == encoding
        for n, view in enumerate(text_views(data)):
            items.append(ScanItem.whole(f"{encoding}-{len(bom)}-{n}", view))
    found, _ = scan_both(items, PIN, TIMEOUT_S)
    for (encoding, bom), key in zip(ENCODINGS, keys, strict=True):
        hits = {f.scanner for f in found if f.fingerprint == fingerprint(key)}
        assert hits == {"gitleaks", "detect-secrets"}, (encoding, bom)


def test_plain_utf8_and_binary_bytes_keep_a_single_view() -> None:
    assert text_views(b"plain text\n") == ["plain text\n"]
    assert guess_encoding(bytes(range(256)) * 8) is None


# --- Gitleaks' pieces: every boundary oms cuts --------------------------------------------------


@pytest.mark.parametrize(
    "sizes",
    [[65] * 3000, [1] * 20000, [SEGMENT_BYTES + 1] * 40, [7, SEGMENT_BYTES + 1, 300] * 30],
    ids=["short-lines", "tiny-lines", "segment-lines", "mixed"],
)
def test_every_span_up_to_the_overlap_lies_inside_one_piece(sizes: list[int]) -> None:
    pieces = cut_pieces(sizes)
    starts = [0]
    for s in sizes:
        starts.append(starts[-1] + s)
    ranges = [(starts[a], starts[b]) for a, b in pieces]
    assert all(hi - lo <= PIECE_BYTES - 300 for lo, hi in ranges)
    assert ranges[0][0] == 0 and ranges[-1][1] == starts[-1]
    # every byte offset: a span of OVERLAP_BYTES starting there is wholly in some piece
    total = starts[-1]
    step = 1 if total < 50_000 else 13
    for offset in range(0, total, step):
        end = min(total, offset + OVERLAP_BYTES)
        assert any(lo <= offset and end <= hi for lo, hi in ranges), offset


def test_long_line_segments_overlap_so_no_short_span_is_cut() -> None:
    rng = random.Random(11)
    text = "".join(rng.choice(_B32) for _ in range(5 * SEGMENT_BYTES + 123))
    where, lines = virtual_lines([ScanItem("f", [(7, text)])])
    assert {w for w in where} == {("f", 7)}
    data = text.encode()
    segments = [(data.index(seg.rstrip(b"\n")), len(seg) - 1) for seg in lines]
    for offset in range(len(data) - OVERLAP_BYTES):
        assert any(s <= offset and offset + OVERLAP_BYTES <= s + n for s, n in segments)


def _boundaries_inside(spans: list[tuple[int, int]], cuts: list[int]) -> set[int]:
    """For each cut, how far into a span it falls (only cuts inside some span)."""
    into = set()
    for cut in cuts:
        for lo, hi in spans:
            if lo < cut < hi:
                into.add(cut - lo)
    return into


def test_private_keys_across_every_piece_boundary_with_many_short_lines_are_found() -> None:
    rng = random.Random(12)
    # pieces are ~90 KB: enough keys that cuts fall at every line of a key
    keys = [corpus.private_key(rng, "EC") for _ in range(6000)]
    lines: list[str] = []
    spans = []  # (first line, last line + 1) of each key, numbered from 1
    for key in keys:
        lines += ["# key"] * rng.randrange(4)  # so that cuts fall at every line of a key
        first = len(lines) + 1
        lines += key.split("\n")
        spans.append((first, len(lines) + 1))
    item = ScanItem("keys.txt", list(enumerate(lines, start=1)))
    _, vlines = virtual_lines([item])
    piece_ends = [end for _, end in cut_pieces([len(v) for v in vlines])[:-1]]
    key_lines = keys[0].count("\n") + 1
    assert _boundaries_inside(spans, [e + 1 for e in piece_ends]) == set(range(1, key_lines))
    found = Gitleaks(PIN, TIMEOUT_S).scan([item])
    assert fingerprints(found) == {fingerprint(k) for k in keys}


def test_tokens_across_every_segment_and_piece_boundary_of_a_long_line_are_found() -> None:
    rng = random.Random(13)
    keys, parts, length = [], [], 0
    while length < 160_000:
        key = aws_key(rng)
        keys.append(key)
        parts.append(key)
        parts.append(" " * 3)
        length += len(key) + 3
    line = "".join(parts)
    found = Gitleaks(PIN, TIMEOUT_S).scan([ScanItem("min.js", [(1, line)])])
    # segment cuts fall at every offset inside some key, for each position of a key
    cuts = list(range(SEGMENT_BYTES, len(line), SEGMENT_BYTES - OVERLAP_BYTES))
    spans, pos = [], 0
    for key in keys:
        spans.append((pos, pos + len(key)))
        pos += len(key) + 3
    assert _boundaries_inside(spans, cuts) == set(range(1, 20))
    assert fingerprints(found) == {fingerprint(k) for k in keys}
    assert {f.line for f in found} == {1}


# --- names: protected paths and secret-looking files -------------------------------------------

PROTECTED = [
    ".claude/settings.json", ".mcp.json", ".codex/config.toml", ".cursor/rules/x.mdc",
    ".agents/skills/x.md", "AGENTS.md", "sub/CLAUDE.md", ".husky/pre-commit", "lefthook.yml",
    ".pre-commit-config.yaml", ".envrc", ".devcontainer/devcontainer.json",
    ".vscode/tasks.json", ".woodpecker.yml", ".woodpecker.yaml", ".woodpecker/ci.yml",
    ".gitea/workflows/ci.yml", ".forgejo/workflows/ci.yml", ".GitHub/Workflows/ci.yml",
    "CLAUDE.MD", ".Gitlab-CI.yml", "JENKINSFILE",
]  # fmt: skip


@pytest.mark.parametrize("path", PROTECTED)
def test_agent_hook_and_ci_configuration_is_protected_in_any_case(path: str) -> None:
    change = change_module.FileChange("A", path, "000000", "100644", "0" * 40)
    assert [h.path for h in protected_changes([change], [])] == [path]


def test_ordinary_paths_are_not_protected() -> None:
    for path in ("src/app.py", "docs/agents.txt", "vscode/tasks.json", "README.md"):
        change = change_module.FileChange("M", path, "100644", "100644", "0" * 40)
        assert protected_changes([change], []) == (), path


SECRET_LOOKING = [
    ".pgpass", "home/.my.cnf", ".git-credentials", ".netrc", "web/.htpasswd", "vault.kdbx",
    "credentials.json", "credentials-prod.json", "gcp/service-account-key.json",
    "infra/prod.tfstate", "infra/prod.tfstate.backup", "vars/prod.tfvars", "kubeconfig",
    "ops/.kube/config", "x/.env", "id_ed25519", "Server.PEM",
]  # fmt: skip


@pytest.mark.parametrize("path", SECRET_LOOKING)
def test_secret_looking_names_are_recognised(path: str) -> None:
    assert secret_looking(path)


@pytest.mark.parametrize("path", ["src/app.py", "README.md", "environment.py", "docs/keys.md"])
def test_ordinary_names_are_not_secret_looking(path: str) -> None:
    assert not secret_looking(path)


def test_transfers_and_the_repo_gateway_use_the_one_list() -> None:
    import gatekeeper.gates.transfer.select as select
    import gatekeeper.mcp.gateway as gateway
    import gatekeeper.repo.paths as paths

    assert select.secret_looking is paths.secret_looking
    assert gateway.secret_looking is paths.secret_looking
    assert not hasattr(select, "SECRET_NAMES")
