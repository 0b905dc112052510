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
"""

from __future__ import annotations

import json
import posixpath
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict

from gatekeeper.gates.result.protected import matches
from gatekeeper.gates.result.versions import FileVersions

Kind = Literal[
    "npm-lifecycle", "npmrc", "yarnrc", "workspace-tasks", "tool-versions", "wrapper-url",
    "python-build", "make-target", "policy-listed",
]  # fmt: skip
KINDS: tuple[Kind, ...] = get_args(Kind)


class RunsLater(BaseModel):
    """One change that runs later outside the sandbox."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    kind: Kind
    what: str
    automatic: bool  # runs without a human action (install, checkout, wrapper start)


class _Unreadable(Exception):
    """A side that cannot be read as the format its name claims."""


_T = TypeVar("_T")
_MAX_WHAT = 120
_Said = Iterator[tuple[str, bool]]  # (what, automatic) from one reader
_Hits = Iterator[RunsLater]
_Reader = Callable[[str | None, str], _Said]


def runs_later(
    files: Sequence[FileVersions],
    *,
    plan_targets: Sequence[tuple[str, str]] = (),
    extra_globs: Sequence[str] = (),
) -> tuple[RunsLater, ...]:
    """Every runs-later change in `files`, sorted by (path, kind, what), one entry each."""
    changed = [f for f in files if _is_change(f)]
    hits: list[RunsLater] = []
    for f in files:
        hits.extend(_path_hits(f) if f.deleted or _is_change(f) else ())
    for f in changed:
        pattern = matches(f.path, extra_globs)
        if pattern is not None:
            hits.append(_hit(f.path, "policy-listed", f"listed by policy pattern {pattern}", True))
    hits.extend(_backend_hits(files, changed))
    hits.extend(_script_hits(files, changed, plan_targets))
    return _settle(hits)


def _is_change(f: FileVersions) -> bool:
    """Added or modified (deletions run nothing); equal bytes are context only."""
    if f.deleted:
        return False
    return f.base_oversize or f.candidate_oversize or f.base != f.candidate


def _hit(path: str, kind: Kind, what: str, automatic: bool) -> RunsLater:
    return RunsLater(path=path, kind=kind, what=_one_line(what), automatic=automatic)


def _one_line(text: str) -> str:
    """`what` holds names from the candidate's files: one printable line, kept short."""
    flat = "".join(ch if ch.isprintable() else " " for ch in text)
    return flat if len(flat) <= _MAX_WHAT else f"{flat[: _MAX_WHAT - 3]}..."


def _settle(hits: Iterable[RunsLater]) -> tuple[RunsLater, ...]:
    """One entry per (path, kind, what), automatic if any reading said so, sorted."""
    merged: dict[tuple[str, Kind, str], bool] = {}
    for h in hits:
        key = (h.path, h.kind, h.what)
        merged[key] = merged.get(key, False) or h.automatic
    return tuple(_hit(p, k, w, a) for (p, k, w), a in sorted(merged.items()))


def _name(path: str) -> str:
    return posixpath.basename(path)


def _decode(data: bytes | None, oversize: bool, encoding: str) -> str | None:
    if data is None or oversize:
        return None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        return None


def _pair(parse: Callable[[str | None], _T], base: str | None, cand: str) -> tuple[_T, _T]:
    """Both sides parsed (a parser reads None, an absent side, as empty); the candidate must
    parse, an unreadable base reads as absent (everything on the candidate is added)."""
    c = parse(cand)
    try:
        return parse(base), c
    except _Unreadable:
        return parse(None), c


# --- path classes -----------------------------------------------------------------------


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
            return [_hit(f.path, self.kind, f"{_name(f.path)} {verb}", self.automatic)]
        base = _decode(f.base, f.base_oversize, self.encoding)
        cand = "" if f.deleted else _decode(f.candidate, f.candidate_oversize, self.encoding)
        try:
            if cand is None:
                raise _Unreadable
            return [_hit(f.path, self.kind, w, a) for w, a in self.read(base, cand)]
        except _Unreadable:
            what = f"{_name(f.path)} could not be parsed"
            return [_hit(f.path, self.kind, what, self.automatic)]


def _path_hits(f: FileVersions) -> list[RunsLater]:
    hits: list[RunsLater] = []
    for rule in _RULES:
        if matches(f.path, rule.globs) is not None and (rule.on_delete or not f.deleted):
            hits.extend(rule.apply(f))
    return hits


def _key_changes(
    b: Mapping[str, object], c: Mapping[str, object], label: str = "", new: str = "set"
) -> Iterator[tuple[str, str]]:
    """(key, what) for each key the candidate adds (`new`) or changes."""
    for key in sorted(c):
        if c[key] != b.get(key):
            yield key, f"{label}{key} {'changed' if key in b else new}"


