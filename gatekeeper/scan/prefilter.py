"""A cheap exact selection of the lines on which some detect-secrets plugin could report.

detect-secrets spends most of its time dispatching every plugin through its
dependency injection for every line. A line on which no plugin finds any
candidate yields no finding whatever the filters say, so only the selected
lines go through the full pipeline, and none is lost. The selection may keep
more lines than needed, never fewer:

- plain regex plugins: their own denylist patterns, run once over the item's
  lines joined by newlines in MULTILINE mode (so `^`/`$` still match at line
  ends) and marking every line a match touches; any match the pattern has on
  a line alone is found there or overlapped by a match that touches the line;
- the keyword plugin: only lines holding one of its keywords (every one of its
  patterns contains the keyword alternation) are given to its analyze_line;
- the high-entropy plugins: only lines holding a quoted candidate long enough
  to pass the entropy limit (entropy <= log2(length)) are given to analyze_line;
- the JWT plugin: only lines its own denylist matches (it filters those);
- any other plugin: its analyze_line on every line.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from typing import Any

from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import DENYLIST, KeywordDetector

Lines = Sequence[tuple[int, str]]
# The non-ASCII characters a case-insensitive pattern matches with an ASCII letter (dotted
# and dotless i, long s, Kelvin sign: tests/unit/scan pins the list against every code point).
_ASCII_FOLDS = "\u0130\u0131\u017f\u212a"
_ASCII_FOLDS_TABLE = str.maketrans(_ASCII_FOLDS, "iisk")
_PLAIN = re.compile(r"[ -~]+")  # printable ASCII


@dataclass(frozen=True)
class Guard:
    """A line passes if any of these patterns matches on it: the line is worth a closer look.

    `literal`: each pattern is one escaped literal without a newline, so a match lies
    within one line and one match per line is enough to know the line passes; `strings`
    are those literals as written, and `ignore_case` whether the patterns ignore case.
    """

    patterns: tuple[re.Pattern[str], ...]
    literal: bool = True
    strings: tuple[str, ...] = ()
    ignore_case: bool = False


class Prefilter:
    """Built once per scan from the active plugins; called per item: the lines to analyse."""

    def __init__(self, plugins: Sequence[Any]) -> None:
        self.regexes: list[tuple[re.Pattern[str], list[Guard]]] = []
        self.checked: list[tuple[Guard | None, Any]] = []  # (necessary guard, plugin)
        self.entropy: list[Any] = []
        self.others: list[Any] = []
        for plugin in plugins:
            self._add(plugin)
        self.quote = _guard(['"', "'"], 0)

    def _add(self, plugin: Any) -> None:
        if type(plugin).analyze_string is RegexBasedDetector.analyze_string:
            for pattern in plugin.denylist:
                joined = re.compile(pattern.pattern, pattern.flags | re.MULTILINE)
                self.regexes.append((joined, _literal_guards(joined)))
        elif isinstance(plugin, KeywordDetector):
            self.checked.append((_keyword_guard(DENYLIST), plugin))
        elif isinstance(plugin, JwtTokenDetector):
            jwt = [re.compile(p.pattern, p.flags | re.MULTILINE) for p in plugin.denylist]
            self.checked.append((Guard(tuple(jwt), literal=False), plugin))
        elif isinstance(plugin, HighEntropyStringsPlugin):
            self.entropy.append(plugin)
        else:
            self.others.append(plugin)

    def __call__(self, path: str, lines: Lines) -> list[tuple[int, str]]:
        texts = [text.rstrip() for _, text in lines]
        everything = range(len(texts))
        hit = bytearray(len(texts))
        if "\n" not in "".join(texts):
            _Marking(self, path, lines, _Joined(texts, everything), hit).run()
        else:  # not lines after all: take each alone
            for i in everything:
                _Marking(self, path, lines, _Joined(texts, [i]), hit).run()
        return [line for line, text, h in zip(lines, texts, hit, strict=True) if h and text.strip()]


class _Marking:
    """One pass over a group of lines: sets hit[i] for each line some plugin may report."""

    def __init__(
        self, pre: Prefilter, path: str, lines: Lines, group: _Joined, hit: bytearray
    ) -> None:
        self.pre, self.path, self.lines, self.group, self.hit = pre, path, lines, group, hit
        self.found: dict[Guard, list[int]] = {}

    def run(self) -> None:
        self._regexes()
        self._checked()
        self._entropy()
        for plugin in self.pre.others:
            self._analyze_rows(plugin, self.group.rows)

    def rows_of(self, guard: Guard) -> list[int]:
        """Lines of the group with a match of one of the guard's patterns (cached)."""
        if guard not in self.found:
            self.found[guard] = _guarded(self.group, guard)
        return self.found[guard]

    def analyze(self, plugin: Any, i: int) -> bool:
        number = self.lines[i][0]
        text = self.group.texts[i]
        return bool(plugin.analyze_line(filename=self.path, line=text, line_number=number))

    def _analyze_rows(self, plugin: Any, rows: Sequence[int]) -> None:
        for i in rows:
            if not self.hit[i] and self.analyze(plugin, i):
                self.hit[i] = 1

    def _regexes(self) -> None:
        for pattern, guards in self.pre.regexes:
            part = self.group
            for n, guard in enumerate(guards):  # each is necessary: a line must pass them all
                rows = self.rows_of(guard) if n == 0 else _guarded(part, guard)
                part = _Joined(self.group.texts, rows)
            for i in part.touched(pattern):
                self.hit[i] = 1

    def _checked(self) -> None:
        for guard, plugin in self.pre.checked:
            rows = self.rows_of(guard) if guard is not None else self.group.rows
            self._analyze_rows(plugin, rows)

    def _entropy(self) -> None:
        for plugin in self.pre.entropy:
            self._analyze_rows(plugin, self._long_quoted(plugin))

    def _long_quoted(self, plugin: Any) -> list[int]:
        """The lines with a quoted candidate of `plugin` long enough to pass its limit.

        Its own pattern runs once over the joined lines: a quote and the charset hold no
        newline, so each match lies in one line and is the match that line alone gives."""
        bound = 2**plugin.entropy_limit
        if type(plugin).analyze_string is HighEntropyStringsPlugin.analyze_string:
            group = self.group
            return sorted({group.rows[bisect_right(group.starts, m.start()) - 1]
                           for m in plugin.regex.finditer(group.text)
                           if len(m.group(2)) + 1 > bound})  # fmt: skip
        texts = self.group.texts
        return [i for i in self.rows_of(self.pre.quote)
                if any(len(c) + 1 > bound for c in plugin.analyze_string(texts[i]))]  # fmt: skip


