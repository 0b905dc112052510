"""The scan-result cache's store alone (scan/cache.py): hand-made findings, no scanner.

Every way an entry can be wrong (edited body or seal, a row moved under another key, a
garbage database, a damaged key) must read as a miss, never as a clean result; the
store stays within its size bound by dropping the least recently used entries; its
files are private and no symlink in it is followed.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.scan_cache import cache_db, close_caches

import gatekeeper.scan.cache as cache_module
from evidence import StoreUnavailable
from gatekeeper.scan import Finding, ScanItem
from gatekeeper.scan.cache import Identity, ScanCache, Stored, scanner_config_digest

FP = [f"{n:x}" * 64 for n in range(1, 6)]  # fingerprint-shaped (64 hex digits)


def finding(n: int = 0, path: str = "a.py", end_line: int | None = None) -> Finding:
    return Finding("gitleaks", f"rule-{n}", path, n + 1, FP[n % len(FP)], f"…[redacted, {n} chars]",
                   end_line=end_line)  # fmt: skip


def key(n: int) -> str:
    return f"{n:064x}"


def as_rows(found: list[Stored]) -> list[tuple[object, ...]]:
    return [(s.scanner, s.rule, s.line, s.end_line, s.fingerprint, s.preview) for s in found]


@pytest.fixture(autouse=True)
def _closed_caches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No cache opened by another test, none left open, and the default switch and bound."""
    monkeypatch.delenv("OMS_SCAN_CACHE", raising=False)
    monkeypatch.delenv("OMS_SCAN_CACHE_MAX_BYTES", raising=False)
    close_caches()
    yield
    close_caches()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "oms"


def opened(root: Path) -> ScanCache:
    c = ScanCache.open(root)
    assert c is not None, "the cache could not be opened"
    return c


def reopened(root: Path) -> ScanCache:
    """The cache as another process would open it: a new connection, the key read again."""
    close_caches()
    return opened(root)


# --- what is stored is what comes back -------------------------------------------------------


def test_an_entry_gives_back_every_field_of_its_findings(root: Path) -> None:
    found = [finding(0), finding(1, end_line=7), Finding("detect-secrets", "Private Key", "a.py",
             3, FP[2], "-----…[redacted, 1700 chars]", end_line=30)]  # fmt: skip
    opened(root).put({key(1): found, key(2): []})
    got = reopened(root).get([key(1), key(2), key(3)])
    assert set(got) == {key(1), key(2)}  # an empty entry is a hit; an absent one a miss
    assert got[key(2)] == []
    assert [s.at("a.py") for s in got[key(1)]] == found
    assert [(s.end_line, s.preview) for s in got[key(1)]] == [
        (f.end_line, f.preview) for f in found
    ]


def test_a_stored_finding_takes_the_path_of_the_item_asking(root: Path) -> None:
    opened(root).put({key(1): [finding(0, path="old/name.py")]})
    [stored] = reopened(root).get([key(1)])[key(1)]
    assert stored.at("new.py").file == "new.py"


def test_put_replaces_an_entry(root: Path) -> None:
    c = opened(root)
    c.put({key(1): [finding(0)]})
    c.put({key(1): [finding(1), finding(2)]})
    assert as_rows(reopened(root).get([key(1)])[key(1)]) == as_rows(
        [Stored.of(finding(1)), Stored.of(finding(2))]
    )
    assert opened(root).stats().entries == 1


def test_many_keys_are_asked_in_chunks(root: Path) -> None:
    keys = [key(n) for n in range(1234)]  # more than one SELECT's parameters
    opened(root).put({k: [finding(n % 3)] for n, k in enumerate(keys)})
    assert set(reopened(root).get([*keys, key(99_999)])) == set(keys)


# --- a wrong entry is a miss, never a clean result -------------------------------------------


@pytest.fixture
def sealed(root: Path) -> Path:
    """A cache holding key(1) -> two findings and key(2) -> none (a clean item); closed."""
    opened(root).put({key(1): [finding(0), finding(1)], key(2): []})
    close_caches()
    return root


