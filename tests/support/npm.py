"""npm package layouts of the two agent CLIs made in a test's directory: a package.json and
the files its `bin` names, so that finding a CLI as data (gatekeeper/agent/kinds.py) is
tested without npm or the real CLIs."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

CODEX_TRIPLES = {"x86_64": "x86_64-unknown-linux-musl", "aarch64": "aarch64-unknown-linux-musl"}
TRIPLE = CODEX_TRIPLES.get(platform.machine(), "x86_64-unknown-linux-musl")


def exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def package(root: Path, meta: dict[str, Any]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "package.json").write_text(json.dumps(meta))
    return root


def fake_npm(prefix: Path) -> Path:
    """A prefix like `.cache/agents`: both CLIs under node_modules; returns its `.bin`."""
    mods = prefix / "node_modules"
    claude = package(mods / "@anthropic-ai/claude-code", {
        "name": "@anthropic-ai/claude-code", "version": "2.1.197",
        "bin": {"claude": "bin/claude.exe"}})  # fmt: skip
    exe(claude / "bin/claude.exe")
    codex = package(
        mods / "@openai/codex",
        {"name": "@openai/codex", "version": "0.171.0", "bin": {"codex": "bin/codex.js"}},
    )
    exe(codex / "bin/codex.js")
    plat = package(mods / "@openai/codex-linux-x64",
                   {"name": "@openai/codex", "version": "0.171.0-linux-x64"})  # fmt: skip
    if platform.machine() == "aarch64":
        plat = plat.rename(mods / "@openai/codex-linux-arm64")
    exe(plat / "vendor" / TRIPLE / "bin/codex")
    bin_dir = mods / ".bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to("../@anthropic-ai/claude-code/bin/claude.exe")
    (bin_dir / "codex").symlink_to("../@openai/codex/bin/codex.js")
    return bin_dir
