"""detect-secrets 1.5, in-process, with every default plugin inside an explicit settings context.

Without a settings context detect-secrets silently finds nothing. Filters are
chosen here: the inline `pragma: allowlist` filter (candidate-written) is off,
and so are the file-name filters — lock-file and swagger (a candidate picks its
file names), `is_invalid_file` and `is_non_text_file` (in a file scan they drop
every finding for a path that is not on disk, and ours are bytes from git).
oms drives the per-line pipeline, which does not consult file-name filters
today; they are off anyway so that a change there cannot silently drop
findings. The heuristic false-positive filters stay. Network verification is
never configured, so no secret is ever sent anywhere.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import version
from typing import Any

from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector

from gatekeeper.scan.interface import (
    Finding,
    ScanItem,
    ScannerInfo,
    ScannerUnavailable,
    fingerprint,
)
from gatekeeper.scan.redact import preview

KEPT_FILTERS = (
    "detect_secrets.filters.heuristic.is_sequential_string",
    "detect_secrets.filters.heuristic.is_potential_uuid",
    "detect_secrets.filters.heuristic.is_likely_id_string",
    "detect_secrets.filters.heuristic.is_templated_secret",
    "detect_secrets.filters.heuristic.is_prefixed_with_dollar_sign",
    "detect_secrets.filters.heuristic.is_indirect_reference",
    "detect_secrets.filters.heuristic.is_not_alphanumeric_string",
)
# Gitleaks' own private-key pattern, so that a PEM block gets the same fingerprint from both.
PEM_BLOCK = re.compile(
    r"(?i)-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----[\s\S-]{64,}?KEY(?: BLOCK)?-----"
)
PEM_MAX_LINES = 400
DISABLED_FILTERS = (
    "detect_secrets.filters.common.is_invalid_file",
    "detect_secrets.filters.heuristic.is_non_text_file",
    "detect_secrets.filters.allowlist.is_line_allowlisted",
    "detect_secrets.filters.heuristic.is_lock_file",
    "detect_secrets.filters.heuristic.is_swagger_file",
)


class DetectSecrets:
    @property
    def info(self) -> ScannerInfo:
        return ScannerInfo("detect-secrets", version("detect-secrets"), None)

    def scan(self, items: Sequence[ScanItem]) -> list[Finding]:
        try:
            return list(self._scan(items))
        except ScannerUnavailable:
            raise
        except Exception as exc:  # any plugin error means "not scanned", never "clean"
            raise ScannerUnavailable(
                f"detect-secrets failed: {type(exc).__name__}: {str(exc)[:200]}"
            ) from None

    def _scan(self, items: Sequence[ScanItem]) -> Iterator[Finding]:
        from detect_secrets.core import scan as ds_scan
        from detect_secrets.core.plugins.util import (
            get_mapping_from_secret_type_to_class,
        )
        from detect_secrets.settings import get_plugins, get_settings, transient_settings

        classes: list[type[Any]] = list(get_mapping_from_secret_type_to_class().values())
        plugins = [{"name": cls.__name__} for cls in classes]
        config = {"plugins_used": plugins, "filters_used": [{"path": f} for f in KEPT_FILTERS]}
        with transient_settings(config):
            get_settings().disable_filters(*DISABLED_FILTERS)
            active = set(get_settings().filters)
            if active & set(DISABLED_FILTERS) or not set(KEPT_FILTERS) <= active:
                raise ScannerUnavailable("detect-secrets filters are not as configured")
            if len(get_plugins()) != len(plugins) or not plugins:
                raise ScannerUnavailable("detect-secrets plugins did not load")
            prefilter = _prefilter(get_plugins())
            by_type = {p.secret_type: p for p in get_plugins()}
            for item in items:
                lines = prefilter(item.path, item.lines)
                position: dict[int, int] | None = None
                for secret in ds_scan._process_line_based_plugins(lines, item.path):
                    if position is None:
                        position = {n: i for i, (n, _) in enumerate(item.lines)}
                    value = _whole_secret(
                        by_type.get(secret.type),
                        secret.secret_value or "",
                        item.lines,
                        position.get(int(secret.line_number), -1),
                    )
                    number = int(secret.line_number)
                    yield Finding(
                        "detect-secrets",
                        secret.type,
                        item.path,
                        number,
                        fingerprint(value),
                        preview(value),
                        # a PEM block spans lines: the change may add only its body
                        end_line=number + value.count("\n") if "\n" in value else None,
                    )


def _whole_secret(plugin: Any, value: str, lines: Sequence[tuple[int, str]], index: int) -> str:
    """The secret itself, where detect-secrets reports only a piece of it.

    Some detect-secrets patterns capture a type prefix rather than the secret (GitHub:
    "ghp", GitLab: "glpat"), and its private-key plugin reports the constant words of
    the PEM header. Fingerprinting those would give every such secret the same
    fingerprint, so that allowing one would allow them all, and would never match the
    Gitleaks fingerprint of the same secret. For such a piece this returns the whole match
    (or the whole PEM block, as Gitleaks' pattern delimits it).
    """
    if plugin is None or not 0 <= index < len(lines):
        return value
    line = lines[index][1]
    if isinstance(plugin, PrivateKeyDetector):
        text = "\n".join(t for _, t in lines[index : index + PEM_MAX_LINES])
        block = PEM_BLOCK.search(text)
        if block is not None and block.start() < len(line):
            return block.group(0)
        return "\n".join(t for _, t in lines[index : index + 2])
    if type(plugin).analyze_string is RegexBasedDetector.analyze_string:
        for pattern in plugin.denylist:
            for match in pattern.finditer(line.rstrip()):
                whole = match.group(0)
                if value != whole and whole.startswith(value) and value in match.groups():
                    return str(whole)
    return value


def _prefilter(
    plugins: Sequence[Any],
) -> Callable[[str, Sequence[tuple[int, str]]], list[tuple[int, str]]]:
    """A cheap exact selection of the lines on which some plugin could report something.

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
    from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
    from detect_secrets.plugins.jwt import JwtTokenDetector
    from detect_secrets.plugins.keyword import DENYLIST, KeywordDetector

    regexes: list[tuple[re.Pattern[str], list[Guard]]] = []
    checked: list[tuple[Guard | None, Any]] = []  # (necessary guard, plugin)
    entropy: list[Any] = []
    others: list[Any] = []
    for plugin in plugins:
        if type(plugin).analyze_string is RegexBasedDetector.analyze_string:
            for pattern in plugin.denylist:
                joined = re.compile(pattern.pattern, pattern.flags | re.MULTILINE)
                regexes.append((joined, _literal_guards(joined)))
        elif isinstance(plugin, KeywordDetector):
            checked.append((_keyword_guard(DENYLIST), plugin))
        elif isinstance(plugin, JwtTokenDetector):
            jwt = [re.compile(p.pattern, p.flags | re.MULTILINE) for p in plugin.denylist]
            checked.append((tuple(jwt), plugin))
        elif isinstance(plugin, HighEntropyStringsPlugin):
            entropy.append(plugin)
        else:
            others.append(plugin)
    quote = _guard(['"', "'"], 0)

    def mark(path: str, lines: Sequence[tuple[int, str]], group: _Joined, hit: bytearray) -> None:
        texts = group.texts
        found: dict[Guard, set[int]] = {}

        def rows_of(guard: Guard) -> set[int]:
            """Lines of the group with a match of one of the guard's patterns."""
            if guard not in found:
                found[guard] = {i for p in guard for i in group.touched(p)}
            return found[guard]

        def analyze(plugin: Any, i: int) -> bool:
            number = lines[i][0]
            return bool(plugin.analyze_line(filename=path, line=texts[i], line_number=number))

        for pattern, guards in regexes:
            part = group
            for n, guard in enumerate(guards):  # each is necessary: a line must pass them all
                if n == 0:
                    rows = rows_of(guard)
                else:
                    rows = {i for p in guard for i in part.touched(p)}
                part = _Joined(texts, sorted(rows))
            for i in part.touched(pattern):
                hit[i] = 1
        for checked_guard, plugin in checked:
            rows = rows_of(checked_guard) if checked_guard is not None else set(group.rows)
            for i in sorted(rows):
                if not hit[i] and analyze(plugin, i):
                    hit[i] = 1
        if entropy:
            for i in sorted(rows_of(quote)):
                for plugin in entropy:
                    if hit[i]:
                        break
                    bound = 2**plugin.entropy_limit
                    candidates = plugin.analyze_string(texts[i])
                    if any(len(c) + 1 > bound for c in candidates) and analyze(plugin, i):
                        hit[i] = 1
        for plugin in others:
            for i in group.rows:
                if not hit[i] and analyze(plugin, i):
                    hit[i] = 1

    def select(path: str, lines: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
        texts = [text.rstrip() for _, text in lines]
        everything = range(len(texts))
        hit = bytearray(len(texts))
        if not any("\n" in t for t in texts):
            mark(path, lines, _Joined(texts, everything), hit)
        else:  # not lines after all: take each alone
            for i in everything:
                mark(path, lines, _Joined(texts, [i]), hit)
        return [line for line, text, h in zip(lines, texts, hit, strict=True) if h and text.strip()]

    return select


class _Joined:
    """Some lines joined by newlines, to run a MULTILINE pattern over them all at once.

    Every match a pattern has on one of those lines alone is found, or overlapped by a
    found match that touches the same line: `^`, `$`, lookarounds and `\\b` see a newline
    at a line's ends where the line alone has its start or end, and read it the same way.
    """

    def __init__(self, texts: Sequence[str], rows: Sequence[int]) -> None:
        self.texts = texts
        self.rows = rows
        self.starts = []
        offset = 0
        for i in rows:
            self.starts.append(offset)
            offset += len(texts[i]) + 1
        self.text = "\n".join(texts[i] for i in rows)

    def touched(self, pattern: re.Pattern[str]) -> list[int]:
        """The rows that some match of `pattern` touches."""
        touched: set[int] = set()
        for m in pattern.finditer(self.text):
            first = bisect_right(self.starts, m.start()) - 1
            last = bisect_right(self.starts, max(m.start(), m.end() - 1)) - 1
            touched.update(self.rows[first : last + 1])
        return sorted(touched)


Guard = tuple[re.Pattern[str], ...]  # a line passes if any of these literals is in it


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
    return tuple(re.compile(re.escape(s), flags | re.MULTILINE) for s in dict.fromkeys(strings))


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