def _unguarded(b: Mapping[str, str], c: Mapping[str, str], key: str, guard: str) -> _Said:
    """A switch that stops scripts (`guard` its value) set otherwise, or removed."""
    bv, cv = (_switch(side.get(key)) for side in (b, c))
    if cv != bv and cv != guard and (cv is not None or bv == guard):
        yield (f"{key} unset" if cv is None else f"{key} set to {cv}"), True


def _switch(value: str | None) -> str | None:
    return None if value is None else value.strip().strip("'\"").lower()


# npm: package.json, .npmrc


_LIFECYCLE = (
    "preinstall", "install", "postinstall", "prepare", "prepublish", "preprepare",
    "postprepare", "prepack", "postpack", "dependencies", "pnpm:devPreinstall",
)  # fmt: skip


def _json_object(text: str | None) -> dict[str, object]:
    if text is None:
        return {}
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise _Unreadable from e
    if not isinstance(doc, dict):
        raise _Unreadable
    return doc


def _scripts(doc: Mapping[str, object]) -> dict[str, object]:
    scripts = doc.get("scripts", {})
    if not isinstance(scripts, dict):
        raise _Unreadable
    return scripts


def _package_json(base: str | None, cand: str) -> _Said:
    b, c = _pair(_json_object, base, cand)
    cs = _scripts(c)
    try:
        bs = _scripts(b)
    except _Unreadable:
        bs = {}
    for key, _ in _key_changes(bs, cs):
        if key in _LIFECYCLE:
            yield f"{key} script {'changed' if key in bs else 'added'}", True


def _ini(text: str | None) -> dict[str, str]:
    """npm's ini: `key = value` (a bare key is true), `;`/`#` comments, sections flattened."""
    if text is None:
        return {}
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or (line.startswith("[") and line.endswith("]")):
            continue
        key, eq, value = line.partition("=")
        key = key.strip().lower().removesuffix("[]")
        out[key] = value.strip().strip("'\"") if eq else "true"
    return out


_NPMRC_AUTO = frozenset({
    "script-shell", "node-options", "onload-script", "init-module", "git", "shell", "node-gyp",
    "pnpmfile", "global-pnpmfile", "dangerously-allow-all-builds",
})  # fmt: skip
# Where installs come from: named, not automatic (a lockfile's integrity still pins them).
_REGISTRY_KEYS = frozenset({"registry", "replace-registry-host", "strict-ssl", "ca", "cafile"})


def _registry_key(key: str) -> bool:
    return key in _REGISTRY_KEYS or key.endswith(":registry")


def _npmrc(base: str | None, cand: str) -> _Said:
    b, c = _pair(_ini, base, cand)
    for key, what in _key_changes(b, c):
        if key in _NPMRC_AUTO or _registry_key(key):
            yield what, key in _NPMRC_AUTO
    yield from _unguarded(b, c, "ignore-scripts", "true")


# yarn: .yarnrc.yml (berry), .yarnrc (v1)

_YAML_KEY = re.compile(r"""(["']?)([\w.@/-]+)\1[ \t]*:(?:[ \t]+(.*))?""")
_YAML_ODD = re.compile(r"(?:^|[\s\[,{])[&*!]\S")  # anchors, aliases, tags: not read
_YARN_AUTO = frozenset({"yarnPath", "plugins", "injectEnvironmentFiles"})
_YARN_REGISTRY = frozenset({"npmRegistryServer", "npmScopes", "enableStrictSsl", "caFilePath"})


def _yaml_top(text: str | None) -> dict[str, str]:
    """Top-level `key: value` blocks (a key's line and its indented lines, as text); a
    repeated key keeps every block. Anything else is unreadable."""
    if text is None:
        return {}
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for n, raw in enumerate(text.splitlines()):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#") or (n == 0 and line == "---"):
            continue
        if _YAML_ODD.search(line):
            raise _Unreadable
        if line[0] in " \t" or line == "-" or line.startswith("- "):
            if current is None:
                raise _Unreadable
            current.append(line)
            continue
        m = _YAML_KEY.fullmatch(line)
        if m is None or m[2] == "<<":
            raise _Unreadable
        current = blocks.setdefault(m[2], [])
        current.append(m[3] or "")
    return {k: "\n".join(v) for k, v in blocks.items()}


def _yarnrc_yml(base: str | None, cand: str) -> _Said:
    b, c = _pair(_yaml_top, base, cand)
    for key, what in _key_changes(b, c):
        if key in _YARN_AUTO or key in _YARN_REGISTRY:
            yield what, key in _YARN_AUTO
    yield from _unguarded(b, c, "enableScripts", "false")


def _yarnrc_v1(text: str | None) -> dict[str, str]:
    """`key value` lines; `--install.ignore-scripts` reads as `ignore-scripts`."""
    if text is None:
        return {}
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        key = key.strip("'\"").lstrip("-").rpartition(".")[2] if "--" in key else key.strip("'\"")
        out[key.lower()] = value.strip().strip("'\"")
    return out


def _yarnrc(base: str | None, cand: str) -> _Said:
    b, c = _pair(_yarnrc_v1, base, cand)
    for key, what in _key_changes(b, c):
        if key in ("yarn-path", "script-shell") or _registry_key(key):
            yield what, not _registry_key(key)
    yield from _unguarded(b, c, "ignore-scripts", "true")


