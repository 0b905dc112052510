"""GNU make read as a `Script`: rules, variables and includes, line by line, never
evaluated."""

from __future__ import annotations

import re

from gatekeeper.gates.result.runs_later.common import Unreadable
from gatekeeper.gates.result.runs_later.script import Script, stem_of

_MAX_EXPANSIONS = 10_000  # variable references replaced in one file, in all
_MAX_EXPANDED = 1 << 16  # characters of one expanded line
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


class _MakeReader:
    """GNU make's rules, variables and includes, line by line, never evaluated."""

    def __init__(self) -> None:
        self.s = Script()
        self.vars: dict[str, str | None] = {}  # None: not known without running make
        self.current: list[str] = []  # the targets recipe lines belong to
        self.define = 0  # nesting depth inside `define ... endef`
        self.conditional = 0
        self.budget = _MAX_EXPANSIONS

    def read(self, text: str) -> Script:
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
            raise Unreadable  # recipes no longer start with a tab
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
            stem = stem_of(pattern.strip(), t) if static else None
            self.s.rule(t, code, [d.replace("%", stem) for d in deps] if stem else deps)
        self.current = targets


def parse_make(text: str | None) -> Script:
    return _MakeReader().read(text or "")
