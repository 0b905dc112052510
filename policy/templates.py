"""Starter `oms.toml` files for `oms policy init`: a working check plan per project kind,
and a comment on every section. Each text parses and validates (a unit test holds it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TemplateName = Literal["python", "node", "go"]
TEMPLATES: tuple[TemplateName, ...] = ("python", "node", "go")


@dataclass(frozen=True)
class Project:
    """What `oms policy init` found (or was told) about the project it writes for."""

    template: TemplateName
    lock: str | None = None  # the lockfile a toolchain is built from, repository-relative
    uv: bool = False  # python: uv.lock beside pyproject.toml, not a hash-pinned requirements
    npm_test: bool = False  # node: package.json has its own `test` script


HEADER = """\
# oms policy. The gates read this file from the default branch at its trusted mark, never
# from a candidate commit or the worktree: commit it there, then `oms policy trust` (at a
# terminal, after its diff). Unknown keys are errors; `oms policy check` lists every one,
# `oms policy show` prints what the gates will use.
version = 1
"""

PYTHON_VENV = """
# [[toolchains]]: dependencies built by `oms toolchain prepare` outside the sandbox from
# the lockfile as committed on the default branch, bound read-only into the checks that
# name them (the sandbox has no network). The lock pins every package with --hash=sha256.
[[toolchains]]
name = "py"
kind = "python-venv"
lock = "{lock}"
# python = "/usr/bin/python3"     # the interpreter it is built with (default)
"""

PYTHON_UV = """
# [[toolchains]]: dependencies built by `oms toolchain prepare` (uv sync --frozen) outside
# the sandbox from uv.lock and pyproject.toml as committed on the default branch, bound
# read-only into the checks that name them (the sandbox has no network).
[[toolchains]]
name = "py"
kind = "uv"
lock = "{lock}"
"""

PYTHON_CHECKS = """
# [[checks]]: the verification plan, run in order in the sandbox on an exact copy of the
# candidate commit. `toolchain = "py"` puts that toolchain's bin/ first on PATH.
# `report = "pytest"`: oms reads pytest's own JUnit report back, so the verdict names the
# tests that ran and sees tests removed, skipped or changed to pass (docs/result-gate.md).
[[checks]]
name = "tests"
cmd = ["python", "-m", "pytest", "-q"]
toolchain = "py"
timeout_s = 600
report = "pytest"
"""

NODE = """
# [[toolchains]]: node_modules built by `oms toolchain prepare` (npm ci --ignore-scripts)
# outside the sandbox from package-lock.json as committed on the default branch, bound
# read-only into the checks that name them (the sandbox has no network).
[[toolchains]]
name = "js"
kind = "node-npm"
lock = "{lock}"
# node = "/usr/bin/node"          # the runtime (default)

# [[checks]]: the verification plan, run in order in the sandbox on an exact copy of the
# candidate commit, with node_modules/.bin first on PATH. `report`: how the runner reports
# the tests it ran ("node-test" for `node --test`; "junit:PATH" for a runner writing JUnit
# XML there), read back so the verdict sees tests removed or skipped (docs/result-gate.md).
[[checks]]
name = "tests"
cmd = {cmd}
toolchain = "js"
timeout_s = 600
{report}"""

GO = """
# [[checks]]: the verification plan, run in order in the sandbox on an exact copy of the
# candidate commit. The sandbox has no network, so no module proxy: a Go module with
# dependencies needs them committed (`go mod vendor`) or built into a toolchain path, a
# [[toolchains]] entry of kind "command" (docs/toolchains.md), named here by `toolchain`.
[[checks]]
name = "tests"
cmd = ["go", "test", "./..."]
timeout_s = 900
report = "go-test"  # oms adds -json and reads the tests that ran from it
"""

FOOTER = """
# [sandbox]: the limits of every check (defaults shown). ro_paths: host directories a
# check may read (a compiler outside /usr); env_allow: environment names passed in.
# [sandbox]
# wall_s = 3600
# memory_mb = 4096
# ro_paths = []

# [scanners]: Gitleaks and detect-secrets scan every change. A finding you have checked
# is allowed by its fingerprint, as `oms scan` prints it.
# [scanners]
# allow_fingerprints = []

# [protected]: paths a candidate may not change, beyond the built-in list (this file,
# CI config, agent configuration, hooks).
# [protected]
# paths = ["deploy/**"]

# [transfer]: what may leave for a model provider, and for how long an approval holds.
# [transfer]
# approval_ttl_s = 900
"""


def starter_text(project: Project) -> str:
    """The starter `oms.toml` for a project."""
    if project.template == "python":
        lock = project.lock or ("uv.lock" if project.uv else "requirements.lock")
        body = (PYTHON_UV if project.uv else PYTHON_VENV).format(lock=lock) + PYTHON_CHECKS
    elif project.template == "node":
        cmd = '["npm", "test"]' if project.npm_test else '["node", "--test"]'
        # npm runs a script oms cannot add reporting flags to: the user names its report.
        report = '# report = "junit:PATH"\n' if project.npm_test else 'report = "node-test"\n'
        body = NODE.format(lock=project.lock or "package-lock.json", cmd=cmd, report=report)
    else:
        body = GO
    return HEADER + body + FOOTER
