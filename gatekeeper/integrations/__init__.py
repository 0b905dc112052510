"""Where users already work: agent hooks in the clients' own protocols, installing oms
into Claude Code and Codex, and the formats other tools read (SARIF, JUnit, markdown)."""

from __future__ import annotations

import sys
from pathlib import Path


def oms_command() -> list[str]:
    """The argv prefix that runs this installation of oms, by absolute path.

    Clients start hooks and MCP servers without oms' virtualenv on PATH, so a bare `oms`
    may not resolve; the console script beside the interpreter does, else the module with
    -P (the current directory, a repository, never joins the import path).
    """
    script = Path(sys.executable).parent / "oms"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-P", "-m", "gatekeeper"]