# VS Code: *.code-workspace


def _jsonc(text: str | None) -> dict[str, object]:
    """JSON with `//` and `/* */` comments and trailing commas, as VS Code reads it."""
    if text is None:
        return {}
    out: list[str] = []
    comma: int | None = None  # index in `out` of a comma not yet followed by a value
    i = 0
    while i < len(text):
        ch, two = text[i], text[i : i + 2]
        if ch == '"':
            end = _string_end(text, i)
            out.append(text[i:end])
            comma, i = None, end
            continue
        if two in ("//", "/*"):
            end = text.find("\n" if two == "//" else "*/", i + 2)
            if end < 0 and two == "/*":
                raise _Unreadable
            out.append(" ")
            i = len(text) if end < 0 else end + (1 if two == "//" else 2)
            continue
        if ch in "]}" and comma is not None:
            out[comma] = " "
        if not ch.isspace():
            comma = len(out) if ch == "," else None
        out.append(ch)
        i += 1
    return _json_object("".join(out))


def _string_end(text: str, start: int) -> int:
    """The index after the JSON string that opens at `start`."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i + 1
        else:
            i += 1
    raise _Unreadable


_WATCHED_SETTING = re.compile(r"task\..*|terminal\.integrated\..*|.*(?:path|executable)", re.I)


def _flat(value: object, prefix: str = "") -> dict[str, object]:
    """Settings by dotted key, nested objects spelled out; a `[language]` override reads as
    the settings it holds."""
    out: dict[str, object] = {}
    for key, v in value.items() if isinstance(value, dict) else ():
        name = prefix.rstrip(".") if key.startswith("[") else f"{prefix}{key}"
        if isinstance(v, dict):
            out.update(_flat(v, f"{name}." if name else ""))
        else:
            out[name or key] = v
    return out


def _folder_open(value: object) -> bool:
    """Any task, at any depth, with `runOptions.runOn` "folderOpen"."""
    if isinstance(value, list):
        return any(_folder_open(v) for v in value)
    if not isinstance(value, dict):
        return False
    run = value.get("runOptions")
    if isinstance(run, dict) and run.get("runOn") == "folderOpen":
        return True
    return any(_folder_open(v) for v in value.values())


def _workspace(base: str | None, cand: str) -> _Said:
    b, c = _pair(_jsonc, base, cand)
    if "tasks" in c and c["tasks"] != b.get("tasks"):
        # A folderOpen task runs its dependencies and the shared options too: any change
        # to the tasks while one exists runs on opening the folder.
        auto = _folder_open(c["tasks"])
        yield ("folderOpen task added or changed" if auto else "tasks changed"), auto
    bs, cs = _flat(b.get("settings")), _flat(c.get("settings"))
    for key in sorted(set(bs) | set(cs)):
        if bs.get(key) != cs.get(key) and _WATCHED_SETTING.fullmatch(key):
            yield f"setting {key} changed", False


# mise and asdf


def _toml(text: str | None) -> dict[str, object]:
    if text is None:
        return {}
    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError) as e:
        raise _Unreadable from e


def _table(doc: Mapping[str, object], *keys: str) -> dict[str, object]:
    """The table at `keys` ({} when absent); a value that is not a table reads as one entry."""
    value: object = doc
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    if value is None:
        return {}
    return value if isinstance(value, dict) else {"(value)": value}


def _env_directives(doc: Mapping[str, object]) -> dict[str, object]:
    """`env._.*` (`source`, `file`, `path`, `python`) across `[env]` and `[[env]]`."""
    env = doc.get("env")
    out: dict[str, list[object]] = {}
    for part in env if isinstance(env, list) else [env]:
        for key, value in _table({"env": part}, "env", "_").items():
            out.setdefault(key, []).append(value)
    return dict(out)


def _url_tools(doc: Mapping[str, object]) -> dict[str, object]:
    """Tools installed from a URL (a plugin's git repository, an asset)."""
    return {k: v for k, v in _table(doc, "tools").items() if "://" in k + json.dumps(v)}


def _exec_templates(value: object, at: str = "") -> set[tuple[str, str]]:
    """Strings whose template runs a command (`{{ exec(...) }}`) where mise renders them."""
    if isinstance(value, dict):
        return {x for k, v in value.items() for x in _exec_templates(v, f"{at}.{k}")}
    if isinstance(value, list):
        return {x for v in value for x in _exec_templates(v, at)}
    return {(at, value)} if isinstance(value, str) and "exec(" in value else set()


def _mise(base: str | None, cand: str) -> _Said:
    b, c = _pair(_toml, base, cand)
    for _, what in _key_changes(_table(b, "hooks"), _table(c, "hooks"), "hook ", "added"):
        yield what, True
    for _, what in _key_changes(_table(b, "tasks"), _table(c, "tasks"), "task ", "added"):
        yield what, False
    for _, what in _key_changes(_table(b, "plugins"), _table(c, "plugins"), "plugin ", "added"):
        yield what, False
    for _, what in _key_changes(_url_tools(b), _url_tools(c), "tool ", "added"):
        yield what, False
    for key, what in _key_changes(_env_directives(b), _env_directives(c), "env._.", "added"):
        yield what, key == "source"  # sourced by the shell on entering the directory
    if _exec_templates(c) - _exec_templates(b):
        yield "exec() template added", True


# Gradle and Maven wrappers

_PROP_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\(.)", re.S)
_PROP_LINE = re.compile(r"((?:\\.|[^=:\s\\])*)\s*[=:]?\s*(.*)", re.S)


def _unescape(text: str) -> str:
    simple = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    return _PROP_ESCAPE.sub(lambda m: chr(int(m[1], 16)) if m[1] else simple.get(m[2], m[2]), text)


def _properties(text: str | None) -> dict[str, str]:
    """Java properties: `key=value`, `key: value` or `key value`, backslash continuations."""
    if text is None:
        return {}
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if (len(line) - len(line.rstrip("\\"))) % 2:
            pending = line[:-1]
            continue
        pending = ""
        m = _PROP_LINE.fullmatch(line)
        if m is not None:
            out[_unescape(m[1])] = _unescape(m[2])
    return out


def _wrapper_properties(base: str | None, cand: str) -> _Said:
    b, c = _pair(_properties, base, cand)
    for key in sorted(set(b) | set(c)):
        if b.get(key) == c.get(key) or (key.endswith("Sha256Sum") and key not in b):
            continue  # a checksum added only narrows what may run
        yield f"{key} {'removed' if key not in c else 'changed' if key in b else 'set'}", True


# Python builds


def _pyproject(base: str | None, cand: str) -> _Said:
    b, c = _pair(_toml, base, cand)
    bb, cb = _table(b, "build-system"), _table(c, "build-system")
    for key in ("requires", "build-backend", "backend-path"):
        if bb.get(key) != cb.get(key):
            yield f"build-system {key} changed", False


def _backend_roots(f: FileVersions) -> Iterator[str]:
    """Where an in-tree build backend (`backend-path`) lives: `dir/module`, as a file stem
    and a package folder."""
    try:
        system = _table(
            _toml(_decode(f.candidate, f.candidate_oversize, "utf-8-sig")), "build-system"
        )
    except _Unreadable:
        return
    paths, backend = system.get("backend-path"), system.get("build-backend")
    if not isinstance(paths, list) or not isinstance(backend, str):
        return
    top = backend.partition(":")[0].partition(".")[0].strip()
    for p in paths:
        root = _repo_path(posixpath.dirname(f.path), p, top) if isinstance(p, str) else None
        if top and root is not None:
            yield root


def _backend_hits(files: Sequence[FileVersions], changed: Sequence[FileVersions]) -> _Hits:
    roots = {r for f in files if _name(f.path) == "pyproject.toml" for r in _backend_roots(f)}
    for f in changed:
        if any(f.path == f"{r}.py" or f.path.startswith(f"{r}/") for r in roots):
            yield _hit(f.path, "python-build", "build backend changed", False)


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
    _Rule(("package.json",), "npm-lifecycle", True, _package_json),
    # npm runs `node-gyp rebuild` for a binding.gyp; pnpm loads .pnpmfile.* on install
    _Rule(("binding.gyp", ".pnpmfile.cjs", ".pnpmfile.mjs"), "npm-lifecycle", True),
    _Rule((".npmrc",), "npmrc", True, _npmrc, on_delete=True),
    _Rule((".yarnrc.yml",), "yarnrc", True, _yarnrc_yml, on_delete=True),
    _Rule((".yarnrc",), "yarnrc", True, _yarnrc, on_delete=True),
    _Rule(("**/.yarn/releases/", "**/.yarn/plugins/"), "yarnrc", True),
    _Rule(("*.code-workspace",), "workspace-tasks", True, _workspace),
    _Rule((".tool-versions",), "tool-versions", False),
    _Rule(_MISE, "tool-versions", True, _mise),
    _Rule(_WRAPPER_PROPERTIES, "wrapper-url", True, _wrapper_properties, encoding="latin-1"),
    _Rule(_WRAPPER_FILES, "wrapper-url", True),
    _Rule(("setup.py",), "python-build", False),
    _Rule(("pyproject.toml",), "python-build", False, _pyproject),
)


