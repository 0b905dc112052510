"""Runs later: changed files that execute code on a developer's machine after checkout or
install, outside every sandbox, beyond the protected paths (`protected.py` blocks those).

Each changed file is named by class (`KINDS`): npm lifecycle scripts and the files npm or
pnpm run on install, `.npmrc` and yarn settings that pick what runs, VS Code workspace
tasks, mise/asdf configuration, Gradle and Maven wrappers, Python build entry points, the
make/just targets the base plan's checks run, and paths the base's policy lists.
`automatic` says the code runs without a human asking for it (an install, a checkout, a
wrapper or shell starting); the gate blocks those.

Nothing is executed or evaluated: JSON, TOML, properties, ini and the small YAML, make and
just subsets are parsed as data, and a changed file that cannot be read counts against
the candidate. Entries whose bytes are equal on both sides report nothing, so a caller
may pass unchanged files (a `pyproject.toml`, a planned `Makefile`) as context.

What this cannot see: what a dependency or lockfile brings (its own install scripts, a
`resolved` URL); a script or module that unchanged configuration names, when it changes
(a `yarnPath` outside `.yarn/`, a hook's script file, a backend module when its
`pyproject.toml` is not passed); build scripts of other ecosystems (`build.gradle`,
`build.rs`, CMake, hatch/pdm build hooks); make and just beyond literal names (functions,
conditionals, recursive `$(MAKE) -C`, just modules); configuration outside the repository
that makes these files matter or not (a user's `ignore-scripts`, workspace trust).

Here the rule table and its dispatch; each family's reader is a module beside this one
(`npm`, `yarn`, `workspace`, `mise`, `wrappers`, `python_build`), make and just are read
in `script`, `make`, `just`, `targets` and `plan`, and `common` and `documents` hold what
they share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gatekeeper.gates.result.protected import matches
from gatekeeper.gates.result.runs_later.common import (
    KINDS,
    Kind,
    RunsLater,
    Said,
    Unreadable,
    decode,
    file_name,
    hit,
    is_change,
)
from gatekeeper.gates.result.runs_later.mise import mise_toml
from gatekeeper.gates.result.runs_later.npm import npmrc, package_json
from gatekeeper.gates.result.runs_later.plan import plan_targets
from gatekeeper.gates.result.runs_later.python_build import backend_hits, pyproject
from gatekeeper.gates.result.runs_later.targets import script_hits
from gatekeeper.gates.result.runs_later.workspace import code_workspace
from gatekeeper.gates.result.runs_later.wrappers import wrapper_properties
from gatekeeper.gates.result.runs_later.yarn import yarnrc, yarnrc_yml
from gatekeeper.gates.result.versions import FileVersions

__all__ = ["KINDS", "Kind", "RunsLater", "plan_targets", "runs_later"]


_Reader = Callable[[str | None, str], Said]


def runs_later(
    files: Sequence[FileVersions],
    *,
    plan_targets: Sequence[tuple[str, str]] = (),
    extra_globs: Sequence[str] = (),
) -> tuple[RunsLater, ...]:
    """Every runs-later change in `files`, sorted by (path, kind, what), one entry each."""
    changed = [f for f in files if is_change(f)]
    hits: list[RunsLater] = []
    for f in files:
        hits.extend(_path_hits(f) if f.deleted or is_change(f) else ())
    for f in changed:
        pattern = matches(f.path, extra_globs)
        if pattern is not None:
            hits.append(hit(f.path, "policy-listed", f"listed by policy pattern {pattern}", True))
    hits.extend(backend_hits(files, changed))
    hits.extend(script_hits(files, changed, plan_targets))
    return _settle(hits)


def _settle(hits: Iterable[RunsLater]) -> tuple[RunsLater, ...]:
    """One entry per (path, kind, what), automatic if any reading said so, sorted."""
    merged: dict[tuple[str, Kind, str], bool] = {}
    for h in hits:
        key = (h.path, h.kind, h.what)
        merged[key] = merged.get(key, False) or h.automatic
    return tuple(hit(p, k, w, a) for (p, k, w), a in sorted(merged.items()))


@dataclass(frozen=True)
class _Rule:
    """A class of paths: with no reader, any change counts; a reader names what changed.
    `automatic` is the reading of an unreadable candidate; `on_delete` readers also see a
    deleted file as empty (deleting a file that disabled scripts enables them)."""

    globs: tuple[str, ...]
    kind: Kind
    automatic: bool
    read: _Reader | None = None
    on_delete: bool = False
    encoding: str = "utf-8-sig"

    def apply(self, f: FileVersions) -> list[RunsLater]:
        if self.read is None:
            verb = "added" if f.added else "changed"
            return [hit(f.path, self.kind, f"{file_name(f.path)} {verb}", self.automatic)]
        base = decode(f.base, f.base_oversize, self.encoding)
        cand = "" if f.deleted else decode(f.candidate, f.candidate_oversize, self.encoding)
        try:
            if cand is None:
                raise Unreadable
            return [hit(f.path, self.kind, w, a) for w, a in self.read(base, cand)]
        except Unreadable:
            what = f"{file_name(f.path)} could not be parsed"
            return [hit(f.path, self.kind, what, self.automatic)]


def _path_hits(f: FileVersions) -> list[RunsLater]:
    hits: list[RunsLater] = []
    for rule in _RULES:
        if matches(f.path, rule.globs) is not None and (rule.on_delete or not f.deleted):
            hits.extend(rule.apply(f))
    return hits


_MISE = (
    "mise.toml", ".mise.toml", "mise.*.toml", ".mise.*.toml", ".rtx.toml", ".rtx.*.toml",
    "**/.mise/config.toml", "**/.mise/config.*.toml", "**/mise/config.toml",
    "**/.config/mise.toml", "**/.config/mise/config.toml", "**/.config/mise/conf.d/*.toml",
)  # fmt: skip
_WRAPPER_FILES = (
    "gradlew", "gradlew.bat", "mvnw", "mvnw.cmd", "gradle-wrapper.jar", "maven-wrapper.jar",
    "MavenWrapperDownloader.java", "**/.mvn/extensions.xml",
)  # fmt: skip
_WRAPPER_PROPERTIES = ("gradle-wrapper.properties", "maven-wrapper.properties")
_RULES = (
    _Rule(("package.json",), "npm-lifecycle", True, package_json),
    # npm runs `node-gyp rebuild` for a binding.gyp; pnpm loads .pnpmfile.* on install
    _Rule(("binding.gyp", ".pnpmfile.cjs", ".pnpmfile.mjs"), "npm-lifecycle", True),
    _Rule((".npmrc",), "npmrc", True, npmrc, on_delete=True),
    _Rule((".yarnrc.yml",), "yarnrc", True, yarnrc_yml, on_delete=True),
    _Rule((".yarnrc",), "yarnrc", True, yarnrc, on_delete=True),
    _Rule(("**/.yarn/releases/", "**/.yarn/plugins/"), "yarnrc", True),
    _Rule(("*.code-workspace",), "workspace-tasks", True, code_workspace),
    _Rule((".tool-versions",), "tool-versions", False),
    _Rule(_MISE, "tool-versions", True, mise_toml),
    _Rule(_WRAPPER_PROPERTIES, "wrapper-url", True, wrapper_properties, encoding="latin-1"),
    _Rule(_WRAPPER_FILES, "wrapper-url", True),
    _Rule(("setup.py",), "python-build", False),
    _Rule(("pyproject.toml",), "python-build", False, pyproject),
)
