"""Roles (gatekeeper/work/roles.py): resolved from the policy, refused before anything
starts (exit 4) for every way a role cannot run, each reason listed.

The two real CLIs are npm layouts made in tmp_path (tests/support/npm.py); a command
provider's cmd[0] is a real file or a name on the given search path.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from support.npm import fake_npm
from support.repos import make_repo

from gatekeeper.work.conductor import bridge
from gatekeeper.work.providers import adapter
from gatekeeper.work.providers.base import Role
from gatekeeper.work.providers.command import run_command
from gatekeeper.work.roles import (
    RoleUnavailable,
    check,
    require,
    resolve,
    roster,
    schema_of,
    trusted_policy,
)
from policy import LoadedPolicy, Policy

PY = sys.executable


def loaded(
    roles: dict[str, dict[str, Any]], providers: dict[str, Any] | None = None
) -> LoadedPolicy:
    pol = Policy.model_validate({"version": 1, "roles": roles, "providers": providers or {}})
    return LoadedPolicy(pol, "test", "sha256:" + "0" * 64)


def role(**over: Any) -> dict[str, Any]:
    base = {"provider": "command:impl", "model": "scripted", "auth": "none", "billing": "none",
            "transport": "exec", "authority": "worktree-write", "unattended": True}  # fmt: skip
    return {**base, **over}


IMPL = {"impl": {"cmd": [PY, "-c", "pass"]}}


@pytest.fixture
def npm(tmp_path: Path, oms_home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both CLIs installed, and the keys oms' broker injects for api-key roles."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-unit-0123456789abcdef")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-unit-0123456789abcdef")
    return f"{fake_npm(tmp_path / 'prefix')}:/usr/bin:/bin"


def reasons(r: Role, *, unattended: bool = False, path: str = "/usr/bin:/bin") -> tuple[str, ...]:
    return check(r, unattended=unattended, search_path=path).reasons


def refused(r: Role, *, unattended: bool = False, path: str = "/usr/bin:/bin") -> str:
    with pytest.raises(RoleUnavailable) as info:
        require(r, unattended=unattended, search_path=path)
    err = info.value
    assert err.exit_code == 4 and err.kind == "unavailable"
    assert "\n" not in str(err) and f"role {r.name} " in str(err)
    return str(err)


# -- resolving ----------------------------------------------------------------------------


def test_a_command_role_resolves_to_its_own_engine_with_the_providers_argv() -> None:
    r = resolve(loaded({"impl": role()}, IMPL), "impl")
    assert r.engine == "command:impl" and r.cmd == (PY, "-c", "pass")
    assert r.external is False and r.authority == "worktree-write" and r.timeout_s == 3600
    assert check(r, unattended=True).eligible


def test_each_command_provider_is_its_own_engine() -> None:
    pol = loaded({"a": role(provider="command:one"), "b": role(provider="command:two")},
                 {"one": {"cmd": [PY]}, "two": {"cmd": [PY], "external": True}})  # fmt: skip
    a, b = roster(pol)
    assert (a.engine, b.engine) == ("command:one", "command:two")
    assert (a.external, b.external) == (False, True)


def test_the_two_cli_providers_send_repo_context_to_an_external_model() -> None:
    pol = loaded({"c": role(provider="claude-code", auth="api-key"),
                  "x": role(provider="codex-cli", auth="api-key")})  # fmt: skip
    assert [r.external for r in roster(pol)] == [True, True]


def test_roster_is_sorted_by_name() -> None:
    pol = loaded({"zeta": role(), "alpha": role(), "mid": role()}, IMPL)
    assert [r.name for r in roster(pol)] == ["alpha", "mid", "zeta"]


def test_an_unknown_role_name_is_refused_with_exit_4() -> None:
    with pytest.raises(RoleUnavailable) as info:
        resolve(loaded({"impl": role()}, IMPL), "nobody")
    assert info.value.exit_code == 4 and "nobody" in str(info.value)


# -- each refusal -------------------------------------------------------------------------


def test_an_unknown_provider_is_refused() -> None:
    r = resolve(loaded({"r": role(provider="gemini-cli")}), "r")
    assert "unknown provider 'gemini-cli'" in refused(r)
    with pytest.raises(RoleUnavailable):
        adapter(r)


def test_a_command_provider_naming_no_providers_entry_is_refused() -> None:
    r = resolve(loaded({"r": role(provider="command:ghost")}), "r")
    assert r.cmd == ()
    assert "names no [providers.ghost]" in refused(r)


def test_undeclared_auth_is_refused_and_never_inferred() -> None:
    r = resolve(loaded({"r": role(auth=None)}, IMPL), "r")
    assert r.auth == "undeclared"
    assert "auth is not declared" in refused(r)


def test_undeclared_billing_is_refused_and_never_inferred() -> None:
    # A model name that "looks" subscription-billed changes nothing.
    r = resolve(loaded({"r": role(billing=None, model="claude-max-subscription")}, IMPL), "r")
    assert "billing is not declared" in refused(r)


def test_usage_billing_is_refused_unless_explicitly_enabled() -> None:
    r = resolve(loaded({"r": role(billing="usage")}, IMPL), "r")
    assert "credit-billed models not explicitly enabled" in refused(r)
    ok = resolve(loaded({"r": role(billing="usage", allow_usage_billing=True)}, IMPL), "r")
    assert check(ok, unattended=True).eligible


def test_claude_exec_with_a_subscription_login_is_refused(npm: str) -> None:
    r = resolve(loaded({"r": role(provider="claude-code", auth="subscription",
                                  billing="subscription")}), "r")  # fmt: skip
    assert 'runs only with auth = "api-key"' in refused(r, path=npm)
    ok = resolve(loaded({"r": role(provider="claude-code", auth="api-key")}), "r")
    assert check(ok, unattended=True, search_path=npm).eligible


def test_a_worktree_write_codex_exec_role_needs_an_api_key(npm: str) -> None:
    r = resolve(loaded({"r": role(provider="codex-cli", auth="subscription",
                                  billing="subscription")}), "r")  # fmt: skip
    assert "worktree-write codex exec role needs" in refused(r, path=npm)
    grader = resolve(loaded({"r": role(provider="codex-cli", auth="api-key",
                                       authority="read-only")}), "r")  # fmt: skip
    assert check(grader, unattended=True, search_path=npm).eligible


def test_an_unattended_run_of_a_subscription_role_is_refused(npm: str) -> None:
    sub = role(provider="codex-cli", auth="subscription", billing="subscription",
               authority="read-only")  # fmt: skip
    r = resolve(loaded({"r": sub}), "r")
    assert check(r, unattended=False, search_path=npm).eligible  # attended: fine
    assert "auth subscription never runs unattended" in refused(r, unattended=True, path=npm)


def test_an_unattended_run_of_an_interactive_role_is_refused(npm: str) -> None:
    r = resolve(loaded({"r": role(provider="claude-code", auth="api-key",
                                  transport="interactive")}), "r")  # fmt: skip
    assert check(r, unattended=False, search_path=npm).eligible
    assert "only as a conductor's Claude Code worker" in refused(r, unattended=True, path=npm)


# An interactive worker unattended (issue 31): Claude Code, api-key or none, marked
# unattended, and only as a conductor's worker pane under oms agent run (worker_pane).
@pytest.mark.parametrize("auth", ["api-key", "none"])
def test_an_interactive_claude_code_worker_may_run_unattended_in_its_pane(
    npm: str, auth: str
) -> None:
    r = resolve(loaded({"r": role(provider="claude-code", auth=auth,
                                  transport="interactive")}), "r")  # fmt: skip
    assert check(r, unattended=True, search_path=npm, worker_pane=True).eligible
    assert not check(r, unattended=True, search_path=npm).eligible  # not as a worker: no


def test_a_subscription_interactive_worker_stays_attended(npm: str) -> None:
    sub = role(provider="claude-code", auth="subscription", billing="subscription",
               transport="interactive")  # fmt: skip
    r = resolve(loaded({"r": sub}), "r")
    found = check(r, unattended=True, search_path=npm, worker_pane=True)
    assert not found.eligible
    assert found.reasons == ("auth subscription never runs unattended (api-key or none only)",)
    assert check(r, unattended=False, search_path=npm).eligible  # attended: as before


def test_an_interactive_worker_not_marked_unattended_stays_attended(npm: str) -> None:
    r = resolve(loaded({"r": role(provider="claude-code", auth="api-key",
                                  transport="interactive", unattended=False)}), "r")  # fmt: skip
    found = check(r, unattended=True, search_path=npm, worker_pane=True)
    assert found.reasons == ("the role is not marked unattended = true",)


def test_an_interactive_codex_worker_is_not_unattended_in_a_pane(npm: str) -> None:
    r = resolve(loaded({"r": role(provider="codex-cli", auth="api-key", authority="read-only",
                                  transport="interactive")}), "r")  # fmt: skip
    found = check(r, unattended=True, search_path=npm, worker_pane=True)
    assert not found.eligible and "only as a conductor's Claude Code worker" in found.reasons[0]


@pytest.mark.parametrize(
    ("over", "runs"),
    [({"auth": "api-key"}, True), ({"auth": "none"}, True),
     ({"auth": "subscription", "billing": "subscription"}, False),
     ({"auth": "api-key", "unattended": False}, False)],
)  # fmt: skip
def test_the_bridge_takes_an_interactive_claude_code_worker_only_when_it_runs_unattended(
    npm: str, monkeypatch: pytest.MonkeyPatch, over: dict[str, Any], runs: bool
) -> None:
    """prepare_dispatch's check that the worker can run: an unattended interactive worker
    runs in its pane (no provider adapter); an attended one is refused as before."""
    monkeypatch.setenv("PATH", npm)
    r = resolve(loaded({"r": role(provider="claude-code", transport="interactive",
                                  **over)}), "r")  # fmt: skip
    if runs:
        bridge._runnable(r)
    else:
        with pytest.raises(RoleUnavailable, match="interactive sessions run in the conductor"):
            bridge._runnable(r)


def test_worker_pane_changes_nothing_for_an_exec_role() -> None:
    for over in ({}, {"unattended": False}, {"auth": "subscription", "billing": "subscription"}):
        r = resolve(loaded({"r": role(**over)}, IMPL), "r")
        assert check(r, unattended=True, worker_pane=True) == check(r, unattended=True)


def test_an_unattended_run_of_a_role_not_marked_unattended_is_refused() -> None:
    r = resolve(loaded({"r": role(unattended=False)}, IMPL), "r")
    assert check(r, unattended=False).eligible
    assert "not marked unattended = true" in refused(r, unattended=True)


@pytest.mark.parametrize(("provider", "var"), [("claude-code", "ANTHROPIC_API_KEY"),
                                             ("codex-cli", "OPENAI_API_KEY")])  # fmt: skip
def test_an_api_key_role_without_a_key_for_the_broker_is_refused(
    provider: str, var: str, npm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = resolve(loaded({"r": role(provider=provider, auth="api-key",
                                  authority="read-only")}), "r")  # fmt: skip
    assert check(r, unattended=True, search_path=npm).eligible
    monkeypatch.delenv(var)
    assert f"no API key for oms' egress broker: set {var}" in refused(r, path=npm)


def test_a_key_file_readable_by_others_refuses_the_role(
    npm: str, oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    keys = oms_home / "providers"
    keys.mkdir(parents=True)
    (keys / "openai").write_text("sk-test-file-0123456789abcdef\n")
    r = resolve(loaded({"r": role(provider="codex-cli", auth="api-key",
                                  authority="read-only")}), "r")  # fmt: skip
    (keys / "openai").chmod(0o600)
    assert check(r, unattended=True, search_path=npm).eligible
    (keys / "openai").chmod(0o644)
    assert "the openai key cannot be used" in refused(r, path=npm)


@pytest.mark.parametrize("provider", ["claude-code", "codex-cli"])
def test_a_cli_that_is_not_installed_is_refused(provider: str, tmp_path: Path) -> None:
    r = resolve(loaded({"r": role(provider=provider, auth="api-key",
                                  authority="read-only")}), "r")  # fmt: skip
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    assert f"the {provider} CLI is not installed" in refused(r, path=str(empty))


def test_a_cli_of_the_right_name_that_is_not_the_npm_package_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "codex"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    r = resolve(loaded({"r": role(provider="codex-cli", auth="api-key",
                                  authority="read-only")}), "r")  # fmt: skip
    assert "not installed" in refused(r, path=str(fake.parent))


def test_a_command_provider_whose_program_is_missing_is_refused(tmp_path: Path) -> None:
    pol = loaded({"a": role(provider="command:abs"), "b": role(provider="command:bare")},
                 {"abs": {"cmd": [str(tmp_path / "missing.py")]},
                  "bare": {"cmd": ["no-such-program-oms"]}})  # fmt: skip
    a, b = roster(pol)
    assert "not installed" in refused(a) and "not installed" in refused(b)


def test_every_reason_is_listed_not_just_the_first() -> None:
    r = resolve(loaded({"r": role(provider="command:ghost", auth=None, billing=None,
                                  transport="interactive", unattended=False)}), "r")  # fmt: skip
    got = reasons(r, unattended=True)
    assert len(got) == 5, got
    msg = refused(r, unattended=True)
    assert all(why in msg for why in got)


def test_the_command_adapter_refuses_a_role_without_a_command_before_running(
    tmp_path: Path,
) -> None:
    from gatekeeper.work.providers.base import ProviderRequest

    policy = loaded({"r": role(provider="command:ghost")})
    r = resolve(policy, "r")
    req = ProviderRequest(tmp_path, "0" * 40, r, "20261201T150000Z-0a1b2c3d", b"task",
                          loaded=policy)  # fmt: skip
    with pytest.raises(RoleUnavailable):
        run_command(req)


# -- a command grader's output schema, from the default branch -----------------------------


def schema_repo(tmp_path: Path, env: dict[str, str], files: dict[str, str]) -> Path:
    pol = ('version = 1\n[roles.g]\nprovider = "command:g"\nmodel = "m"\nauth = "none"\n'
           'billing = "none"\ntransport = "exec"\n[providers.g]\n'
           f'cmd = ["{PY}"]\noutput_schema = "s/grade.json"\n')  # fmt: skip
    return make_repo(tmp_path / "repo", {"oms.toml": pol, **files}, env=env)


def test_the_output_schema_is_read_from_the_default_branch(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    repo = schema_repo(tmp_path, oms_env, {"s/grade.json": '{"type": "object"}'})
    (repo / "s" / "grade.json").write_text('{"type": "string"}')  # the worktree: never read
    r = resolve(trusted_policy(repo), "g")
    assert schema_of(repo, r) == {"type": "object"}


@pytest.mark.parametrize(
    ("files", "why"),
    [({}, "missing"), ({"s/grade.json": "[1, 2]"}, "not a JSON object"),
     ({"s/grade.json": "{not json"}, "not a JSON object"),
     ({"s/grade.json": " " * (65 << 10) + "{}"}, "over")],
)  # fmt: skip
def test_a_schema_that_cannot_be_used_refuses_the_role(
    tmp_path: Path, oms_env: dict[str, str], files: dict[str, str], why: str
) -> None:
    repo = schema_repo(tmp_path, oms_env, files)
    r = resolve(trusted_policy(repo), "g")
    with pytest.raises(RoleUnavailable, match=why) as info:
        schema_of(repo, r)
    assert info.value.exit_code == 4


def test_a_role_without_a_schema_has_none(tmp_path: Path, oms_env: dict[str, str]) -> None:
    r = resolve(loaded({"impl": role()}, IMPL), "impl")
    assert schema_of(tmp_path, r) is None