# make and just: the targets the base plan's checks run


@dataclass
class _Script:
    """A makefile or justfile read as rules: each target's header lines (rule line,
    attributes) and body (recipe lines), its prerequisites; the top-level lines, the
    include lines and the paths they name; the default target. `opaque`: a target or
    prerequisite name could not be resolved, so every rule counts as reached."""

    headers: dict[str, list[str]] = field(default_factory=dict)
    bodies: dict[str, list[str]] = field(default_factory=dict)
    deps: dict[str, list[str]] = field(default_factory=dict)
    top: list[str] = field(default_factory=list)
    include_lines: list[str] = field(default_factory=list)
    includes: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    first: str | None = None
    opaque: bool = False

    def rule(self, target: str, header: str, deps: Iterable[str]) -> None:
        self.headers.setdefault(target, []).append(header)
        self.deps.setdefault(target, []).extend(deps)

    def recipe(self, targets: Iterable[str], line: str) -> None:
        for t in targets:
            self.bodies.setdefault(t, []).append(line)


_MAX_EXPANSIONS = 10_000  # variable references replaced in one file, in all
_MAX_EXPANDED = 1 << 16  # characters of one expanded line
_MAX_REACHED = 4096
_MAKE_ASSIGN = re.compile(
    r"(?:(?:export|override|private)\s+)*([^\s:#=]+)\s*(:::=|::=|:=|\?=|\+=|!=|=)(.*)", re.S
)
_MAKE_DEFINE = re.compile(r"(?:(?:export|override|private)\s+)*define\s+(\S+).*")
_MAKE_REF = re.compile(r"\$(?:\(([^()$]*)\)|\{([^{}$]*)\}|([^({$]))")
_MAKE_VAR = re.compile(r"[^\s:#=,]+")
_MAKE_EVAL = re.compile(r"\$[({]eval\s")
_MAKE_COMMENT = re.compile(r"(?<!\\)#.*")
_MAKE_SPECIAL = re.compile(r"\.[A-Z_]+")
_MAKE_INCLUDE = frozenset({"include", "-include", "sinclude"})
_MAKE_CONDITIONAL = {"ifeq": 1, "ifneq": 1, "ifdef": 1, "ifndef": 1, "endif": -1}
_MAKE_DIRECTIVES = frozenset({
    "else", "export", "unexport", "override", "private", "undefine", "vpath", "load", "-load",
})  # fmt: skip


