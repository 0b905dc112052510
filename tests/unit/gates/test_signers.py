"""The signers a policy lists: whether a key vouches at a time (rotation by windows,
revocation by removal), and `add_signer`/`remove_signer` editing a real worktree's oms.toml
byte for byte except the entry, never through a symlink, never committing."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from support.repos import git, write_files

from evidence import create_key
from gatekeeper.errors import UsageError
from gatekeeper.gates.signers import add_signer, remove_signer, trusted_signer
from policy import LoadedPolicy, PolicyError, parse_policy, signer_key_text

OLD = bytes(range(32))
NEW = bytes(range(1, 33))
ROTATED = f"""version = 1
[trust]
signers = [
  {{name = "ci-2026", key = "{signer_key_text(OLD)}", not_after = "2026-06-30"}},
  {{name = "ci-2027", key = "{signer_key_text(NEW)}", not_before = "2026-07-01"}},
]
""".encode()


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _policy(text: bytes = ROTATED) -> LoadedPolicy:
    return parse_policy(text, "main:oms.toml")


@pytest.mark.parametrize(("key", "at", "state", "name"), [
    (OLD, "2026-06-30T23:59:59+00:00", "trusted", "ci-2026"),
    (OLD, "2026-07-01T00:00:00+00:00", "expired", None),
    (NEW, "2026-06-30T23:59:59+00:00", "not_yet_valid", None),
    (NEW, "2026-07-01T00:00:00+00:00", "trusted", "ci-2027"),
    (NEW, "2099-01-01T00:00:00+00:00", "trusted", "ci-2027"),
    (OLD, "2020-01-01T00:00:00+00:00", "trusted", "ci-2026"),
    # Windows are UTC days: 01:00 on 1 July at UTC+02:00 is still 30 June in UTC.
    (OLD, "2026-07-01T01:00:00+02:00", "trusted", "ci-2026"),
    (NEW, "2026-07-01T01:00:00+02:00", "not_yet_valid", None),
    (bytes(32), "2026-06-01T00:00:00+00:00", "unlisted", None),
])  # fmt: skip
def test_rotation_hands_over_from_the_old_key_to_the_new_on_a_day(
    key: bytes, at: str, state: str, name: str | None
) -> None:
    check = trusted_signer(_policy(), key, _at(at))
    assert check.state == state
    assert check.trusted == (state == "trusted")
    assert (check.signer.name if check.signer else None) == name
    assert "main:oms.toml" in check.reason


def test_removing_a_signer_revokes_its_key_even_inside_its_window() -> None:
    at = datetime(2026, 5, 1, tzinfo=UTC)
    assert trusted_signer(_policy(), OLD, at).trusted
    without = ROTATED.replace(ROTATED.split(b"\n")[3] + b"\n", b"")
    check = trusted_signer(_policy(without), OLD, at)
    assert (check.state, check.signer) == ("unlisted", None)
    assert check.reason == (f"key {signer_key_text(OLD)} is not a signer in main:oms.toml "
                            "(never listed, or removed: revoked)")  # fmt: skip


def test_a_policy_without_trust_has_no_signers() -> None:
    check = trusted_signer(_policy(b"version = 1\n"), OLD, datetime.now(UTC))
    assert check.state == "unlisted"


def test_reasons_name_the_window_and_the_time_in_utc() -> None:
    at = datetime(2026, 7, 1, 8, tzinfo=timezone(timedelta(hours=2)))
    assert trusted_signer(_policy(), OLD, at).reason == (
        "signer ci-2026 expired after 2026-06-30 in main:oms.toml; the time is "
        "2026-07-01T06:00:00+00:00")  # fmt: skip


def test_a_naive_time_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        trusted_signer(_policy(), OLD, datetime(2026, 1, 1))


# -- add / remove ---------------------------------------------------------------------------

USER = """# the team's policy
version = 1   # keep

