"""A check's test inventory: which tests ran and how each ended, read from the check's report.

A check declares a report (`junit:PATH` or a runner shorthand); oms shapes the check's argv
so that the runner writes one, reads it back from the scratch copy and compares the base's
inventory with the candidate's. The report is the candidate's data: it is opened without
following a symlink or blocking on a FIFO, bounded in bytes, depth and cases, parsed with
DTDs and entities refused, and nothing but test ids, files and outcomes is kept from it
(no message text), each id sanitised and capped.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Literal, get_args

import defusedxml.ElementTree as SafeET
from defusedxml import DTDForbidden, EntitiesForbidden, ExternalReferenceForbidden

from gatekeeper.text import sanitize

Kind = Literal["junit", "pytest", "node-test", "go-test", "unittest"]
KINDS: tuple[Kind, ...] = get_args(Kind)

# The fresh directory oms creates at the scratch root for a shorthand's report.
REPORT_DIR = ".oms-report"
# oms' unittest reporter: a stdlib-only script, bound into the sandbox as data.
REPORTER_PATH = Path(__file__).with_name("reporters") / "unittest_junit.py"
# Where the sandbox mounts the scratch copy: reports name files under it.
_WORKSPACE = "/workspace/"


class ReportError(Exception):
    """The check's report cannot be read or trusted; the message is one line."""


@dataclass(frozen=True)
class ReportSpec:
    """A check's `report`: `junit:PATH` (a repo-relative file the check writes) or a shorthand
    for a runner whose argv oms shapes to write one."""

    kind: Kind
    path: str | None = None

    @classmethod
    def parse(cls, text: str) -> ReportSpec:
        """`junit:PATH`, `pytest`, `node-test`, `go-test` or `unittest`; ValueError otherwise."""
        if text.startswith("junit:"):
            path = text.removeprefix("junit:")
            reason = _bad_repo_path(path)
            if reason:
                raise ValueError(f"report path {sanitize(path, 200)!r}: {reason}")
            return cls("junit", path)
        for kind in KINDS:
            if text == kind and kind != "junit":
                return cls(kind)
        raise ValueError(
            f"unknown report {sanitize(text, 200)!r}: "
            "use junit:PATH, pytest, node-test, go-test or unittest"
        )


def _bad_repo_path(path: str) -> str | None:
    """Why `path` is not a plain repo-relative file path, or None when it is."""
    if not path:
        return "empty"
    if "\0" in path or "\\" in path:
        return "a NUL or backslash"
    if path.startswith("/"):
        return "absolute"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "an empty, '.' or '..' component"
    return None


# --- shaping the check's argv ------------------------------------------------------------

# Options that take the next arg as their value: a path after one is not a test path.
_PYTEST_VALUED = frozenset(
    "-c -k -m -p -o -W -r -n --rootdir --confcutdir --ignore --ignore-glob --deselect "
    "--basetemp --junitxml --junit-xml --junit-prefix --override-ini --config-file --maxfail "
    "--tb --durations --durations-min --color --capture --import-mode --pythonwarnings "
    "--log-level --log-format --log-date-format --log-cli-level --log-cli-format "
    "--log-cli-date-format --log-file --log-file-level --log-file-format "
    "--log-file-date-format --doctest-glob --doctest-report --cache-show --debug --pastebin "
    "--cov --cov-report --cov-config --cov-fail-under --dist --numprocesses --maxprocesses "
    "--timeout --timeout-method --randomly-seed".split()
)
_NODE_VALUED = frozenset(
    "-r --require --import --loader --experimental-loader -e --eval -p --print -C "
    "--conditions --input-type --env-file --inspect-port --debug-port --stack-size --title "
    "--test-name-pattern --test-skip-pattern --test-reporter --test-reporter-destination "
    "--test-concurrency --test-timeout --test-shard --test-coverage-include "
    "--test-coverage-exclude --disable-warning --experimental-policy --policy-integrity "
    "--redirect-warnings --diagnostic-dir --report-dir --unhandled-rejections "
    "--dns-result-order --heapsnapshot-signal --icu-data-dir --openssl-config".split()
)


def report_problem(report: str, argv: Sequence[str]) -> str | None:
    """Why a check's `report` cannot be read from its `cmd` (an unknown kind, a bad path, a
    runner the argv does not run), or None: said before anything runs, never mid-gate."""
    try:
        spec = ReportSpec.parse(report)
        shape_argv(spec, argv, report_inside="/r/report.xml", reporter_inside="/r/reporter.py")
    except ValueError as exc:
        return f"report = {sanitize(report, 200)!r}: {exc}"
    return None