class _Joined:
    """Some lines joined by newlines, to run a MULTILINE pattern over them all at once.

    Every match a pattern has on one of those lines alone is found, or overlapped by a
    found match that touches the same line: `^`, `$`, lookarounds and `\\b` see a newline
    at a line's ends where the line alone has its start or end, and read it the same way.
    """

    def __init__(self, texts: Sequence[str], rows: Sequence[int]) -> None:
        self.texts = texts
        self.rows = rows
        chosen = texts if rows == range(len(texts)) else [texts[i] for i in rows]
        self.starts = list(accumulate((len(t) + 1 for t in chosen), initial=0))[:-1]
        self.text = "\n".join(chosen)

    def touched(self, pattern: re.Pattern[str]) -> list[int]:
        """The rows that some match of `pattern` touches."""
        touched: set[int] = set()
        for m in pattern.finditer(self.text):
            first = bisect_right(self.starts, m.start()) - 1
            last = bisect_right(self.starts, max(m.start(), m.end() - 1)) - 1
            touched.update(self.rows[first : last + 1])
        return sorted(touched)

    @cached_property
    def folded(self) -> str:
        """The text with every character that a case-insensitive pattern could match with
        an ASCII letter as that letter in lower case, and any other non-ASCII one as `?`:
        one character for one, so offsets stay. An ASCII string found ignoring case in the
        text is found in this as it is in lower case (it may be found in more places)."""
        text = self.text
        if not text.isascii():
            if any(c in text for c in _ASCII_FOLDS):
                text = text.translate(_ASCII_FOLDS_TABLE)
            text = text.encode("ascii", "replace").decode("ascii")
        return text.lower()

    def holding(self, literal: re.Pattern[str] | str, ignore_case: bool = False) -> list[int]:
        """The rows holding a match of `literal`: a pattern that never spans a newline, or
        a printable ASCII string (searched in `folded` when `ignore_case`).

        One match per row is enough, so the search goes on from the next row's start
        rather than through every occurrence (a quote occurs many times on a line)."""
        if isinstance(literal, str) and ignore_case:
            find = _finder(self.folded, literal.lower())
        else:
            find = _finder(self.text, literal)
        found: list[int] = []
        pos, end = 0, len(self.text)
        while pos <= end and (at := find(pos)) >= 0:
            k = bisect_right(self.starts, at) - 1
            found.append(self.rows[k])
            if k + 1 >= len(self.starts):
                break
            pos = self.starts[k + 1]
        return found