def test_a_body_with_a_finding_removed_is_a_miss(sealed: Path) -> None:
    with cache_db(sealed) as conn:
        (body,) = conn.execute("SELECT body FROM entries WHERE key = ?", (key(1),)).fetchone()
        rows = json.loads(body)
        conn.execute("UPDATE entries SET body = ? WHERE key = ?",
                     (json.dumps(rows[:1], separators=(",", ":")).encode(), key(1)))  # fmt: skip
    assert set(opened(sealed).get([key(1), key(2)])) == {key(2)}


@pytest.mark.parametrize("body", [b"[]", b"", b"not json", b"{}"])
def test_any_other_body_under_the_old_seal_is_a_miss(sealed: Path, body: bytes) -> None:
    with cache_db(sealed) as conn:
        conn.execute("UPDATE entries SET body = ? WHERE key = ?", (body, key(1)))
    assert key(1) not in opened(sealed).get([key(1)])


def test_an_edited_seal_is_a_miss(sealed: Path) -> None:
    with cache_db(sealed) as conn:
        (mac,) = conn.execute("SELECT mac FROM entries WHERE key = ?", (key(1),)).fetchone()
        conn.execute("UPDATE entries SET mac = ? WHERE key = ?",
                     (bytes([mac[0] ^ 1]) + mac[1:], key(1)))  # fmt: skip
    assert set(opened(sealed).get([key(1), key(2)])) == {key(2)}


def test_a_clean_entry_copied_under_a_secret_items_key_is_a_miss(sealed: Path) -> None:
    # The seal names the key: a clean item's row cannot stand for another item.
    with cache_db(sealed) as conn:
        body, mac = conn.execute(
            "SELECT body, mac FROM entries WHERE key = ?", (key(2),)
        ).fetchone()
        conn.execute("UPDATE entries SET body = ?, mac = ? WHERE key = ?", (body, mac, key(1)))
        conn.execute("INSERT INTO entries VALUES (?, ?, ?, 1, 1)", (key(3), body, mac))
    assert set(opened(sealed).get([key(1), key(2), key(3)])) == {key(2)}


@pytest.mark.parametrize(
    "row",
    [
        ["gitleaks", "r", 1, None, "F" * 64, "p"],  # not lower-case hex: not a fingerprint
        ["gitleaks", "r", 1, None, "f" * 63, "p"],
        ["gitleaks", "r", -1, None, "f" * 64, "p"],
        ["gitleaks", "r", True, None, "f" * 64, "p"],
        ["gitleaks", "r", 1.0, None, "f" * 64, "p"],
        ["gitleaks", "r", 1, "2", "f" * 64, "p"],
        ["gitleaks", None, 1, None, "f" * 64, "p"],
        ["gitleaks", "r", 1, None, "f" * 64],
        ["gitleaks", "r", 1, None, "f" * 64, "p", "the secret"],
    ],
)
def test_a_sealed_body_that_is_not_as_put_writes_it_is_a_miss(
    root: Path, row: list[object]
) -> None:
    # Sealed with the right key (as a bug in a later writer would be): still not trusted.
    c = opened(root)
    body = json.dumps([row]).encode()
    with cache_db(root) as conn:
        conn.execute(
            "INSERT INTO entries VALUES (?, ?, ?, 1, 1)", (key(5), body, c._mac(key(5), body))
        )
    assert key(5) not in reopened(root).get([key(5)])


def test_garbage_in_place_of_the_database_is_an_empty_cache_that_works(sealed: Path) -> None:
    (sealed / "cache" / "scan.db").write_bytes(os.urandom(8192))
    c = opened(sealed)
    assert c.get([key(1), key(2)]) == {}
    c.put({key(1): [finding(3)]})
    assert as_rows(reopened(sealed).get([key(1)])[key(1)]) == as_rows([Stored.of(finding(3))])


@pytest.mark.parametrize("damage", ["short", "long", "empty", "other"])
def test_a_damaged_key_makes_every_old_entry_a_miss(sealed: Path, damage: str) -> None:
    path = sealed / "cache" / "scan.key"
    old = path.read_bytes()
    path.write_bytes({"short": old[:-1], "long": old + b"\0", "empty": b"",
                      "other": bytes(b ^ 0xFF for b in old)}[damage])  # fmt: skip
    c = opened(sealed)
    assert c.get([key(1), key(2)]) == {}
    new = path.read_bytes()
    assert len(new) == 32 and new != old
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    c.put({key(1): [finding(0)]})  # rewritten under the new key: a hit from now on
    assert set(reopened(sealed).get([key(1), key(2)])) == {key(1)}