def shape_argv(
    spec: ReportSpec, argv: Sequence[str], *, report_inside: str, reporter_inside: str
) -> list[str]:
    """The check's argv with the runner told to write its report at `report_inside` (a path
    inside the sandbox); ValueError("check argv does not run <kind>") when it does not fit."""
    out = list(argv)
    if spec.kind == "junit":
        return out
    if spec.kind == "pytest":
        at = _dashdash(out, _runner_index(spec, out) + 1)
        out[at:at] = [f"--junitxml={report_inside}", "-o", "junit_family=xunit1"]
        return out
    if spec.kind == "node-test":
        _runner_index(spec, out)
        out[1:1] = [
            "--test-reporter=spec",
            "--test-reporter-destination=stdout",
            "--test-reporter=junit",
            f"--test-reporter-destination={report_inside}",
        ]
        return out
    if spec.kind == "go-test":
        at = _runner_index(spec, out) + 1
        return [*out[:at], "-json", *out[at:]]
    at = _runner_index(spec, out)
    return [*out[:at], reporter_inside, report_inside, "--", *out[at + 2 :]]


def _runner_index(spec: ReportSpec, argv: Sequence[str]) -> int:
    """Where the runner shows in `argv`: pytest's own arg, the node binary, go's `test`,
    the `-m` of `-m unittest`."""
    for i, arg in enumerate(argv):
        if spec.kind == "pytest" and PurePosixPath(arg).name in ("pytest", "py.test"):
            return i
        if spec.kind == "node-test" and i == 0 and PurePosixPath(arg).name.startswith("node"):
            return i
        if spec.kind == "go-test" and i > 0 and arg == "test":
            return i
        if spec.kind == "unittest" and arg == "-m" and argv[i + 1 : i + 2] == ["unittest"]:
            return i
    raise ValueError(f"check argv does not run {spec.kind}")


def _dashdash(argv: Sequence[str], start: int) -> int:
    """The index of the literal `--` at or after `start`, or the end of argv."""
    return next((i for i in range(start, len(argv)) if argv[i] == "--"), len(argv))


def narrow_argv(
    spec: ReportSpec, argv: Sequence[str], files: Sequence[str], *, tree_paths: Collection[str]
) -> list[str]:
    """`argv` (shape_argv's output) run on `files` only (repo-relative test files).

    pytest and node-test: the test paths the argv names (a file of `tree_paths` or a directory
    holding one; a pytest node id counts by its file) are dropped and `files` appended
    (node: only with `--test`, where every positional is a test path).
    unittest: the reporter gets `--only FILE` for each. junit, go-test: unchanged (the caller
    reads only the ids it needs). ValueError when `files` is empty or the argv does not fit."""
    if spec.kind in ("junit", "go-test"):
        return list(argv)
    if not files:
        raise ValueError("no test files to narrow the check to")
    if spec.kind == "unittest":
        return _narrow_unittest(argv, files)
    start = _runner_index(spec, argv) + 1
    if spec.kind == "node-test" and "--test" not in argv:
        raise ValueError("check argv does not run node --test")
    valued = _PYTEST_VALUED if spec.kind == "pytest" else _NODE_VALUED
    named = _test_paths(tree_paths)
    kept = list(argv[:start])
    positional_only = False
    for i in range(start, len(argv)):
        arg = argv[i]
        if arg == "--" and not positional_only:
            positional_only = True
        elif positional_only or not (_option(arg) or argv[i - 1] in valued):
            if _repo_rel(arg, pytest=spec.kind == "pytest") in named:
                continue
        kept.append(arg)
    return kept + [f"./{f}" if f.startswith("-") else f for f in files]


def _option(arg: str) -> bool:
    return arg.startswith("-") and arg != "-"


def _test_paths(tree_paths: Collection[str]) -> set[str]:
    """Every file of the tree and every directory that holds one; "" stands for the root."""
    named = {""}
    for path in tree_paths:
        parts = path.split("/")
        named.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    return named


def _repo_rel(arg: str, *, pytest: bool) -> str | None:
    """A command-line path as a repo-relative one ("" for the root), None outside the tree."""
    path = arg.split("::", 1)[0] if pytest else arg
    if path == _WORKSPACE.rstrip("/") or path.startswith(_WORKSPACE):
        path = path.removeprefix(_WORKSPACE.rstrip("/"))
    elif path.startswith("/"):
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return None if ".." in parts else "/".join(parts)