def _logical_lines(text: str) -> list[str]:
    """Physical lines joined where one ends in an odd number of backslashes."""
    out: list[str] = []
    pending = ""
    for line in text.splitlines():
        if (len(line) - len(line.rstrip("\\"))) % 2:
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return [*out, pending] if pending else out


def _split_top(text: str, sep: str) -> tuple[str, str, str]:
    """`text` split at the first `sep` outside `$(...)`/`${...}`."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch in "({") - (ch in ")}")
        if ch == sep and depth == 0:
            return text[:i], sep, text[i + 1 :]
    return text, "", ""


def _stem(pattern: str, name: str) -> str | None:
    pre, pct, suf = pattern.partition("%")
    fits = len(name) >= len(pre) + len(suf) and name.startswith(pre) and name.endswith(suf)
    return name[len(pre) : len(name) - len(suf)] if pct and fits else None


class _MakeReader:
    """GNU make's rules, variables and includes, line by line, never evaluated."""

    def __init__(self) -> None:
        self.s = _Script()
        self.vars: dict[str, str | None] = {}  # None: not known without running make
        self.current: list[str] = []  # the targets recipe lines belong to
        self.define = 0  # nesting depth inside `define ... endef`
        self.conditional = 0
        self.budget = _MAX_EXPANSIONS

    def read(self, text: str) -> _Script:
        for line in _logical_lines(text):
            self.line(line)
        return self.s

    def line(self, line: str) -> None:
        if self.define:
            self.in_define(line)
        elif line.startswith("\t"):
            if self.current:
                self.s.recipe(self.current, line.rstrip())
            else:
                self.s.top.append(line.strip())
        elif code := _MAKE_COMMENT.sub("", line).strip():
            self.code(code)

    def code(self, code: str) -> None:
        if code.startswith(".RECIPEPREFIX"):
            raise _Unreadable  # recipes no longer start with a tab
        word = code.split()[0]
        if word in _MAKE_CONDITIONAL:
            self.conditional += _MAKE_CONDITIONAL[word]
            self.s.top.append(code)
        elif define := _MAKE_DEFINE.fullmatch(code):
            self.vars[define[1]] = None
            self.define = 1
            self.s.top.append(code)
        elif assign := _MAKE_ASSIGN.fullmatch(code):
            self.assign(assign[1], assign[2], assign[3].strip())
            self.s.top.append(code)
        elif word in _MAKE_INCLUDE:
            self.include(code)
        elif word in _MAKE_DIRECTIVES:
            self.s.top.append(code)
        else:
            self.rule(code)

    def in_define(self, line: str) -> None:
        word = (line.split() or [""])[0]
        self.define += (word == "define") - (word == "endef")
        self.s.top.append(line.rstrip())

    def assign(self, name: str, op: str, value: str) -> None:
        self.current = []
        prior = self.vars.get(name, "")
        if self.conditional or op == "!=" or "$" in name:
            self.vars[name] = None  # depends on a branch or a shell command
        elif op == "+=":
            self.vars[name] = None if prior is None else f"{prior} {value}".strip()
        elif op == "?=":
            self.vars.setdefault(name, value)
        elif op == "=":
            self.vars[name] = value
        else:  # `:=` and kin expand once, here
            expanded, known = self.expand(value)
            self.vars[name] = expanded if known else None

    def include(self, code: str) -> None:
        self.current = []
        self.s.include_lines.append(code)
        names, known = self.words(code.split(None, 1)[1] if " " in code else "")
        self.s.includes.extend(names if known else ())

    def words(self, text: str) -> tuple[list[str], bool]:
        expanded, known = self.expand(text)
        return [w for w in expanded.split() if w != "|"], known

    def expand(self, text: str) -> tuple[str, bool]:
        """References replaced by their values (an undefined variable is empty); False when
        a function call, a computed name or an unknown value is left, or the budget ends."""
        text = text.replace("$$", "\0")
        while (m := _MAKE_REF.search(text)) is not None:
            name = next(g for g in m.groups() if g is not None)
            value = self.vars.get(name, "")
            self.budget -= 1
            if value is None or not _MAKE_VAR.fullmatch(name) or self.budget < 0:
                return text, False
            text = text[: m.start()] + value.replace("$$", "\0") + text[m.end() :]
            if len(text) > _MAX_EXPANDED:
                return text, False
        return text.replace("\0", "$"), "$" not in text

    def rule(self, code: str) -> None:
        head, colon, rest = _split_top(code, ":")
        targets, known = self.words(head.rstrip("&"))
        if not colon or not targets:
            self.current = []
            self.s.top.append(code)
            # rules made by $(eval ...) are not read: any of them may be the planned one's
            self.s.opaque = self.s.opaque or bool(_MAKE_EVAL.search(code))
            return
        if targets[0] == ".PHONY" or _MAKE_SPECIAL.fullmatch(targets[0]):
            self.current = []
            self.s.top.extend(() if targets[0] == ".PHONY" else (code,))
            return
        prereqs, _, inline = _split_top(rest.removeprefix(":"), ";")
        self.rule_of(targets, code, prereqs, known)
        if inline.strip():
            self.s.recipe(targets, inline.strip())

    def rule_of(self, targets: list[str], code: str, prereqs: str, known: bool) -> None:
        if _MAKE_ASSIGN.fullmatch(prereqs.strip()):
            prereqs = ""  # a target-specific variable: part of the rule, no prerequisites
        elif self.s.first is None and (not targets[0].startswith(".") or "/" in targets[0]):
            self.s.first = None if "%" in targets[0] else targets[0]
        pattern, static, rest = _split_top(prereqs, ":")
        deps, deps_known = self.words(rest if static else prereqs)
        self.s.opaque = self.s.opaque or not (known and deps_known)
        for t in targets:
            stem = _stem(pattern.strip(), t) if static else None
            self.s.rule(t, code, [d.replace("%", stem) for d in deps] if stem else deps)
        self.current = targets


