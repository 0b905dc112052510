"""Paths that commonly hold secrets, by name: what the Read, Grep and Glob hooks and the
shell table refuse to read, whatever the file holds today (docs/hooks.md lists them).

Judged on the last component only, so `~/.aws/credentials` and `config/.env.local` match
wherever they are; examples meant to be read (`.env.example`, `*.pub`) do not.
"""

from __future__ import annotations

import fnmatch
import re

# Files named in full.
_NAMES = frozenset({".netrc", "_netrc", ".npmrc", ".pypirc", "credentials", ".git-credentials"})
# Key and certificate stores, by extension (with a stem: `jq .key` names no file).
_SUFFIXES = (".pem", ".key", ".p12", ".pfx")
# `.env` templates hold the variable names, not their values.
_ENV_TEMPLATES = frozenset({"example", "sample", "template"})
# SSH private keys: `id_rsa`, `id_ed25519`, `id_work` (no extension; `.pub` is public).
_SSH_KEY = re.compile(r"id_[A-Za-z0-9_-]+")
# Names a secret-looking glob would match, and names any broad glob matches too.
_EXAMPLES = (".env", ".env.local", "x.pem", "x.key", "x.p12", "x.pfx", "id_rsa", *_NAMES)
_NEUTRAL = ("x.txt", ".gitignore")


def secret_name(path: str) -> str | None:
    """Why `path` looks like a secret file ("a file that commonly holds secrets (.env)"),
    or None."""
    kind = _kind(path.rstrip("/").rsplit("/", 1)[-1])
    return None if kind is None else f"a file that commonly holds secrets ({kind})"


def _kind(name: str) -> str | None:
    if name in _NAMES:
        return name
    if name == ".env" or (name.startswith(".env.") and name[5:] not in _ENV_TEMPLATES):
        return ".env, .env.*"
    stem, dot, ext = name.rpartition(".")
    if dot and stem and f".{ext}" in _SUFFIXES:
        return f"*.{ext}"
    if _SSH_KEY.fullmatch(name):
        return "an SSH private key"
    return None


def glob_targets_secrets(pattern: str) -> str | None:
    """The kind of secret file a glob's last component singles out (`.env*`, `*.pem`),
    or None for a glob that matches ordinary files as well (`*`, `*.py`, `.*`)."""
    last = pattern.rstrip("/").rsplit("/", 1)[-1]
    for alt in _braces(last):
        if any(fnmatch.fnmatchcase(n, alt) for n in _NEUTRAL):
            continue
        for example in _EXAMPLES:
            if fnmatch.fnmatchcase(example, alt):
                return secret_name(example)
    return None


def _braces(pattern: str) -> list[str]:
    """One level of `{a,b}` alternatives, as ripgrep's and Claude Code's globs read them."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m is None:
        return [pattern]
    return [pattern[: m.start()] + alt + pattern[m.end() :] for alt in m.group(1).split(",")]


REMEDY = (
    "What an agent reads is sent to its model provider. Ask the user for what you need "
    "without the secret value (a .env.example lists the variable names); only the user "
    "may read this file"
)
