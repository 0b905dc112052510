"""Which names and globs the read hooks treat as secret files: docs/hooks.md's list."""

from __future__ import annotations

import pytest

from gatekeeper.integrations.hooks.secret_paths import glob_targets_secrets, secret_name

SECRET = [".env", "app/.env.local", ".env.production", "tls.pem", "/srv/server.key",
          "cert.p12", "cert.pfx", "id_rsa", "/home/u/.ssh/id_ed25519", "id_work", ".netrc",
          ".npmrc", ".pypirc", "/home/u/.aws/credentials", ".git-credentials"]  # fmt: skip
NOT_SECRET = [".env.example", ".env.sample", "config/.env.template", "id_rsa.pub", "README.md",
              "id_utils.py", ".key", "env.py", ".envrc.md", "credentials.py", "src/"]  # fmt: skip
BROAD = ["*", "**/*", ".*", "*.py", "*.{py,md}", "src/**", "*.env.example"]


@pytest.mark.parametrize("path", SECRET)
def test_secret_looking_paths_are_named(path: str) -> None:
    assert secret_name(path) is not None, path


@pytest.mark.parametrize("path", NOT_SECRET)
def test_templates_public_keys_and_code_are_not(path: str) -> None:
    assert secret_name(path) is None, path


@pytest.mark.parametrize("glob", [".env*", "**/.env", "*.pem", "**/*.{pem,crt}", "id_*",
                                  "**/credentials", "*.key"])  # fmt: skip
def test_a_glob_that_singles_out_secret_files_is_named(glob: str) -> None:
    assert glob_targets_secrets(glob) is not None, glob


@pytest.mark.parametrize("glob", BROAD)
def test_a_broad_or_ordinary_glob_is_not(glob: str) -> None:
    assert glob_targets_secrets(glob) is None, glob
