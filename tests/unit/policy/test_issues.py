"""`oms policy check`'s validation: every issue at once, key paths, did-you-mean."""

from __future__ import annotations

import pytest

from policy import PolicyError, parse_policy
from policy.issues import PolicyIssue, check_policy_text, key_path

MANY = b"""version = 1
[sandbx]
wall_s = 1

[[checks]]
nmae = "unit"
cmd = []

[scanners]
timeout_ss = 4

[[transfer.autopilot]]
name = "r"
destinations = ["a:b"]
max_byte = 3
"""


def lines(data: bytes) -> list[str]:
    return [i.line("oms.toml") for i in check_policy_text(data, "oms.toml").issues]


def test_every_error_is_listed_not_only_the_first() -> None:
    got = lines(MANY)
    assert "oms.toml:sandbx: unknown key (did you mean `sandbox`?)" in got
    assert "oms.toml:checks[0].nmae: unknown key (did you mean `name`?)" in got
    assert "oms.toml:checks[0].name: required key is missing" in got
    assert any(x.startswith("oms.toml:checks[0].cmd: ") for x in got), got
    assert "oms.toml:scanners.timeout_ss: unknown key (did you mean `timeout_s`?)" in got
    assert "oms.toml:transfer.autopilot[0].max_byte: unknown key (did you mean `max_bytes`?)" in got
    assert "oms.toml:transfer.autopilot[0].max_bytes: required key is missing" in got
    assert len(got) == 7, got


def test_parse_policy_keeps_its_one_line_message() -> None:
    with pytest.raises(PolicyError) as exc:
        parse_policy(MANY, "oms.toml")
    assert str(exc.value).startswith("oms.toml: ") and "(and 6 more errors)" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_key_nothing_resembles_gets_no_suggestion() -> None:
    (issue,) = check_policy_text(b"version = 1\nzzzzqqq = 1\n", "p").issues
    assert issue == PolicyIssue("zzzzqqq", "unknown key", None)


def test_a_whole_model_error_is_at_the_top_level() -> None:
    text = b'version = 1\n[[checks]]\nname = "a"\ncmd = ["x"]\ntoolchain = "py"\n'
    (issue,) = check_policy_text(text, "p").issues
    assert issue.loc == "(top level)" and "no [[toolchains]] entry defines" in issue.message
    assert not issue.message.startswith("Value error")


def test_a_syntax_error_is_one_issue_at_its_line_and_column() -> None:
    (issue,) = check_policy_text(b"version = 1\n[[checks]\n", "p").issues
    assert issue.loc == "2:9" and issue.message.startswith("TOML syntax error")


def test_text_past_the_limits_is_one_issue() -> None:
    (issue,) = check_policy_text(b"version = 1\nx = " + b"1" * 30 + b"\n", "p").issues
    assert "digits" in issue.message


def test_missing_version_and_valid_file() -> None:
    (issue,) = check_policy_text(b"", "p").issues
    assert issue.line("p") == "p:version: required key is missing"
    report = check_policy_text(b"version = 1\n", "p")
    assert report.valid and report.loaded is not None
    assert report.loaded.digest == parse_policy(b"version = 1\n", "p").digest


@pytest.mark.parametrize(
    ("loc", "text"),
    [((), "(top level)"), (("checks", 0, "cmd", 2), "checks[0].cmd[2]"), (("agent", "egress",
     "on_secret"), "agent.egress.on_secret")],
)  # fmt: skip
def test_key_paths(loc: tuple[object, ...], text: str) -> None:
    assert key_path(loc) == text
