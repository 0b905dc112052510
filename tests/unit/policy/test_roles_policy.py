"""`[roles.<name>]`, `[providers.<name>]` and `[work]` in `oms.toml`: strict, unknown keys
rejected, and a policy without them keeps the digest it had before they existed."""

from __future__ import annotations

import pytest

from policy import PolicyError, parse_policy, policy_digest

ROLE = """
[roles.impl]
provider = "command:impl"
model = "scripted"
auth = "none"
billing = "none"
transport = "exec"
"""
PROVIDER = """
[providers.impl]
cmd = ["/usr/bin/python3", "impl.py"]
"""


def parsed(text: str):  # type: ignore[no-untyped-def]
    return parse_policy(("version = 1\n" + text).encode(), "oms.toml").policy


def error(text: str) -> str:
    with pytest.raises(PolicyError) as info:
        parsed(text)
    return str(info.value)


def test_a_role_and_its_command_provider_parse_with_their_defaults() -> None:
    pol = parsed(ROLE + PROVIDER)
    r = pol.roles["impl"]
    assert (r.provider, r.model, r.auth, r.billing) == ("command:impl", "scripted", "none", "none")
    assert r.authority == "read-only" and r.unattended is False and r.timeout_s == 3600
    assert r.allow_usage_billing is False
    p = pol.providers["impl"]
    assert p.cmd == ["/usr/bin/python3", "impl.py"] and p.external is False
    assert p.output_schema is None


def test_auth_and_billing_may_be_left_out_so_that_the_role_is_refused_at_use() -> None:
    r = parsed('[roles.r]\nprovider = "claude-code"\nmodel = "m"\ntransport = "exec"\n').roles["r"]
    assert r.auth is None and r.billing is None


def test_an_unknown_provider_name_is_accepted_by_the_policy_and_refused_at_use() -> None:
    assert parsed(ROLE.replace("command:impl", "gemini-cli")).roles["impl"].provider == "gemini-cli"


def test_work_defaults_and_bounds() -> None:
    w = parsed("").work
    assert (w.max_attempts, w.lease_ttl_s, w.grader, w.reflection_bytes) == (
        3,
        1800,
        "grader",
        4096,
    )
    assert parsed("[work]\nmax_attempts = 20\nlease_ttl_s = 30\n").work.max_attempts == 20
    bad_values = (
        "max_attempts = 0",
        "max_attempts = 21",
        "lease_ttl_s = 29",
        "reflection_bytes = 255",
        "reflection_bytes = 65537",
        'grader = "../x"',
    )
    for bad in bad_values:
        assert "work." in error(f"[work]\n{bad}\n"), bad


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (ROLE + 'colour = "red"\n', "roles.impl.colour: unknown key"),
        (ROLE.replace('auth = "none"', 'auth = "oauth"'), "roles.impl.auth"),
        (ROLE.replace('billing = "none"', 'billing = "credits"'), "roles.impl.billing"),
        (ROLE.replace('transport = "exec"\n', ""), "roles.impl.transport: required key"),
        (ROLE.replace('model = "scripted"\n', ""), "roles.impl.model: required key"),
        (ROLE.replace('"scripted"', '""'), "roles.impl.model"),
        (ROLE.replace('"scripted"', '"' + "m" * 129 + '"'), "roles.impl.model"),
        (ROLE.replace('"scripted"', '"a\\u001b[2Jb"'), "roles.impl.model"),
        (ROLE.replace('"scripted"', '"--dangerously-bypass"'), "roles.impl.model"),
        (ROLE.replace('"command:impl"', '"command:"'), "roles.impl.provider"),
        (ROLE.replace('"command:impl"', '"command:../x"'), "roles.impl.provider"),
        (ROLE.replace('"command:impl"', '"shell:x"'), "roles.impl.provider"),
        (ROLE + 'authority = "root"\n', "roles.impl.authority"),
        (ROLE + "unattended = 1\n", "roles.impl.unattended"),
        (ROLE + "timeout_s = 0\n", "roles.impl.timeout_s"),
        (ROLE.replace("[roles.impl]", "[roles.'bad name']"), "roles.bad name"),
        (PROVIDER + "argv = []\n", "providers.impl.argv: unknown key"),
        (PROVIDER.replace('["/usr/bin/python3", "impl.py"]', "[]"), "providers.impl.cmd"),
        (PROVIDER.replace('"impl.py"', '"a\\u0000b"'), "providers.impl.cmd"),
        (PROVIDER + 'output_schema = "/etc/schema.json"\n', "providers.impl.output_schema"),
        (PROVIDER + 'output_schema = "../schema.json"\n', "providers.impl.output_schema"),
        ("[work]\nretries = 2\n", "work.retries: unknown key"),
    ],
)
def test_each_bad_key_or_value_is_a_one_line_policy_error(text: str, where: str) -> None:
    msg = error(text)
    assert where in msg and "\n" not in msg, msg


def test_a_policy_without_roles_keeps_its_digest_and_roles_change_it() -> None:
    plain = parsed("")
    assert policy_digest(plain) == policy_digest(parsed("[work]\nmax_attempts = 3\n"))
    # The digest of the built-in defaults, as it was before roles existed.
    assert policy_digest(plain) == (
        "sha256:40529614f290560c438ea4cf92300fe0cca599a49280181eaef8aff4d0a33e2e"
    )
    assert policy_digest(parsed(ROLE)) != policy_digest(plain)
    assert policy_digest(parsed(PROVIDER)) != policy_digest(plain)
    assert policy_digest(parsed("[work]\nmax_attempts = 4\n")) != policy_digest(plain)