def _finder(text: str, literal: re.Pattern[str] | str) -> Callable[[int], int]:
    """Where `literal` (a pattern or a plain string) is next found in `text` from a
    position on; -1: nowhere."""
    if isinstance(literal, str):
        return lambda pos: text.find(literal, pos)

    def search(pos: int) -> int:
        m = literal.search(text, pos)
        return -1 if m is None else m.start()

    return search


def _guarded(group: _Joined, guard: Guard) -> list[int]:
    if guard.literal:
        # A printable ASCII literal is searched as a string: a regex that ignores case
        # matches it character by character, some 30 times slower over a large change.
        plain = [s if _PLAIN.fullmatch(s) else None for s in guard.strings]
        return sorted({i for p, s in zip(guard.patterns, plain or [None] * len(guard.patterns),
                                         strict=True)
                       for i in (group.holding(p) if s is None
                                 else group.holding(s, guard.ignore_case))})  # fmt: skip
    return sorted({i for p in guard.patterns for i in group.touched(p)})


def _literal_guards(pattern: re.Pattern[str]) -> list[Guard]:
    """Guards that every line `pattern` matches on passes, cheapest and rarest first.

    Some detect-secrets patterns start with lookbehinds and optional groups that defeat
    the regex engine's own literal-prefix scan; the keywords they require do not. Each
    guard is a few plain literals (under the pattern's flags), searched one by one: the
    engine finds a single literal much faster than an alternation. Literals of one
    character are left out (they would pass nearly every line).
    """
    guards = [
        strings
        for strings in _required_strings(pattern.pattern, pattern.flags)
        if min(map(len, strings)) >= 2
    ]
    guards.sort(key=lambda strings: (len(strings), -min(map(len, strings))))
    return [_guard(strings, pattern.flags) for strings in guards]


def _guard(strings: Sequence[str], flags: int) -> Guard:
    """A guard of plain literals; one holding a newline is matched as a general pattern."""
    unique = list(dict.fromkeys(strings))
    patterns = tuple(re.compile(re.escape(s), flags | re.MULTILINE) for s in unique)
    literal = not any("\n" in s for s in unique)
    return Guard(patterns, literal, tuple(unique) if literal else (), bool(flags & re.IGNORECASE))


def _keyword_guard(keywords: Sequence[str]) -> Guard | None:
    """A guard for detect-secrets' keyword patterns, each of which holds one of `keywords`.

    Each keyword (a small regex such as `api_?key`) must contain its last run of literals,
    and a string that contains another need not be searched for: `password` holds `pass`.
    """
    found = []
    for keyword in keywords:
        runs = [r[0] for r in _required_strings(keyword, re.IGNORECASE) if len(r) == 1]
        if not runs or len(runs[-1]) < 2:
            return None
        found.append(runs[-1])
    kept = [s for s in found if not any(t != s and t in s for t in found)]
    return _guard(kept, re.IGNORECASE)


def _required_strings(regex: str, flags: int) -> list[list[str]]:
    """Sets of strings, one of each set being in every match of `regex`.

    Read from the parse tree: an item of the top-level sequence is part of every match,
    so if it is a run of literals, or a choice whose every alternative starts with one,
    one of those strings is in every match (under the same flags).
    """
    try:
        from re import _constants as sre  # type: ignore[attr-defined]
        from re import _parser  # type: ignore[attr-defined]

        tree = list(_parser.parse(regex, flags))
    except Exception:  # a private module: without it, no guard (slower, still exact)
        return []

    def starts(seq: list[Any]) -> list[str] | None:
        """Strings one of which starts every match of the sequence `seq`."""
        run = ""
        for op, av in seq:
            if op is not sre.LITERAL:
                break
            run += chr(av)
        if run:
            return [run]
        if not seq:
            return None
        op, av = seq[0]
        if op is sre.SUBPATTERN and not av[1] and not av[2]:
            return starts(list(av[3]))
        if op is sre.BRANCH:
            out: list[str] = []
            for alternative in av[1]:
                first = starts(list(alternative))
                if not first:
                    return None
                out += first
            return out
        return None

    found = []
    for i, (op, _av) in enumerate(tree):
        if op is sre.LITERAL and i and tree[i - 1][0] is sre.LITERAL:
            continue  # inside a run already read from its start
        strings = starts(tree[i:]) if op is sre.LITERAL else starts([tree[i]])
        if strings:
            found.append(strings)
    return found