def _parse_make(text: str | None) -> _Script:
    return _MakeReader().read(text or "")


_JUST_HEADER = re.compile(r"@?([A-Za-z_][\w-]*)(?![\w-])([^:]*):(?!=)(.*)")
_JUST_ALIAS = re.compile(r"alias\s+([A-Za-z_][\w-]*)\s*:=\s*([A-Za-z_][\w-]*)\s*")
_JUST_IMPORT = re.compile(r"(import|mod)\??\s+(.*)")
_JUST_STRING = re.compile(r"'[^']*'|\"(?:\\.|[^\"\\])*\"")
_IDENT = re.compile(r"[A-Za-z_][\w-]*")


def _parse_just(text: str | None) -> _Script:
    """just's recipes (header line, attributes, indented body), aliases, imports and the
    other top-level lines (settings, variables: backticks run whenever just loads)."""
    s = _Script()
    attrs: list[str] = []
    current: str | None = None
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        if not line.strip() or line.startswith("#"):
            continue
        if line[0] in " \t":
            if current is not None:
                s.recipe([current], line)
            else:
                s.top.append(line)
        elif line.startswith("["):
            attrs.append(line)
        else:
            current = _just_line(s, line, attrs)
            attrs = []
    return s


def _just_line(s: _Script, line: str, attrs: list[str]) -> str | None:
    """One top-level line read into `s`; the recipe it opens, if it does."""
    header = _JUST_HEADER.fullmatch(line)
    if header is None:
        imported = _JUST_IMPORT.fullmatch(line)
        if imported is not None:
            s.include_lines.append(line)
            s.includes.extend(_just_imports(imported[1], imported[2]))
            return None
        if alias := _JUST_ALIAS.fullmatch(line):
            s.aliases[alias[1]] = alias[2]
        s.top.append(line)
        return None
    name = header[1]
    s.rule(name, "\n".join([*attrs, line]), _IDENT.findall(_JUST_STRING.sub(" ", header[3])))
    if s.first is None or "default" in _IDENT.findall(" ".join(attrs)):
        s.first = name
    return name


