"""The base plan's checks: which make and just targets they run (`plan_targets`), read from
each check's argv."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from gatekeeper.gates.result.runs_later.common import repo_path

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
    paths = [repo_path(*folder, m) for m in makefiles]
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
        return repo_path(justfile), name
    return repo_path(folder, "justfile"), recipe