def _narrow_unittest(argv: Sequence[str], files: Sequence[str]) -> list[str]:
    out = list(argv)
    if "--" not in out or "unittest" in out[: out.index("--")]:
        raise ValueError("check argv does not run the unittest reporter (shape it first)")
    at = out.index("--")
    out[at:at] = [arg for f in files for arg in ("--only", f)]
    return out


# --- reading the report ----------------------------------------------------------------


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"


@dataclass(frozen=True)
class TestCase:
    """One test as the report names it: a sanitised id, its repo-relative file when the
    report gives one, and how it ended (xfail, todo and skip all read as SKIPPED)."""

    __test__ = False  # not a pytest test class

    id: str
    file: str | None
    outcome: Outcome


@dataclass(frozen=True)
class Limits:
    """Bounds on one report: its bytes, its test cases, its element nesting, an id's length."""

    max_bytes: int = 16 << 20
    max_cases: int = 100_000
    max_depth: int = 32
    max_id_chars: int = 512


DEFAULT_LIMITS = Limits()


def read_report(
    spec: ReportSpec,
    root: Path,
    *,
    report_rel: str | None,
    stdout: bytes,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[TestCase, ...]:
    """The tests a check's report names, one per id (see `merge`), in report order.

    `root` is the scratch copy on the host; go-test reads `stdout` (`go test -json`), every
    other kind the JUnit XML file at `root/report_rel`. ReportError when it cannot be read."""
    if spec.kind == "go-test":
        return _read_go(stdout, limits)
    if report_rel is None:
        raise ValueError(f"a {spec.kind} report needs report_rel")
    return _read_junit(open_report(root, report_rel, limits.max_bytes), spec.kind, limits)


_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def open_report(root: Path, rel: str, max_bytes: int) -> bytes:
    """The bytes of the regular file `root/rel`, walked one component at a time from `root`
    without following a symlink anywhere and without ever opening a FIFO blocking."""
    if _bad_repo_path(rel):
        raise ReportError("the report path is not a plain relative path")
    *dirs, name = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in dirs:
            _expect(fd, part, stat.S_ISDIR, "the report path goes through a symlink or file")
            fd = _swap(fd, os.open(part, _DIR_FLAGS, dir_fd=fd))
        _expect(fd, name, stat.S_ISREG, "report is not a regular file")
        fd = _swap(fd, os.open(name, _FILE_FLAGS, dir_fd=fd))
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the lstat
            raise ReportError("report is not a regular file")
        return _read_bounded(fd, max_bytes)
    except FileNotFoundError:
        raise ReportError("the check declared a report and left none") from None
    except OSError as e:  # ELOOP, ENOTDIR: swapped for a symlink or a file since the lstat
        raise ReportError(f"report cannot be opened safely ({e.strerror})") from None
    finally:
        os.close(fd)


def _expect(dir_fd: int, name: str, is_kind: Callable[[int], bool], refusal: str) -> None:
    """lstat `name` in `dir_fd` before anything opens it: a FIFO is never opened."""
    if not is_kind(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
        raise ReportError(refusal)


def _swap(old: int, new: int) -> int:
    os.close(old)
    return new


def _read_bounded(fd: int, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes:
        chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:
        raise ReportError(f"report larger than {max_bytes} bytes")
    return b"".join(chunks)


# Within one testcase: error over failure over skipped over none.
_CHILD_RANK = {Outcome.PASSED: 0, Outcome.SKIPPED: 1, Outcome.FAILED: 2, Outcome.ERROR: 3}
_OUTCOME_OF_CHILD = {"error": Outcome.ERROR, "failure": Outcome.FAILED, "skipped": Outcome.SKIPPED}
# Which outcome a duplicate id keeps: a failure anywhere is never hidden by a pass, and an id
# that ran and passed anywhere counts as run (a same-named skip elsewhere does not hide it).
_KEEP_RANK = {Outcome.SKIPPED: 0, Outcome.PASSED: 1, Outcome.FAILED: 2, Outcome.ERROR: 3}


class _JUnitTarget:
    """An XML parser target that never builds a tree: it keeps the open elements' tags,
    the open testsuites' names and the testcase being read, refusing as soon as a bound
    is crossed."""

    def __init__(self, kind: Kind, limits: Limits) -> None:
        self.kind = kind
        self.limits = limits
        self.tags: list[str] = []
        self.suites: list[str] = []
        self.case: tuple[str, str | None] | None = None
        self.outcome = Outcome.PASSED
        self.count = 0
        self.cases: list[TestCase] = []

    def start(self, tag: str, attrib: Mapping[str, str]) -> None:
        if not self.tags and tag not in ("testsuites", "testsuite"):
            raise ReportError(f"malformed report: the root is {sanitize(tag, 40)!r}")
        if len(self.tags) >= self.limits.max_depth:
            raise ReportError(f"report nested deeper than {self.limits.max_depth} elements")
        parent = self.tags[-1] if self.tags else None
        self.tags.append(tag)
        if tag == "testsuite":
            self.suites.append(attrib.get("name", ""))
        elif tag == "testcase":
            self._open_case(attrib)
        elif parent == "testcase" and tag in _OUTCOME_OF_CHILD:
            worse = _OUTCOME_OF_CHILD[tag]
            if _CHILD_RANK[worse] > _CHILD_RANK[self.outcome]:
                self.outcome = worse

    def end(self, tag: str) -> None:
        self.tags.pop()
        if tag == "testsuite":
            self.suites.pop()
        elif tag == "testcase" and self.case is not None:
            self.cases.append(TestCase(self.case[0], self.case[1], self.outcome))
            self.case = None

    def close(self) -> None:
        return None

    def _open_case(self, attrib: Mapping[str, str]) -> None:
        if self.case is not None:
            raise ReportError("malformed report: a testcase inside a testcase")
        self.count += 1
        if self.count > self.limits.max_cases:
            raise ReportError(f"report has more than {self.limits.max_cases} test cases")
        name = attrib.get("name")
        if name is None:
            raise ReportError("malformed report: a testcase without a name")
        file = attrib.get("file")
        if self.kind == "node-test":
            ident = " > ".join([*(s for s in self.suites if s), name])
            if not self.suites and name.startswith(_WORKSPACE):
                ident = file = name.removeprefix(_WORKSPACE)  # a file node could not run
        else:
            classname = attrib.get("classname", "")
            ident = f"{classname}::{name}" if classname else name
        cap = self.limits.max_id_chars
        self.case = (_clean(ident, cap), _report_file(file, cap))
        self.outcome = Outcome.PASSED


def _read_junit(data: bytes, kind: Kind, limits: Limits) -> tuple[TestCase, ...]:
    target = _JUnitTarget(kind, limits)
    parser = SafeET.DefusedXMLParser(
        target=target, forbid_dtd=True, forbid_entities=True, forbid_external=True
    )
    try:
        parser.feed(data)
        parser.close()
    except DTDForbidden:
        raise ReportError("malformed report: a DTD is not allowed") from None
    except EntitiesForbidden:
        raise ReportError("malformed report: entity declarations are not allowed") from None
    except ExternalReferenceForbidden:
        raise ReportError("malformed report: external references are not allowed") from None
    except (SafeET.ParseError, ValueError, LookupError) as e:
        raise ReportError(f"malformed report: {sanitize(str(e), 120)}") from None
    return merge(target.cases)


def _clean(text: str, cap: int) -> str:
    """`text` as one printable line of at most `cap` characters."""
    out = sanitize(text[: cap + 1], limit=6 * (cap + 1))
    return out if len(out) <= cap else out[: cap - 1] + "…"


def _report_file(raw: str | None, cap: int) -> str | None:
    """A report's `file` attribute as a repo-relative path, or None when it names none."""
    if raw is None:
        return None
    rel = raw.removeprefix(_WORKSPACE).removeprefix("./")
    return None if _bad_repo_path(rel) else _clean(rel, cap)


_GO_ACTIONS = {"pass": Outcome.PASSED, "fail": Outcome.FAILED, "skip": Outcome.SKIPPED}


def _read_go(stdout: bytes, limits: Limits) -> tuple[TestCase, ...]:
    """`go test -json` events: `Package::Test` per test (subtests keep their slash names),
    from its pass/fail/skip actions; lines that are not JSON objects are ignored, package-level
    events too (a package that fails to build fails the check by its exit status)."""
    if len(stdout) > limits.max_bytes:
        raise ReportError(f"report larger than {limits.max_bytes} bytes")
    cases: list[TestCase] = []
    seen: set[str] = set()
    for line in stdout.splitlines():
        event = _go_event(line)
        if event is None:
            continue
        ident = _clean(f"{event[0]}::{event[1]}", limits.max_id_chars)
        seen.add(ident)
        if len(seen) > limits.max_cases:
            raise ReportError(f"report has more than {limits.max_cases} test cases")
        cases.append(TestCase(ident, None, event[2]))
    return merge(cases)


def _go_event(line: bytes) -> tuple[str, str, Outcome] | None:
    """(package, test, outcome) of a test's final action, or None for any other line."""
    line = line.strip()
    if not line.startswith(b"{"):
        return None
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict):
        return None
    action, package, test = event.get("Action"), event.get("Package", ""), event.get("Test")
    if not (isinstance(action, str) and isinstance(package, str) and isinstance(test, str)):
        return None
    outcome = _GO_ACTIONS.get(action)
    return (package, test, outcome) if outcome is not None and test else None


def merge(cases: Iterable[TestCase]) -> tuple[TestCase, ...]:
    """One case per id, in first-seen order. A duplicate id (node names tests without their
    file; a capped id; `go test -count`) keeps error over failed over passed over skipped:
    a failure is never hidden by a pass, and an id that passed anywhere still ran."""
    kept: dict[str, TestCase] = {}
    for case in cases:
        old = kept.get(case.id)
        if old is None or _KEEP_RANK[case.outcome] > _KEEP_RANK[old.outcome]:
            kept[case.id] = case
    return tuple(kept.values())


# --- comparing two inventories -----------------------------------------------------------


@dataclass(frozen=True)
class TestDelta:
    """What became of the base's tests on the candidate (ids sorted).

    removed: passed on base, absent on candidate, not moved. disabled: passed on base,
    SKIPPED on candidate. added: on candidate only, not moved. moved: (base id, candidate id)
    with the same non-None body digest; a candidate test that is SKIPPED is never taken as
    where a passing test moved, so moving a test and skipping it still reads as removed."""

    __test__ = False  # not a pytest test class

    base_counts: Mapping[str, int]
    candidate_counts: Mapping[str, int]
    removed: tuple[str, ...]
    disabled: tuple[str, ...]
    added: tuple[str, ...]
    moved: tuple[tuple[str, str], ...]


def compare(
    base: Sequence[TestCase],
    cand: Sequence[TestCase],
    *,
    body_of: Callable[[TestCase, str], str | None],
) -> TestDelta:
    """The delta from `base` to `cand`; `body_of(case, "base" | "candidate")` gives a test
    body's digest (or None), asked only of removed and added tests."""
    before = {c.id: c for c in merge(base)}
    after = {c.id: c for c in merge(cand)}
    gone = sorted(i for i, c in before.items() if c.outcome is Outcome.PASSED and i not in after)
    new = sorted(i for i in after if i not in before)
    moved = _pair_moves(
        [before[i] for i in gone],
        [after[i] for i in new if after[i].outcome is not Outcome.SKIPPED],
        body_of,
    )
    moved_from, moved_to = {b for b, _ in moved}, {c for _, c in moved}
    return TestDelta(
        base_counts=_counts(before.values()),
        candidate_counts=_counts(after.values()),
        removed=tuple(i for i in gone if i not in moved_from),
        disabled=tuple(
            sorted(
                i
                for i, c in before.items()
                if c.outcome is Outcome.PASSED
                and i in after
                and after[i].outcome is Outcome.SKIPPED
            )
        ),
        added=tuple(i for i in new if i not in moved_to),
        moved=moved,
    )


def _pair_moves(
    gone: Sequence[TestCase],
    new: Sequence[TestCase],
    body_of: Callable[[TestCase, str], str | None],
) -> tuple[tuple[str, str], ...]:
    """One-to-one pairs of a gone and a new test with equal digests, each gone test (in id
    order) taking the first unpaired new one (in id order)."""
    pool: dict[str, list[str]] = {}
    for case in new:
        digest = body_of(case, "candidate")
        if digest is not None:
            pool.setdefault(digest, []).append(case.id)
    pairs = []
    for case in gone:
        digest = body_of(case, "base")
        if digest is not None and pool.get(digest):
            pairs.append((case.id, pool[digest].pop(0)))
    return tuple(pairs)


def _counts(cases: Iterable[TestCase]) -> dict[str, int]:
    counts = {o.value: 0 for o in Outcome}
    for case in cases:
        counts[case.outcome.value] += 1
    return counts