def _just_imports(keyword: str, rest: str) -> list[str]:
    paths = [q[1:-1] for q in _JUST_STRING.findall(rest)]
    if keyword == "import" or paths:
        return paths
    name = (_IDENT.findall(rest) or [""])[0]
    return [f"{name}.just", f"{name}/mod.just", f"{name}/justfile", f"{name}/.justfile"]


def _reached(s: _Script, names: Iterable[str]) -> set[str]:
    """`names` and their prerequisites, transitively, through explicit and pattern rules."""
    if s.opaque:
        return set(s.headers)
    patterns = [t for t in s.headers if "%" in t]
    seen: set[str] = set()
    todo = list(names)
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        if len(seen) > _MAX_REACHED:
            return seen | set(s.headers)
        seen.add(t)
        todo.extend(s.deps.get(t, ()))
        for p in patterns:
            stem = _stem(p, t) if "%" not in t else None
            if stem is not None:
                seen.add(p)
                todo.extend(d.replace("%", stem) for d in s.deps.get(p, ()))
    return seen


def _script_changes(b: _Script, c: _Script, targets: Iterable[str]) -> Iterator[str]:
    """What changed in the planned targets, their prerequisites and the top level."""
    wanted = set(targets)
    names = {c.aliases.get(t, t) for t in wanted if t}
    if "" in wanted:
        names.update(() if c.first is None else (c.first,))
        if b.first != c.first:
            yield "default target changed"
    for t in sorted(_reached(c, names)):
        if b.headers.get(t, []) != c.headers.get(t, []):
            yield f"target {t}'s prerequisites changed"
        if b.bodies.get(t, []) != c.bodies.get(t, []):
            yield f"target {t}'s recipe changed"
    added = set(c.include_lines) - set(b.include_lines)
    if added:
        yield "include added"
    if c.top != b.top or (not added and c.include_lines != b.include_lines):
        yield "top-level line changed"


_MAKEFILES = frozenset({"Makefile", "makefile", "GNUmakefile"})
_JUSTFILES = frozenset({"justfile", ".justfile"})
_FRAGMENTS = {False: ("*.mk", "*.mak"), True: ("*.just",)}  # by "is just"


def _is_just(plan_path: str) -> bool:
    name = _name(plan_path).lower()
    return name in _JUSTFILES or name.endswith(".just")


def _names(plan_path: str, path: str) -> bool:
    """`path` is the file `plan_path` names; a default name stands for each name the tool
    looks for in that folder."""
    (pd, pn), (d, n) = posixpath.split(plan_path), posixpath.split(path)
    if plan_path == path or pd != d:
        return plan_path == path
    return (pn == "Makefile" and n in _MAKEFILES) or (pn == "justfile" and n.lower() in _JUSTFILES)


def _planned_file(
    f: FileVersions, just: bool, targets: Iterable[str]
) -> tuple[list[RunsLater], _Script | None]:
    """A planned makefile's or justfile's changes, and its candidate reading (for includes)."""
    parse = _parse_just if just else _parse_make
    cand = _decode(f.candidate, f.candidate_oversize, "latin-1")  # compared, never shown
    try:
        if cand is None:
            raise _Unreadable
        b, c = _pair(parse, _decode(f.base, f.base_oversize, "latin-1"), cand)
    except _Unreadable:
        what = f"{_name(f.path)} could not be parsed"
        return [_hit(f.path, "make-target", what, False)] if _is_change(f) else [], None
    hits = [_hit(f.path, "make-target", w, False) for w in _script_changes(b, c, targets)]
    return hits, c


def _script_hits(
    files: Sequence[FileVersions],
    changed: Sequence[FileVersions],
    plan: Sequence[tuple[str, str]],
) -> _Hits:
    wanted: dict[str, set[str]] = {}
    for plan_path, target in plan:
        wanted.setdefault(plan_path, set()).add(target)
    planned: set[str] = set()
    included: set[str | None] = set()
    for f in files:
        for plan_path, targets in wanted.items():
            if f.deleted or not _names(plan_path, f.path):
                continue
            planned.add(f.path)
            hits, script = _planned_file(f, _is_just(plan_path), targets)
            yield from hits
            folder = posixpath.dirname(f.path)
            included.update(_repo_path(folder, p) for p in (script.includes if script else ()))
    kinds = {_is_just(p) for p in wanted}
    fragments = tuple(g for just in kinds for g in _FRAGMENTS[just])
    for f in changed:
        if f.path not in planned and (f.path in included or matches(f.path, fragments)):
            yield _hit(f.path, "make-target", "included file changed", False)


def _repo_path(*parts: str) -> str | None:
    """A path relative to the repository root, or None when it leaves it."""
    path = posixpath.normpath(posixpath.join(*parts)) if parts else "."
    return None if path.startswith(("/", "../")) or path == ".." else path


# the base plan's checks: which make and just targets they run

