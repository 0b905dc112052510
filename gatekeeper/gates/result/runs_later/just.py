"""just read as a `Script`: recipes, aliases, imports and the other top-level lines."""

from __future__ import annotations

import re

from gatekeeper.gates.result.runs_later.script import Script

_JUST_HEADER = re.compile(r"@?([A-Za-z_][\w-]*)(?![\w-])([^:]*):(?!=)(.*)")
_JUST_ALIAS = re.compile(r"alias\s+([A-Za-z_][\w-]*)\s*:=\s*([A-Za-z_][\w-]*)\s*")
_JUST_IMPORT = re.compile(r"(import|mod)\??\s+(.*)")
_JUST_STRING = re.compile(r"'[^']*'|\"(?:\\.|[^\"\\])*\"")
_IDENT = re.compile(r"[A-Za-z_][\w-]*")


def parse_just(text: str | None) -> Script:
    """just's recipes (header line, attributes, indented body), aliases, imports and the
    other top-level lines (settings, variables: backticks run whenever just loads)."""
    s = Script()
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


def _just_line(s: Script, line: str, attrs: list[str]) -> str | None:
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
