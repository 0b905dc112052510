"""Upstreams and provider keys: oms' own environment or `$OMS_HOME`, refusals in one line,
and no key in any repr or message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gatekeeper.agent.egress import ProviderKeys, provider_keys, upstreams_from_env
from gatekeeper.errors import ConfigError

KEY = "sk-test-" + "k" * 24


def key_file(state: Path, provider: str, text: str, mode: int = 0o600) -> Path:
    path = state / "providers" / provider
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_upstreams_default_to_the_public_endpoints() -> None:
    up = upstreams_from_env({})
    assert (up.anthropic, up.openai) == ("https://api.anthropic.com", "https://api.openai.com")


def test_upstreams_come_from_oms_environment() -> None:
    env = {
        "OMS_EGRESS_UPSTREAM_ANTHROPIC": "http://127.0.0.1:9/",
        "OMS_EGRESS_UPSTREAM_OPENAI": "https://127.0.0.1:8/prefix",
    }
    up = upstreams_from_env(env)
    assert (up.anthropic, up.openai) == ("http://127.0.0.1:9", "https://127.0.0.1:8/prefix")


@pytest.mark.parametrize(
    "url",
    ["ftp://host", "file:///etc/passwd", "http://", "http://u:p@host", "http://h/?q=1",
     "http://h/#f", "http://h:notaport", "http://h/a b", "unix:/run/x.sock"],
)  # fmt: skip
def test_an_upstream_that_is_not_a_plain_http_url_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="OMS_EGRESS_UPSTREAM_OPENAI"):
        upstreams_from_env({"OMS_EGRESS_UPSTREAM_OPENAI": url})


def test_keys_come_from_the_environment_first(tmp_path: Path) -> None:
    key_file(tmp_path, "anthropic", "from-file\n")
    keys = provider_keys({"ANTHROPIC_API_KEY": KEY}, tmp_path)
    assert keys.anthropic == KEY and keys.openai is None


def test_keys_come_from_owner_only_files_under_providers(tmp_path: Path) -> None:
    key_file(tmp_path, "openai", f"\n{KEY}\n")
    assert provider_keys({}, tmp_path).openai == KEY


def test_a_missing_key_file_is_no_key(tmp_path: Path) -> None:
    assert provider_keys({}, tmp_path) == ProviderKeys(anthropic=None, openai=None)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file anyway")
def test_an_unreadable_key_file_is_refused(tmp_path: Path) -> None:
    key_file(tmp_path, "openai", KEY, mode=0o000)
    with pytest.raises(ConfigError, match="cannot read"):
        provider_keys({}, tmp_path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_key_file_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    key_file(tmp_path, "anthropic", KEY, mode)
    with pytest.raises(ConfigError, match="chmod 600") as err:
        provider_keys({}, tmp_path)
    assert KEY not in str(err.value)


def test_a_symlinked_key_file_is_refused(tmp_path: Path) -> None:
    real = key_file(tmp_path / "elsewhere", "anthropic", KEY)
    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "anthropic").symlink_to(real)
    with pytest.raises(ConfigError, match="symlink"):
        provider_keys({}, tmp_path)


@pytest.mark.parametrize("text", [f"{KEY}\n{KEY}\n", "", "\n\n", f"{KEY} trailing words"])
def test_a_key_file_that_is_not_one_key_on_one_line_is_refused(tmp_path: Path, text: str) -> None:
    key_file(tmp_path, "openai", text)
    with pytest.raises(ConfigError) as err:
        provider_keys({}, tmp_path)
    assert KEY not in str(err.value)


def test_a_key_with_a_newline_in_the_environment_is_refused() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        provider_keys({"OPENAI_API_KEY": "abc\r\nX-Evil: 1"}, Path("/nonexistent"))


def test_the_repr_never_shows_a_key() -> None:
    keys = ProviderKeys(anthropic=KEY, openai=None)
    assert KEY not in repr(keys) and KEY not in str(keys)
    assert repr(keys) == "ProviderKeys(anthropic=set, openai=unset)"