_MAKE_SHORT_ARG = frozenset("CfIoW")
_MAKE_LONG_ARG = frozenset({
    "directory", "file", "makefile", "include-dir", "old-file", "assume-old", "what-if",
    "new-file", "assume-new", "eval",
})  # fmt: skip
_MAKE_LONG_NUMBER = frozenset({"jobs", "load-average", "max-load"})
_JUST_ARG = frozenset({
    "-f", "--justfile", "-d", "--working-directory", "--shell", "--shell-arg",
    "--dotenv-filename", "--dotenv-path", "-E", "--color", "--dump-format", "--list-heading",
    "--list-prefix", "--chooser", "--command-color", "--timestamp-format", "--tempdir",
    "--alias-style",
})  # fmt: skip
_JUST_NO_RECIPE = frozenset({
    "-l", "--list", "--summary", "--dump", "--evaluate", "--variables", "-s", "--show",
    "--fmt", "-e", "--edit", "--init", "--completions", "--choose", "--groups", "--man",
    "--changelog", "-c", "--command", "-h", "--help", "-V", "--version",
})  # fmt: skip


def plan_targets(cmds: Sequence[Sequence[str]]) -> tuple[tuple[str, str], ...]:
    """(makefile or justfile path, target) for each `make`/`gmake`/`just` check argv, in
    order, once each; "" is the default target, `Makefile`/`justfile` the default file."""
    found: list[tuple[str, str]] = []
    for cmd in cmds:
        argv = _without_env(list(cmd))
        tool = posixpath.basename(argv[0]) if argv else ""
        if tool in ("make", "gmake"):
            found.extend(_make_plan(argv[1:]))
        elif tool == "just":
            found.extend(_just_plan(argv[1:]))
    return tuple(dict.fromkeys(found))


def _without_env(argv: list[str]) -> list[str]:
    """The command `env [-i] [-u NAME] [NAME=VALUE]... cmd` runs."""
    if not argv or posixpath.basename(argv[0]) != "env":
        return argv
    i = 1
    while i < len(argv) and (argv[i].startswith("-") or "=" in argv[i]):
        i += 2 if argv[i] in ("-u", "--unset", "-C", "--chdir") else 1
    return argv[i:]


def _numeric(arg: str) -> bool:
    return arg.replace(".", "", 1).isdigit()


def _make_short(cluster: str, following: str | None) -> tuple[list[tuple[str, str]], int]:
    """Options in one `-xyz` cluster and how many following arguments they took."""
    for j, ch in enumerate(cluster):
        rest = cluster[j + 1 :]
        if ch in _MAKE_SHORT_ARG:
            if rest or following is None:
                return [(ch, rest)], 0
            return [(ch, following)], 1
        if ch in "jl":  # an optional number, attached or next
            taken = not rest and following is not None and _numeric(following)
            return [], int(taken)
    return [], 0


def _make_options(args: Sequence[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """GNU make's options (name, value) and its targets (variable assignments dropped)."""
    opts: list[tuple[str, str]] = []
    targets: list[str] = []
    i = 0
    while i < len(args):
        a, following = args[i], (args[i + 1] if i + 1 < len(args) else None)
        i += 1
        if a == "--":
            targets.extend(x for x in args[i:] if "=" not in x)
            break
        if a.startswith("--"):
            name, eq, value = a[2:].partition("=")
            takes = not eq and following is not None
            if takes and (
                name in _MAKE_LONG_ARG or (name in _MAKE_LONG_NUMBER and _numeric(following or ""))
            ):
                value, i = following or "", i + 1
            opts.append((name, value))
        elif a.startswith("-") and a != "-":
            got, used = _make_short(a[1:], following)
            opts.extend(got)
            i += used
        elif "=" not in a:
            targets.append(a)
    return opts, targets


def _make_plan(args: Sequence[str]) -> list[tuple[str, str]]:
    opts, targets = _make_options(args)
    folder = [v for k, v in opts if k in ("C", "directory") and v]
    makefiles = [v for k, v in opts if k in ("f", "file", "makefile") and v] or ["Makefile"]
    paths = [_repo_path(*folder, m) for m in makefiles]
    return [(p, t) for p in paths if p is not None for t in targets or [""]]


def _just_plan(args: Sequence[str]) -> list[tuple[str, str]]:
    justfile = "justfile"
    names: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        opt, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        if opt in _JUST_NO_RECIPE:
            return []
        if opt in _JUST_ARG and not eq:
            value, i = (args[i] if i < len(args) else ""), i + 1
        if opt in ("-f", "--justfile"):
            justfile = value
        elif opt == "--set":
            i += 0 if eq else 2
        elif not a.startswith("-") and not ("=" in a and not names):
            names.append(a)
    pairs = [_just_recipe(justfile, n) for n in names or [""]]
    return [(path, recipe) for path, recipe in pairs if path is not None]


def _just_recipe(justfile: str, name: str) -> tuple[str | None, str]:
    """`just dir/recipe` runs `recipe` from `dir`'s justfile."""
    folder, slash, recipe = name.rpartition("/")
    if not slash or justfile != "justfile":
        return _repo_path(justfile), name
    return _repo_path(folder, "justfile"), recipe
