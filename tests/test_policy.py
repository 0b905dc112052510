"""Policy loading: unknown keys rejected at every level, one-line errors, digests.

No CLI command loads a policy yet, so these tests drive the library directly
(`policy.parse_policy`, `policy.load_policy_file`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import policy
from policy import (
    DEFAULT_POLICY,
    PolicyError,
    default_policy,
    load_policy_file,
    parse_policy,
)

ORIGIN = "oms.toml"


def policy_error(data: bytes, origin: str = ORIGIN) -> str:
    with pytest.raises(PolicyError) as info:
        parse_policy(data, origin)
    return str(info.value)


def assert_one_line(message: str) -> None:
    assert message
    assert "\n" not in message and "\r" not in message, repr(message)
    assert "Traceback" not in message
    assert all(ch.isprintable() for ch in message), repr(message)


# -- unknown keys -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key_path"),
    [
        ("version = 1\nchekcs = []\n", "chekcs"),
        ("version = 1\n[sandbox]\nmemroy_mb = 2048\n", "sandbox.memroy_mb"),
        (
            'version = 1\n[[checks]]\nname = "unit"\ncmd = ["pytest"]\ntmeout_s = 5\n',
            "checks.0.tmeout_s",
        ),
        ("version = 1\n[scanners]\ngitleaks_sha = 'x'\n", "scanners.gitleaks_sha"),
        ("version = 1\n[transfer]\napproval_ttl = 60\n", "transfer.approval_ttl"),
        (
            'version = 1\n[[transfer.autopilot]]\nname = "a"\ndestinations = ["api.x"]\n'
            "max_bytes = 1\nmax_byte = 2\n",
            "transfer.autopilot.0.max_byte",
        ),
        ("version = 1\n[sandboxx]\nwall_s = 10\n", "sandboxx"),
    ],
)
def test_unknown_keys_are_rejected_with_their_key_path(text: str, key_path: str) -> None:
    message = policy_error(text.encode())
    assert message.startswith(f"{ORIGIN}: {key_path}: "), message
    assert "unknown key" in message
    assert_one_line(message)


def test_the_same_keys_spelled_right_are_accepted() -> None:
    # The control for the test above: only the misspelling makes those files fail.
    loaded = parse_policy(
        b'version = 1\n[sandbox]\nmemory_mb = 2048\n[[checks]]\nname = "unit"\n'
        b'cmd = ["pytest"]\ntimeout_s = 5\n',
        ORIGIN,
    )
    assert loaded.policy.sandbox.memory_mb == 2048
    assert loaded.policy.checks[0].timeout_s == 5


# -- not TOML ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (b"version = 1\nfoo = = 2\n", 2),
        (b"version = 1\n\n[sandbox\nwall_s = 1\n", 3),
        (b"version = 1\nversion = 1\n", 2),
        (b"this is not toml\n", 1),
        (b'version = 1\n[sandbox]\nwall_s = 1\nenv_allow = ["A" "B"]\n', 4),
    ],
)
def test_a_file_that_is_not_toml_is_reported_as_file_line_col(text: bytes, line: int) -> None:
    message = policy_error(text, "/repo/oms.toml")
    m = re.match(r"^/repo/oms\.toml:(\d+):(\d+): TOML syntax error: ", message)
    assert m, message
    assert int(m[1]) == line
    assert int(m[2]) >= 1
    assert_one_line(message)


def test_a_truncated_toml_file_is_reported_as_file_line_col() -> None:
    message = policy_error(b"version = 1\nchecks = [\n", "/repo/oms.toml")
    assert re.match(r"^/repo/oms\.toml:\d+:\d+: TOML syntax error: ", message), message


def test_a_file_that_is_not_utf8_is_rejected_in_one_line() -> None:
    message = policy_error(b"version = 1\n# \xff\xfe\n")
    assert message.startswith(f"{ORIGIN}: not UTF-8")
    assert_one_line(message)


def test_an_oversized_policy_is_rejected_before_parsing() -> None:
    message = policy_error(b"version = 1\n" + b"#" * policy.MAX_POLICY_BYTES)
    assert "larger than" in message
    assert_one_line(message)


# -- version -----------------------------------------------------------------


def test_a_policy_without_version_is_rejected() -> None:
    message = policy_error(b"[sandbox]\nwall_s = 10\n")
    assert message.startswith(f"{ORIGIN}: version: ")
    assert "missing" in message
    assert_one_line(message)


@pytest.mark.parametrize("value", ["2", "0", "-1", '"1"', "[1]"])
def test_a_policy_with_any_version_but_1_is_rejected(value: str) -> None:
    message = policy_error(f"version = {value}\n".encode())
    assert message.startswith(f"{ORIGIN}: version: "), message
    assert_one_line(message)


def test_version_1_alone_is_the_default_policy() -> None:
    loaded = parse_policy(b"version = 1\n", ORIGIN)
    assert loaded.policy == DEFAULT_POLICY
    assert loaded.digest == default_policy().digest


# -- the file on disk ---------------------------------------------------------


def test_an_absent_policy_file_means_the_built_in_defaults(tmp_path: Path) -> None:
    loaded = load_policy_file(tmp_path / "oms.toml")
    assert loaded.policy == DEFAULT_POLICY
    assert loaded.origin == "built-in defaults"
    assert loaded.digest == policy.policy_digest(DEFAULT_POLICY)


def test_a_policy_file_is_loaded_and_named_by_its_path(tmp_path: Path) -> None:
    path = tmp_path / "oms.toml"
    path.write_bytes(b"version = 1\n[sandbox]\nwall_s = 77\n")
    loaded = load_policy_file(path)
    assert loaded.policy.sandbox.wall_s == 77
    assert loaded.origin == str(path)
    path.write_bytes(b"version = 1\n[sandbox]\nwall_z = 77\n")
    with pytest.raises(PolicyError, match=re.escape(f"{path}: sandbox.wall_z: unknown key")):
        load_policy_file(path)


def test_a_policy_file_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_bytes(b"version = 1\n")
    link = tmp_path / "oms.toml"
    link.symlink_to(real)
    with pytest.raises(PolicyError) as info:
        load_policy_file(link)
    assert "symlink" in str(info.value)
    assert_one_line(str(info.value))


def test_a_dangling_policy_symlink_is_refused_not_taken_as_absent(tmp_path: Path) -> None:
    # An absent file means defaults; a symlink to nowhere must not slip through as "absent".
    link = tmp_path / "oms.toml"
    link.symlink_to(tmp_path / "does-not-exist.toml")
    with pytest.raises(PolicyError, match="symlink"):
        load_policy_file(link)


def test_an_unreadable_policy_file_is_an_error_not_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "oms.toml"
    path.mkdir()  # reading a directory fails even as root
    with pytest.raises(PolicyError) as info:
        load_policy_file(path)
    assert "cannot read policy" in str(info.value)
    assert_one_line(str(info.value))


# -- values -------------------------------------------------------------------


def test_cmd_given_as_a_string_is_rejected() -> None:
    message = policy_error(b'version = 1\n[[checks]]\nname = "unit"\ncmd = "make test"\n')
    assert message.startswith(f"{ORIGIN}: checks.0.cmd: "), message
    assert_one_line(message)


def test_cmd_as_a_list_of_strings_is_accepted() -> None:
    loaded = parse_policy(
        b'version = 1\n[[checks]]\nname = "unit"\ncmd = ["make", "test"]\n', ORIGIN
    )
    assert loaded.policy.checks[0].cmd == ["make", "test"]


@pytest.mark.parametrize(
    "name",
    [
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "OPENAI_API_KEY",
        "ANTHROPIC_APIKEY",
        "DB_PASSWORD",
        "SSH_AUTH_SOCK",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "npm_token",
        "SESSION_ID",
        "MY_PRIVATE_THING",
    ],
)
def test_secret_looking_env_allow_names_are_rejected(name: str) -> None:
    message = policy_error(f'version = 1\n[sandbox]\nenv_allow = ["LANG", "{name}"]\n'.encode())
    assert message.startswith(f"{ORIGIN}: sandbox.env_allow: "), message
    assert name in message
    assert_one_line(message)


def test_plain_env_allow_names_are_accepted() -> None:
    loaded = parse_policy(b'version = 1\n[sandbox]\nenv_allow = ["LANG", "TZ", "CI"]\n', ORIGIN)
    assert loaded.policy.sandbox.env_allow == ["LANG", "TZ", "CI"]


@pytest.mark.parametrize(
    ("text", "key_path"),
    [
        (b'version = 1\n[sandbox]\nmemory_mb = "4096"\n', "sandbox.memory_mb"),
        (b"version = 1\n[sandbox]\nmemory_mb = true\n", "sandbox.memory_mb"),
        (b"version = 1\n[sandbox]\nmemory_mb = 4096.0\n", "sandbox.memory_mb"),
        (b"version = 1\n[sandbox]\nmemory_mb = 1\n", "sandbox.memory_mb"),
        (b'version = 1\n[sandbox]\nro_paths = ["usr/lib"]\n', "sandbox.ro_paths"),
        (b'version = 1\n[sandbox]\nro_paths = ["/usr/../etc"]\n', "sandbox.ro_paths"),
    ],
)
def test_values_of_the_wrong_type_or_out_of_range_are_rejected(text: bytes, key_path: str) -> None:
    message = policy_error(text)
    assert message.startswith(f"{ORIGIN}: {key_path}"), message
    assert_one_line(message)


def test_error_messages_stay_one_printable_line_for_hostile_keys() -> None:
    message = policy_error(b'version = 1\n"evil\\nkey\\u001b[31m\\u202e" = 1\n')
    assert "unknown key" in message
    assert_one_line(message)
    assert "\x1b" not in message


def test_errors_are_raised_without_chained_tracebacks() -> None:
    for data in (b"version = 1\nx = = 1\n", b"version = 1\nzzz = 1\n", b"\xff"):
        with pytest.raises(PolicyError) as info:
            parse_policy(data, ORIGIN)
        assert info.value.__cause__ is None
        assert info.value.__suppress_context__ is True


# -- digests -------------------------------------------------------------------

A = b"""version = 1

