"""The real `oms` CLI as a subprocess, and the contract every `--json` command keeps."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from support.warm import run_warm

OMS = (sys.executable, "-m", "gatekeeper")

# The key holding oms's own exit code in every `--json` object. (`exit_code` is left
# to command data, e.g. the sandboxed command's exit code in `oms sandbox run`.)
EXIT_KEY = "oms_exit_code"


def run_oms(
    args: Sequence[str | Path],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    input: str | None = None,
    timeout: float = 60,
    **popen_kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """`python -m gatekeeper ARGS` in `cwd` (default: this process's) with exactly `env`;
    never raises on the exit code. Forked from a warm interpreter when it can be (see
    `support.warm`): the same program, its imports paid once per worker."""
    # Warm takes a new session, a /dev/null stdin and a decoding's `errors` as Popen
    # would; anything else, fresh.
    new_session = popen_kwargs.get("start_new_session", False)
    devnull = popen_kwargs.get("stdin") == subprocess.DEVNULL and input is None
    if not set(popen_kwargs) - {"start_new_session", "stdin", "errors"} and (
        "stdin" not in popen_kwargs or devnull
    ):
        warm = run_warm(
            [str(a) for a in args],
            env=env,
            cwd=str(cwd) if cwd is not None else None,
            input=input,
            timeout=timeout,
            new_session=bool(new_session),
            stdin_devnull=devnull,
            errors=str(popen_kwargs.get("errors") or "strict"),
        )
        if warm is not None:
            return warm
    return subprocess.run(
        [*OMS, *[str(a) for a in args]],
        cwd=str(cwd) if cwd is not None else None,
        env=dict(env),
        input=input,
        capture_output=True,
        encoding="utf-8",  # the CLI's own output encoding, whatever this locale is
        timeout=timeout,
        check=False,
        **popen_kwargs,
    )


def parse_single_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one JSON object a `--json` command prints: exactly one line on stdout.

    Also pins the shared contract: `oms_exit_code` equals the process exit code, `ok`
    is true exactly when it is 0, and nothing resembling a traceback is printed.
    """
    out = proc.stdout
    assert out.endswith("\n"), f"stdout is not one terminated line: {out!r}"
    assert out.count("\n") == 1, f"stdout is not exactly one line: {out!r}"
    obj = json.loads(out)
    assert isinstance(obj, dict), f"stdout is not a JSON object: {out!r}"
    assert obj.get(EXIT_KEY) == proc.returncode, (obj, proc.returncode, proc.stderr)
    assert obj.get("ok") is (proc.returncode == 0), obj
    assert "Traceback" not in proc.stderr
    return obj