# --- the bound: least recently used first ----------------------------------------------------


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1_000_000.0
        monkeypatch.setattr(cache_module.time, "time", lambda: self.now)


def entry_size(root: Path, k: str) -> int:
    with cache_db(root) as conn:
        (size,) = conn.execute("SELECT size FROM entries WHERE key = ?", (k,)).fetchone()
    return int(size)


def test_the_least_recently_used_entries_go_and_a_recent_hit_stays(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    c = opened(root)
    for n in range(1, 5):  # four entries, one an hour
        c.put({key(n): [finding(n)]})
        clock.now += 3600
    size = entry_size(root, key(1))
    clock.now += 3600
    assert set(c.get([key(1)])) == {key(1)}  # key(1), the oldest, is used again
    monkeypatch.setenv("OMS_SCAN_CACHE_MAX_BYTES", str(4 * size))
    clock.now += 60
    c.put({key(5): [finding(0)]})  # five entries do not fit four
    left = set(c.get([key(n) for n in range(1, 6)]))
    assert left == {key(1), key(4), key(5)}  # to 90% of the bound: key(2), then key(3)
    stats = c.stats()
    assert stats.bytes <= 4 * size and stats.max_bytes == 4 * size and stats.entries == 3


def test_the_total_stays_within_the_bound_however_much_is_put(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    bound = 5_000
    monkeypatch.setenv("OMS_SCAN_CACHE_MAX_BYTES", str(bound))
    c = opened(root)
    for n in range(200):
        c.put({key(n): [finding(i) for i in range(n % 4)]})
        clock.now += 1
        assert c.stats().bytes <= bound
    assert 0 < c.stats().entries < 200
    assert key(199) in c.get([key(199)])  # the newest is kept


def test_a_bound_of_nothing_keeps_nothing(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMS_SCAN_CACHE_MAX_BYTES", "0")
    c = opened(root)
    c.put({key(1): [finding(0)]})
    assert c.get([key(1)]) == {} and c.stats().entries == 0


@pytest.mark.parametrize(("raw", "bound"), [("", 64 << 20), ("x", 64 << 20), ("-5", 0),
                                            ("1234", 1234)])  # fmt: skip
def test_the_bound_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, raw: str, bound: int
) -> None:
    monkeypatch.setenv("OMS_SCAN_CACHE_MAX_BYTES", raw)
    assert cache_module.max_bytes() == bound


def test_a_hit_refreshes_its_last_use_at_most_hourly(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    c = opened(root)
    c.put({key(1): []})

    def used() -> int:
        with cache_db(root) as conn:
            return int(conn.execute("SELECT used FROM entries").fetchone()[0])

    first = used()
    clock.now += 60
    c.get([key(1)])
    assert used() == first  # a read within the hour writes nothing
    clock.now += 3600
    c.get([key(1)])
    assert used() == int(clock.now)


# --- clear, stats, on and off ----------------------------------------------------------------


def test_clear_removes_every_entry_and_says_how_many(sealed: Path) -> None:
    c = opened(sealed)
    before = c.stats()
    assert before.entries == 2 and before.bytes > 0
    gone = c.clear()
    assert (gone.entries, gone.bytes) == (2, before.bytes)
    assert c.get([key(1), key(2)]) == {} and c.stats().entries == 0


def test_off_means_no_cache_and_nothing_made(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("off", "0", "no", "false", " OFF "):
        monkeypatch.setenv("OMS_SCAN_CACHE", value)
        assert ScanCache.open(root) is None
    assert not root.exists()
    assert ScanCache.open(root, even_if_off=True) is not None  # `oms cache clear` still can


def test_existing_is_none_until_a_cache_was_made(root: Path) -> None:
    assert ScanCache.existing(root) is None
    assert not (root / "cache").exists()
    opened(root).put({key(1): []})
    close_caches()
    found = ScanCache.existing(root)
    assert found is not None and found.stats().entries == 1


# --- private files, no symlink followed ------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_cache_directory_and_every_file_in_it_are_private(root: Path) -> None:
    c = opened(root)
    c.put({key(1): [finding(0)]})  # written: the WAL and its index exist now
    directory = root / "cache"
    assert mode(directory) == 0o700
    names = sorted(os.listdir(directory))
    assert {"scan.db", "scan.key", "scan.db-wal"} <= set(names)
    assert {n: mode(directory / n) for n in names} == dict.fromkeys(names, 0o600)


def test_cache_files_left_readable_are_made_private_again(root: Path) -> None:
    opened(root).put({key(1): []})
    directory = root / "cache"
    with cache_db(root) as other:  # another process keeps the -wal and -shm in place
        other.execute("SELECT COUNT(*) FROM entries").fetchone()
        close_caches()
        names = ["scan.db", "scan.db-wal", "scan.db-shm"]
        for n in names:
            (directory / n).chmod(0o644)
        opened(root)
        assert {n: mode(directory / n) for n in names} == dict.fromkeys(names, 0o600)


def test_a_readable_cache_directory_is_made_private_again(root: Path) -> None:
    opened(root).put({key(1): []})
    close_caches()
    (root / "cache").chmod(0o755)
    opened(root)
    assert mode(root / "cache") == 0o700


def test_a_symlinked_cache_directory_is_not_followed(root: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    root.mkdir(mode=0o700)
    (root / "cache").symlink_to(elsewhere)
    assert ScanCache.open(root) is None
    assert os.listdir(elsewhere) == []
    with pytest.raises(StoreUnavailable, match="symlink"):
        ScanCache.existing(root)  # `oms cache`: exit 4, not a silent empty cache


@pytest.mark.parametrize("name", ["scan.key", "scan.db"])
def test_a_symlinked_cache_file_is_not_followed(root: Path, tmp_path: Path, name: str) -> None:
    opened(root).put({key(1): []})
    close_caches()
    target = tmp_path / f"real-{name}"
    path = root / "cache" / name
    shutil.move(path, target)
    path.symlink_to(target)
    before = target.read_bytes()
    assert ScanCache.open(root) is None
    assert target.read_bytes() == before


def test_a_key_that_is_not_a_file_makes_the_cache_unusable(root: Path) -> None:
    (root / "cache" / "scan.key").mkdir(parents=True)
    assert ScanCache.open(root) is None


# --- what the key is made of -----------------------------------------------------------------


IDENT = Identity("a" * 64, "b" * 64, "1.5.0")


@pytest.mark.parametrize(
    "other",
    [
        Identity("c" * 64, "b" * 64, "1.5.0"),  # another Gitleaks binary
        Identity("a" * 64, "c" * 64, "1.5.0"),  # another scanner config
        Identity("a" * 64, "b" * 64, "1.5.1"),  # another detect-secrets
    ],
)
def test_each_part_of_the_identity_changes_the_key(other: Identity) -> None:
    item = ScanItem.whole("a.py", "x = 1\n").key
    assert IDENT.key(item) == IDENT.key(item)
    assert other.key(item) != IDENT.key(item)


def test_a_changed_byte_or_extension_is_another_item() -> None:
    data = b"x = 1\nkey = 'abc'\n"
    base = ScanItem.of_bytes("a.py", data).key
    assert ScanItem.of_bytes("a.py", data).key == base
    assert ScanItem.of_bytes("a.py", data.replace(b"abc", b"abd")).key != base
    assert ScanItem.of_bytes("b.txt", data).key != base
    assert ScanItem.of_bytes("a.py", data, "replace").key != base  # decoded otherwise
    lines = ScanItem("a.py", [(1, "x = 1"), (2, "key = 'abc'")])
    assert ScanItem("a.py", [(1, "x = 1"), (3, "key = 'abc'")]).key != lines.key
    assert ScanItem.whole("a.py", "x = 1\n").key != ScanItem.whole("a.py", "x = 2\n").key


def test_the_scanner_config_digest_covers_the_scanning_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = Path(cache_module.__file__).parent
    copy = tmp_path / "scan"
    copy.mkdir()
    for name in cache_module._SOURCES:
        shutil.copy(here / name, copy / name)
    digest = scanner_config_digest.__wrapped__

    monkeypatch.setattr(cache_module, "__file__", str(copy / "cache.py"))
    assert digest() == scanner_config_digest()
    for name in ("gitleaks.py", "detect_secrets.py", "pieces.py", "prefilter.py"):
        original = (copy / name).read_bytes()
        (copy / name).write_bytes(original + b"\n")
        assert digest() != scanner_config_digest(), name
        (copy / name).write_bytes(original)