[sandbox]
memory_mb = 2048
wall_s = 100
env_allow = ["LANG"]

[[checks]]
name = "unit"
cmd = ["pytest", "-q"]
timeout_s = 30
"""

# The same policy: other key order, inline tables, comments, spacing, explicit defaults.
A_REFORMATTED = b"""# same meaning, different bytes
checks = [ { timeout_s = 30, cmd = [ "pytest", "-q" ], name = "unit" } ]
sandbox = { env_allow = [ "LANG" ], wall_s = 100, memory_mb = 2048, cpu_s = 1800 }
version   =   1
"""


def test_digest_is_stable_across_key_order_and_formatting() -> None:
    a = parse_policy(A, "a.toml")
    b = parse_policy(A_REFORMATTED, "b.toml")
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", a.digest)
    assert a.digest == b.digest
    assert a.plan_digest == b.plan_digest
    assert a.digest == parse_policy(A, "again.toml").digest


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"memory_mb = 2048", b"memory_mb = 2049"),
        (b'cmd = ["pytest", "-q"]', b'cmd = ["-q", "pytest"]'),
        (b"timeout_s = 30", b"timeout_s = 31"),
        (b'env_allow = ["LANG"]', b"env_allow = []"),
        (b'name = "unit"', b'name = "Unit"'),
    ],
)
def test_digest_changes_when_any_value_changes(old: bytes, new: bytes) -> None:
    assert old in A
    assert parse_policy(A, ORIGIN).digest != parse_policy(A.replace(old, new), ORIGIN).digest


def test_plan_digest_covers_the_checks_only() -> None:
    base = parse_policy(A, ORIGIN)
    other_limits = parse_policy(A.replace(b"wall_s = 100", b"wall_s = 101"), ORIGIN)
    other_plan = parse_policy(A.replace(b"timeout_s = 30", b"timeout_s = 31"), ORIGIN)
    assert other_limits.digest != base.digest
    assert other_limits.plan_digest == base.plan_digest
    assert other_plan.plan_digest != base.plan_digest


def test_digest_does_not_depend_on_the_process(tmp_path: Path) -> None:
    # Same bytes, a fresh interpreter with another hash seed: the same digest.
    import subprocess
    import sys

    path = tmp_path / "oms.toml"
    path.write_bytes(A)
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", "import sys,policy,pathlib;"
         "print(policy.load_policy_file(pathlib.Path(sys.argv[1])).digest)", str(path)],
        capture_output=True, text=True, env=env, check=True,
    ).stdout.strip()  # fmt: skip
    assert out == load_policy_file(path).digest