[[checks]]
name = "unit"
cmd = ["pytest", "-q"]     # odd spacing stays
"""


def _worktree(git_repo: Path, text: str = USER) -> Path:
    write_files(git_repo, {"oms.toml": text})
    return git_repo / "oms.toml"


def test_add_appends_a_trust_section_and_keeps_every_other_byte(git_repo: Path) -> None:
    path = _worktree(git_repo)
    head = git(git_repo, "rev-parse", "HEAD")
    got = add_signer(git_repo, "ci", signer_key_text(OLD), None, date(2026, 6, 30))
    text = path.read_text()
    assert text.startswith(USER)
    added = parse_policy(text.encode(), "x")
    assert [(s.name, s.public_raw, str(s.not_after)) for s in added.policy.trust.signers] == [
        ("ci", OLD, "2026-06-30")]  # fmt: skip
    assert (got.action, got.name, got.key, got.not_after, got.not_before) == (
        "added", "ci", signer_key_text(OLD), "2026-06-30", None)  # fmt: skip
    assert got.digest == added.digest
    assert any("oms policy trust" in s for s in got.next_steps)
    assert git(git_repo, "rev-parse", "HEAD") == head  # nothing committed
    assert git(git_repo, "status", "--porcelain") == "?? oms.toml\n"


def test_remove_then_takes_out_only_that_entry(git_repo: Path) -> None:
    path = _worktree(git_repo)
    add_signer(git_repo, "old", signer_key_text(OLD), None, None)
    with_one = path.read_text()
    add_signer(git_repo, "new", signer_key_text(NEW), date(2026, 7, 1), None)
    assert [s.name for s in parse_policy(path.read_bytes(), "x").policy.trust.signers] == [
        "old", "new"]  # fmt: skip
    got = remove_signer(git_repo, "new")
    assert (got.action, got.name, got.not_before) == ("removed", "new", "2026-07-01")
    assert path.read_text() == with_one
    remove_signer(git_repo, "old")
    assert parse_policy(path.read_bytes(), "x").digest == parse_policy(USER.encode(), "x").digest


def test_add_keeps_a_hand_written_array_of_tables_and_its_comments(git_repo: Path) -> None:
    user = (
        f"{USER}\n[trust]\nrequire_contained = true  # later\n\n"
        f'[[trust.signers]]  # the laptop\nname = "laptop"\nkey = "{signer_key_text(OLD)}"\n'
    )
    path = _worktree(git_repo, user)
    add_signer(git_repo, "ci", signer_key_text(NEW), None, None)
    text = path.read_text()
    assert text.startswith(user)
    trust = parse_policy(text.encode(), "x").policy.trust
    assert trust.require_contained
    assert [s.name for s in trust.signers] == ["laptop", "ci"]


def test_add_defaults_to_this_state_roots_evidence_key(git_repo: Path, oms_home: Path) -> None:
    key, _ = create_key(oms_home)
    _worktree(git_repo)
    got = add_signer(git_repo, "me", None, None, None)
    assert got.key == signer_key_text(key.public_raw)


@pytest.mark.parametrize(("name", "key", "message"), [
    ("ci", signer_key_text(NEW), "signer ci is listed already"),
    ("other", signer_key_text(OLD), "signer ci is listed already"),
    ("x y", signer_key_text(NEW), "signer name: String should match pattern"),
    ("new", "ed25519:" + "00" * 32, "signer key: key must be"),
])  # fmt: skip
def test_add_refuses_duplicates_and_bad_entries_and_writes_nothing(
    git_repo: Path, name: str, key: str, message: str
) -> None:
    path = _worktree(git_repo)
    add_signer(git_repo, "ci", signer_key_text(OLD), None, None)
    before = path.read_bytes()
    with pytest.raises(UsageError, match=message):
        add_signer(git_repo, name, key, None, None)
    assert path.read_bytes() == before


def test_add_refuses_a_window_that_ends_before_it_starts(git_repo: Path) -> None:
    _worktree(git_repo)
    with pytest.raises(UsageError, match="not_after 2026-01-01 is before not_before"):
        add_signer(git_repo, "ci", signer_key_text(OLD), date(2026, 2, 1), date(2026, 1, 1))
    assert (git_repo / "oms.toml").read_text() == USER


def test_remove_of_an_unknown_name_is_refused(git_repo: Path) -> None:
    _worktree(git_repo)
    with pytest.raises(UsageError, match="no signer named ci"):
        remove_signer(git_repo, "ci")


def test_a_symlinked_or_missing_or_invalid_oms_toml_is_never_edited(
    git_repo: Path, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match=r"no .*oms\.toml"):
        add_signer(git_repo, "ci", signer_key_text(OLD), None, None)
    target = tmp_path / "elsewhere.toml"
    target.write_text(USER)
    os.symlink(target, git_repo / "oms.toml")
    with pytest.raises(UsageError, match="is a symlink"):
        add_signer(git_repo, "ci", signer_key_text(OLD), None, None)
    assert target.read_text() == USER
    os.unlink(git_repo / "oms.toml")
    os.mkfifo(git_repo / "oms.toml")
    with pytest.raises(UsageError, match="not a regular file"):
        add_signer(git_repo, "ci", signer_key_text(OLD), None, None)
    os.unlink(git_repo / "oms.toml")
    _worktree(git_repo, USER + "[sandbx]\n")
    with pytest.raises(PolicyError, match="sandbx: unknown key"):
        add_signer(git_repo, "ci", signer_key_text(OLD), None, None)
