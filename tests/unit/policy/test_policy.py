"""Policy loading: unknown keys rejected at every level, one-line errors, digests.

Driven through the library (`policy.parse_policy`, `policy.load_policy_file`), with
hostile cases in children capped at 512 MB of address space. The committed policy as
`oms sandbox run` and the MCP server read it: tests/e2e/test_policy_at_ref.py.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
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
from policy import load as policy_load

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
        ("version = 1\n[agent]\nro_path = []\n", "agent.ro_path"),
        ("version = 1\n[agent.egress]\non_secrets = 'block'\n", "agent.egress.on_secrets"),
    ],
)
def test_unknown_keys_are_rejected_with_their_key_path(text: str, key_path: str) -> None:
    message = policy_error(text.encode())
    assert message.startswith(f"{ORIGIN}: {key_path}: "), message
    assert "unknown key" in message
    assert_one_line(message)


def test_the_agent_section_is_read_and_checked_like_the_sandbox_one() -> None:
    loaded = parse_policy(
        b'version = 1\n[agent]\nro_paths = ["/opt/node"]\nwall_s = 60\n'
        b'[agent.egress]\non_secret = "block"\n',
        ORIGIN,
    )
    assert loaded.policy.agent.ro_paths == ["/opt/node"]
    assert loaded.policy.agent.egress.on_secret == "block"
    assert parse_policy(b"version = 1\n", ORIGIN).policy.agent.egress.on_secret == "redact"
    assert "absolute" in policy_error(b'version = 1\n[agent]\nro_paths = ["rel"]\n')
    assert "secret-looking" in policy_error(b'version = 1\n[agent]\nenv_allow = ["GH_TOKEN"]\n')
    assert "agent.egress.on_secret" in policy_error(
        b'version = 1\n[agent.egress]\non_secret = "warn"\n'
    )


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
    path = tmp_path / "oms.toml"
    path.write_bytes(A)
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", "import sys,policy,pathlib;"
         "print(policy.load_policy_file(pathlib.Path(sys.argv[1])).digest)", str(path)],
        capture_output=True, text=True, env=env, check=True,
    ).stdout.strip()  # fmt: skip
    assert out == load_policy_file(path).digest


# -- untrusted text is parsed within limits --------------------------------------

ROOT_KEY = ".".join(["a"] * 24_000)  # 48 KB: > 1.5 GB inside tomllib without limits
HUGE_KEY = ".".join(["a"] * 100_000)  # 200 KB: OOM-killed without limits
PART_LINES = "".join(f"k{i}." + ".".join(["a"] * 1_990) + " = 1\n" for i in range(60))


def _key(parts: int, sep: str = ".") -> str:
    return sep.join(["a"] * parts)


HOSTILE = [
    pytest.param(f"version = 1\n{ROOT_KEY} = 1\n", "line longer than", id="48k-dotted-key"),
    pytest.param(f"version = 1\n{HUGE_KEY} = 1\n", "line longer than", id="200k-dotted-key"),
    pytest.param(f"version = 1\n{PART_LINES}", "more than 16 parts", id="240k-of-2000-part-keys"),
    pytest.param(f"version = 1\n{_key(17)} = 1\n", "more than 16 parts", id="17-part-key"),
    pytest.param(f"version = 1\n[{_key(17)}]\n", "more than 16 parts", id="17-part-table"),
    pytest.param(f"version = 1\n[[{_key(17)}]]\n", "more than 16 parts", id="17-part-array-table"),
    pytest.param(
        "version = 1\n" + ".".join(['"a"'] * 17) + " = 1\n",
        "more than 16 parts",
        id="17-quoted-parts",
    ),
    pytest.param(f"version = 1\n{_key(17, ' . ')} = 1\n", "more than 16 parts", id="spaced-parts"),
    pytest.param(
        f"version = 1\nx = {{ {_key(17)} = 1 }}\n",
        "more than 16 parts",
        id="17-part-key-in-inline-table",
    ),
    pytest.param(
        "version = 1\na = " + "[" * 2000 + "]" * 2000 + "\n",
        "nested deeper than 32",
        id="2000-deep-arrays",
    ),
    pytest.param(
        "version = 1\na = " + "[\n" * 20_000 + "]\n" * 20_000,
        "nested deeper than 32",
        id="20000-deep-arrays-over-lines",
    ),
    pytest.param(
        "version = 1\na = " + "{b = " * 33 + "1" + "}" * 33 + "\n",
        "nested deeper than 32",
        id="33-deep-inline-tables",
    ),
    pytest.param("version = " + "9" * 4_400 + "\n", "line longer than", id="4400-digit-int"),
    pytest.param("version = " + "1" * 21 + "\n", "more than 20 digits", id="21-digit-int"),
    pytest.param("version = 1_" + "0_" * 20 + "0\n", "more than 20 digits", id="underscored-int"),
    pytest.param("version = 0x" + "f" * 21 + "\n", "more than 20 digits", id="21-digit-hex"),
    pytest.param("version = 1\nx = 1." + "5" * 21 + "\n", "more than 20 digits", id="long-float"),
    pytest.param('version = 1\nx = "' + "a" * 5_000 + '"\n', "line longer than", id="long-string"),
]


def _parse_with_little_memory(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """parse_policy in a child limited to 512 MB of address space: a hostile case that
    escaped the limits cannot take the machine down, it fails the test."""
    path = tmp_path / "oms.toml"
    path.write_text(text)
    script = (
        "import pathlib, sys, policy\n"
        "try:\n"
        "    policy.parse_policy(pathlib.Path(sys.argv[1]).read_bytes(), 'oms.toml')\n"
        "except policy.PolicyError as exc:\n"
        "    print(exc)\n"
    )

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))

    return subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True, text=True, timeout=120, preexec_fn=limit, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(("text", "reason"), HOSTILE)
def test_hostile_policy_text_is_refused_in_one_line_before_tomllib_runs(
    tmp_path: Path, text: str, reason: str
) -> None:
    assert len(text.encode()) <= policy.MAX_POLICY_BYTES
    proc = _parse_with_little_memory(tmp_path, text)
    assert proc.returncode == 0, proc.stderr[-2000:]
    message = proc.stdout.removesuffix("\n")
    assert message.startswith(f"{ORIGIN}:"), message
    assert reason in message, message
    assert_one_line(message)


@pytest.mark.parametrize(
    ("at_limit", "over_limit"),
    [
        (f"{_key(16)} = 1", f"{_key(17)} = 1"),
        ("a = " + "[" * 32 + "]" * 32, "a = " + "[" * 33 + "]" * 33),
        ("a = " + "9" * 20, "a = " + "9" * 21),
        ("a = 0x" + "f" * 20, "a = 0x" + "f" * 21),
        ("a = 'x'" + " " * 4089, "a = 'x'" + " " * 4090),
    ],
    ids=["key-parts", "nesting", "digits", "hex-digits", "line-length"],
)
def test_each_limit_admits_its_bound_and_refuses_one_more(at_limit: str, over_limit: str) -> None:
    policy.check_limits(at_limit + "\n", ORIGIN)
    with pytest.raises(PolicyError):
        policy.check_limits(over_limit + "\n", ORIGIN)


def test_dots_brackets_and_digits_in_strings_and_comments_are_data() -> None:
    deep, dots, digits = "[" * 40, _key(30), "1" * 40
    text = (
        f'version = 1\n# {deep} {dots} {digits}\n[[checks]]\nname = "{dots}"\n'
        f'cmd = [\'{deep}\', """{deep}\n{digits} "" {{{{""", \'\'\'{dots}\'\'\', "\\"{deep}"]\n'
    )
    loaded = parse_policy(text.encode(), ORIGIN)
    (check,) = loaded.policy.checks
    assert check.name == dots
    assert check.cmd == [deep, f'{deep}\n{digits} "" {{{{', dots, f'"{deep}']


def test_a_policy_near_the_size_cap_within_limits_parses() -> None:
    lines = [f'{_key(15)}{i} = "{"x" * 200}"' for i in range(1_000)]
    text = "version = 1\n[[checks]]\nname = 'n'\ncmd = ['true']\n[x]\n" + "\n".join(lines)
    assert len(text) < policy.MAX_POLICY_BYTES
    policy.check_limits(text, ORIGIN)  # the pre-pass lets it through; the model says no
    assert "unknown key" in policy_error(text.encode())


@pytest.mark.parametrize("error", [RecursionError, MemoryError, ValueError])
def test_tomllib_failures_past_the_limits_are_one_line_policy_errors(
    monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    def explode(text: str) -> dict[str, object]:
        raise error("deep inside the parser\nsecond line")

    monkeypatch.setattr(policy_load.tomllib, "loads", explode)
    with pytest.raises(PolicyError) as info:
        parse_policy(b"version = 1\n", ORIGIN)
    assert str(info.value) == f"{ORIGIN}: policy too complex to parse ({error.__name__})"
    assert info.value.__suppress_context__ is True


TOOLCHAIN = '[[toolchains]]\nname = "py"\nkind = "python-venv"\nlock = "requirements.lock"\n'
TC_CHECK = '[[checks]]\nname = "t"\ncmd = ["pytest"]\ntoolchain = "py"\n'


def test_a_toolchain_and_the_check_that_names_it_are_read() -> None:
    loaded = parse_policy(f"version = 1\n{TOOLCHAIN}{TC_CHECK}".encode(), "oms.toml")
    tc = loaded.policy.toolchain("py")
    assert (tc.kind, tc.lock, tc.runtime, tc.allow_build, tc.auto_prepare) == (
        "python-venv", "requirements.lock", "/usr/bin/python3", False, False)  # fmt: skip
    assert loaded.policy.checks[0].toolchain == "py"


def test_policies_without_toolchains_keep_their_digests() -> None:
    # Pinned before toolchains existed: adding the section must not move old digests.
    text = b'version = 1\n[[checks]]\nname = "t"\ncmd = ["x"]\n'
    assert parse_policy(text, "x").digest == (
        "sha256:e2481e41ae0a8429e82205d01a0314866872930df87d6d9df26fa5e2bcfbb917")  # fmt: skip
    assert policy.default_policy().digest == (
        "sha256:40529614f290560c438ea4cf92300fe0cca599a49280181eaef8aff4d0a33e2e")  # fmt: skip


def test_the_mcp_tools_key_leaves_old_digests_alone_and_takes_two_profiles() -> None:
    text = b'version = 1\n[[checks]]\nname = "t"\ncmd = ["x"]\n'
    pinned = parse_policy(text, "x").digest
    assert parse_policy(text + b'[mcp]\ntools = "gatekeeper"\n', "x").digest == pinned
    every = parse_policy(text + b'[mcp]\ntools = "all"\n', "x")
    assert every.policy.mcp.tools == "all" and every.digest != pinned
    with pytest.raises(PolicyError, match=r"mcp\.tools"):
        parse_policy(text + b'[mcp]\ntools = "some"\n', "x")


CONDUCTOR = b'version = 1\n[conductor]\ngithub_repo = "octo/widgets"\nready_label = "go"\n'


@pytest.mark.parametrize(("text", "digest"), [
    (CONDUCTOR, "sha256:0558f90e8362ed1d519905c70b7538876e35ce4bb7d760b732e927f6ecd43cc0"),
    (b"version = 1\n[conductor]\nsync_interval_s = 120\n",
     "sha256:b5b70a8ea2a4ae5f73433e8b05ea8d6c8387da0ff6926bcf917215a60cc43058"),
])  # fmt: skip
def test_a_conductor_section_keeps_its_digest_when_the_sync_deadlines_are_left_unset(
    text: bytes, digest: str
) -> None:
    # Pinned before `github_answer_timeout_s` / `github_sync_timeout_s` existed.
    assert parse_policy(text, "x").digest == digest
    set_one = text + b"github_sync_timeout_s = 30\n"
    assert parse_policy(set_one, "x").digest != digest
    assert parse_policy(set_one, "x").policy.conductor.github_sync_timeout_s == 30


def test_a_label_to_goal_map_is_optional_and_checked() -> None:
    pinned = parse_policy(CONDUCTOR, "x").digest
    assert parse_policy(CONDUCTOR + b"[conductor.goal_labels]\n", "x").digest == pinned
    mapped = parse_policy(CONDUCTOR + b'[conductor.goal_labels]\nui = "g-0123456789ab"\n', "x")
    assert mapped.policy.conductor.goal_labels == {"ui": "g-0123456789ab"}
    assert mapped.digest != pinned
    with pytest.raises(PolicyError, match=r"conductor\.goal_labels\.ui"):
        parse_policy(CONDUCTOR + b'[conductor.goal_labels]\nui = "the frontend goal"\n', "x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (TC_CHECK, "names toolchain 'py', which no [[toolchains]] entry defines"),
        (TOOLCHAIN.replace("requirements.lock", "../x.lock"), "relative to the repository"),
        (TOOLCHAIN.replace("requirements.lock", "/etc/x.lock"), "relative to the repository"),
        (TOOLCHAIN.replace("requirements.lock", "a//b"), "relative to the repository"),
        (TOOLCHAIN.replace("python-venv", "go-mod"), "toolchains.0.kind"),
        (TOOLCHAIN + 'node = "/usr/bin/node"\n', "`node` does not apply to python-venv"),
        (TOOLCHAIN + 'python = "python3"\n', "absolute path"),
        (TOOLCHAIN + 'cmd = ["x"]\n', "`cmd` is required for kind"),
        (TOOLCHAIN.replace("python-venv", "command"), "`cmd` is required for kind"),
        (TOOLCHAIN + TOOLCHAIN, "toolchain names must be unique"),
        (TOOLCHAIN + "color = 1\n", "unknown key"),
    ],
)
def test_bad_toolchains_are_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(f"version = 1\n{text}".encode(), "oms.toml")
    assert message in str(err.value) and "\n" not in str(err.value)


SCANNERS = (
    b'version = 1\n[scanners]\nallow_fingerprints = ["' + b"ab" * 32 + b'"]\ntimeout_s = 60\n'
)


def test_a_scanners_section_keeps_its_digest_when_the_path_rules_are_left_unset() -> None:
    # Pinned before `exclude_paths` and `[[scanners.allow]]` existed.
    pinned = "sha256:b4c233f3d00206c5b4787c0b57856c066d4b3229b20130b3ff77e5a7f4486074"
    assert parse_policy(SCANNERS, "x").digest == pinned
    assert "exclude_paths" not in policy.policy_json(parse_policy(SCANNERS, "x").policy)["scanners"]
    ruled = SCANNERS + b'exclude_paths = ["tests/fixtures/"]\n'
    ruled += b'[[scanners.allow]]\nrule = "Hex High Entropy String"\npaths = ["data/*.json"]\n'
    loaded = parse_policy(ruled, "x")
    assert loaded.digest != pinned
    assert loaded.policy.scanners.exclude_paths == ["tests/fixtures/"]
    assert [(a.rule, a.paths) for a in loaded.policy.scanners.allow] == [
        ("Hex High Entropy String", ["data/*.json"])
    ]


@pytest.mark.parametrize(
    "text",
    [
        b'[[scanners.allow]]\nrule = "r"\npaths = []\n',
        b'[[scanners.allow]]\nrule = ""\npaths = ["a/"]\n',
        b'[[scanners.allow]]\nrule = "r"\npaths = ["a/"]\nfingerprint = "x"\n',
        b'[scanners]\nexclude_paths = [""]\n',
    ],
)
def test_malformed_scanner_path_rules_are_refused(text: bytes) -> None:
    with pytest.raises(PolicyError):
        parse_policy(b"version = 1\n" + text, "x")


# Digests pinned before `[conductor.budget]` and a provider's `egress` existed.
PROVIDER_ONLY = b'version = 1\n[providers.impl]\ncmd = ["a"]\n'


@pytest.mark.parametrize(("text", "digest"), [
    (b"version = 1\n[conductor]\nsync_interval_s = 120\n",
     "sha256:b5b70a8ea2a4ae5f73433e8b05ea8d6c8387da0ff6926bcf917215a60cc43058"),
    (b"version = 1\n[conductor]\nsync_interval_s = 120\n[conductor.budget]\n",
     "sha256:b5b70a8ea2a4ae5f73433e8b05ea8d6c8387da0ff6926bcf917215a60cc43058"),
    (PROVIDER_ONLY, "sha256:17a2e998081fbf9754f05a3d5ba8dc55a01fdbb28189b95ea5b0e669a3ddcb56"),
    (PROVIDER_ONLY + b'egress = "none"\n',
     "sha256:17a2e998081fbf9754f05a3d5ba8dc55a01fdbb28189b95ea5b0e669a3ddcb56"),
])  # fmt: skip
def test_a_budget_or_a_providers_egress_left_unset_keeps_the_digest(
    text: bytes, digest: str
) -> None:
    assert parse_policy(text, "x").digest == digest


def test_a_budget_bounds_and_a_providers_egress_change_the_digest_and_read_back() -> None:
    budget = b"version = 1\n[conductor.budget]\nticket_requests = 200\ngoal_tokens = 2_000_000\n"
    got = parse_policy(budget, "x").policy.conductor.budget
    assert (got.ticket_requests, got.ticket_tokens, got.goal_tokens) == (200, None, 2_000_000)
    assert parse_policy(budget, "x").digest != parse_policy(b"version = 1\n", "x").digest
    api = parse_policy(PROVIDER_ONLY + b'egress = "api"\n', "x")
    assert api.policy.providers["impl"].egress == "api"
    assert api.digest != parse_policy(PROVIDER_ONLY, "x").digest


@pytest.mark.parametrize(("text", "message"), [
    ('[conductor.budget]\nticket_requests = "200"\n', "conductor.budget.ticket_requests"),
    ("[conductor.budget]\ngoal_tokens = 0\n", "conductor.budget.goal_tokens"),
    ("[conductor.budget]\ngoal_tokens = -5\n", "conductor.budget.goal_tokens"),
    ("[conductor.budget]\nticket_tokens = 2.5\n", "conductor.budget.ticket_tokens"),
    ("[conductor.budget]\nticket_requests = true\n", "conductor.budget.ticket_requests"),
    ("[conductor.budget]\nrun_requests = 1\n", "conductor.budget.run_requests: unknown key"),
    ('[providers.impl]\ncmd = ["a"]\negress = "tunnel"\n', "providers.impl.egress"),
])  # fmt: skip
def test_a_bad_budget_or_egress_is_refused_in_one_line_naming_the_key(
    text: str, message: str
) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(f"version = 1\n{text}".encode(), "oms.toml")
    assert message in str(err.value) and "\n" not in str(err.value)
