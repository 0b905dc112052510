"""`continue`, `loop` and `abort`. STUB: the implement helper fills it."""

from __future__ import annotations

from pathlib import Path

from gatekeeper.work.runs.api import Out


def continue_run(repo_dir: Path, run_id: str, approval: str = "none", message: str | None = None,
                 *, via: str = "mcp") -> Out:  # fmt: skip
    """`oms run continue` / `oms_continue`. `via` is "terminal" only for the CLI's
    `--approve` (which asks at the controlling terminal); "cli" or "mcp" otherwise."""
    raise NotImplementedError


def loop_run(repo_dir: Path, run_id: str, max_cycles: int | None = None,
             max_steps: int | None = None) -> Out:  # fmt: skip
    raise NotImplementedError


def abort(repo_dir: Path, run_id: str, reason: str) -> Out:
    raise NotImplementedError
