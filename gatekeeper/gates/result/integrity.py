"""Did the candidate weaken what verified it? Three readings, none of which the candidate
can vouch for itself:

1. the inventories: what each reporting check ran on the base (its baseline) against
   what it ran on the candidate: tests removed, disabled, added, moved;
2. the static reading of the change (`weakening/`): skips and removed tests,
   assertions and test configuration, read from the diff and never run;
3. the base's own test files, where the candidate changed or deleted them, run against
   the candidate's code (`[verify] trusted_tests`): a test that passes on the base and
   fails there was "changed to pass".

Each finding is a `TestIssue` of one class; `[verify] allow` accepts a class for every
candidate, and a human's terminal acknowledgement (`acknowledge.py`) accepts one
verdict's issues once. What is left makes the verdict FAILED, with a reason each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gatekeeper.digest import Sha256Digest
from gatekeeper.gates.result.acknowledge import usable_ack
from gatekeeper.gates.result.baseline import Baseline, baseline, counts
from gatekeeper.gates.result.inventory import Outcome, TestCase, compare
from gatekeeper.gates.result.protected import matches
from gatekeeper.gates.result.reported import run_reported
from gatekeeper.gates.result.state import GateState
from gatekeeper.gates.result.verdict import TestCounts, TestIssue, TestsJudged
from gatekeeper.gates.result.versions import FileVersions, read_paths, tree_paths
from gatekeeper.gates.result.weakening import (
    Weakening,
    is_test_file,
    read_weakening,
    test_bodies,
)
from gatekeeper.scan import ScanItem
from gatekeeper.scan.policy import scan_with_policy
from gatekeeper.text import sanitize

MAX_TEST_LIST = 100  # ids per list in the verdict and the entry
# A static finding's class, as `[verify] allow` names it.
STATIC_CLASS = {
    "test-removed": "removed-tests",
    "test-file-removed": "removed-tests",
    "skip-added": "disabled-tests",
    "assert-removed": "weakened-assertions",
    "config-loosened": "test-config",
}


@dataclass
class _Bodies:
    """Test body digests of the changed test files, on either side, read once each."""

    versions: Mapping[str, FileVersions]
    memo: dict[tuple[str, str], dict[str, str]]

    def of(self, path: str, side: str) -> dict[str, str]:
        if (path, side) not in self.memo:
            fv = self.versions.get(path)
            data = None if fv is None else fv.base if side == "base" else fv.candidate
            self.memo[(path, side)] = {} if data is None else test_bodies(path, data)
        return self.memo[(path, side)]


def locate(case: TestCase) -> tuple[str, str] | None:
    """(file, qualified test name) of a reported case, as `weakening` names tests:
    pytest/unittest `pkg.mod.Class::test_x[p]` in `pkg/mod.py` is `Class.test_x`."""
    if case.file is None:
        return None
    if " > " in case.id or "::" not in case.id:
        return case.file, case.id
    classname, _, name = case.id.rpartition("::")
    name = name.split("[", 1)[0]
    module = case.file.removesuffix(".py").replace("/", ".")
    cls = classname[len(module) + 1 :] if classname.startswith(module + ".") else ""
    return case.file, f"{cls}.{name}" if cls else name


def _body(bodies: _Bodies, case: TestCase, side: str) -> str | None:
    where = locate(case)
    return None if where is None else bodies.of(where[0], side).get(where[1])


def _static(s: GateState, versions: Sequence[FileVersions], bodies: _Bodies) -> list[TestIssue]:
    """The static reading's issues, less the removed tests that reappear elsewhere with the
    same body (moved)."""
    found = read_weakening(versions)
    added = {d for fv in versions if fv.candidate is not None
             for d in bodies.of(fv.path, "candidate").values()}  # fmt: skip
    issues = []
    for w in found:
        if w.kind == "test-removed" and w.test and _moved(bodies, w, added):
            continue
        issues.append(TestIssue(cls=STATIC_CLASS[w.kind], file=w.file, test=w.test, what=w.what))
    return issues


def _moved(bodies: _Bodies, w: Weakening, candidate_digests: set[str]) -> bool:
    digest = bodies.of(w.file, "base").get(w.test or "")
    return digest is not None and digest in candidate_digests


def _new_static_tests(versions: Sequence[FileVersions], bodies: _Bodies) -> set[str]:
    """Tests the candidate's changed files define that their base versions did not."""
    out: set[str] = set()
    for fv in versions:
        if fv.candidate is not None:
            out |= bodies.of(fv.path, "candidate").keys() - bodies.of(fv.path, "base").keys()
    return out


def _cut(items: Iterable[str]) -> tuple[tuple[str, ...], bool]:
    listed = sorted(items)
    return tuple(listed[:MAX_TEST_LIST]), len(listed) > MAX_TEST_LIST


def _inventory_issues(removed: Sequence[str], disabled: Sequence[str]) -> list[TestIssue]:
    return [
        *(TestIssue(cls="removed-tests", file=None, test=i,
                    what="passed on the base, absent on the candidate") for i in removed),
        *(TestIssue(cls="disabled-tests", file=None, test=i,
                    what="passed on the base, skipped on the candidate") for i in disabled),
    ]  # fmt: skip


def _trusted_files(s: GateState, versions: Sequence[FileVersions]) -> list[str]:
    """Base test files the candidate changed or deleted that `trusted_tests` names."""
    globs = s.loaded.policy.verify.trusted_tests
    return sorted(fv.path for fv in versions
                  if globs and fv.base is not None and fv.candidate != fv.base
                  and is_test_file(fv.path) and matches(fv.path, globs) is not None)  # fmt: skip


def _conftests(paths: Sequence[str]) -> list[str]:
    out = {"conftest.py"}
    for p in paths:
        parts = p.split("/")[:-1]
        out.update("/".join([*parts[: i + 1], "conftest.py"]) for i in range(len(parts)))
    return sorted(out)


def _changed_to_pass(s: GateState, files: Sequence[str], base: Baseline) -> list[str]:
    """The base's tests from `files`, run on the candidate's code (with the base's
    conftest.py files along their path): ids that passed on the base and do not now."""
    placed = read_paths(s.repo, s.base, [*files, *_conftests(files)])
    paths = tree_paths(s.repo, s.candidate)
    out: set[str] = set()
    for check in s.loaded.policy.checks:
        if not any(c.file in files for c in base.inventory.get(check.name, ())):
            continue  # the check ran none of these files' tests on the base
        run = run_reported(s, check, s.candidate, placed=sorted(placed.items()), only=files,
                           tree_paths=paths)  # fmt: skip
        now = {c.id: c.outcome for c in run.cases or ()}
        for c in base.inventory[check.name]:
            if c.file in files and c.outcome == Outcome.PASSED and now.get(c.id) != Outcome.PASSED:
                out.add(c.id)
    return sorted(out)


def bare_name(test: str) -> str:
    """A test's own name, without its file, module, class, suite or parameters."""
    for sep in ("::", " > ", "."):
        test = test.rpartition(sep)[2]
    return test.split("[", 1)[0]


def _moved_elsewhere(issue: TestIssue, added: set[str]) -> bool:
    """`moved-tests`: a removed test whose name a test the candidate added carries."""
    return issue.cls == "removed-tests" and bare_name(issue.test or "") in added - {""}


def _accept(s: GateState, issues: list[TestIssue],
            added: set[str]) -> tuple[list[TestIssue], int | None]:  # fmt: skip
    """Issues the base's policy allows by class, then those a human acknowledged once."""
    allow = set(s.loaded.policy.verify.allow)
    names = {bare_name(t) for t in added} if "moved-tests" in allow else set()
    issues = [i.model_copy(update={"accepted": "policy"})
              if i.cls in allow or _moved_elsewhere(i, names) else i for i in issues]  # fmt: skip
    open_ = [i for i in issues if i.accepted is None]
    if not open_:
        return issues, None
    ack = usable_ack(s.store, s.candidate, [i.key for i in open_])
    if ack is None:
        return issues, None
    seq, keys = ack
    return [i.model_copy(update={"accepted": "acknowledged"})
            if i.accepted is None and i.key in keys else i for i in issues], seq  # fmt: skip


@dataclass
class _Lists:
    """The inventories' differences over every reporting check, and the tests changed to
    pass; shown only through `shown` (sanitised, scanned)."""

    removed: set[str]
    disabled: set[str]
    added: set[str]
    moved: set[tuple[str, str]]
    changed: set[str]

    def texts(self) -> list[str]:
        pairs = (x for m in self.moved for x in m)
        return [*self.removed, *self.disabled, *self.added, *self.changed, *pairs]

    def map(self, shown: Callable[[str], str]) -> _Lists:
        return _Lists(removed={shown(x) for x in self.removed},
                      disabled={shown(x) for x in self.disabled},
                      added={shown(x) for x in self.added},
                      moved={(shown(a), shown(b)) for a, b in self.moved},
                      changed={shown(x) for x in self.changed})  # fmt: skip


def _compare_all(s: GateState, base: Baseline | None,
                 bodies: _Bodies) -> tuple[_Lists, list[TestCounts]]:  # fmt: skip
    lists, rows = _Lists(set(), set(), set(), set(), set()), []
    for c in s.loaded.policy.checks:
        if c.report is None:
            continue
        base_cases = base.inventory[c.name] if base else ()
        cand = s.reported[c.name].cases or ()
        delta = compare(base_cases, cand, body_of=lambda case, side: _body(bodies, case, side))
        lists.removed.update(delta.removed)
        lists.disabled.update(delta.disabled)
        lists.added.update(delta.added)
        lists.moved.update(delta.moved)
        rows.append(TestCounts(check=c.name, report=c.report, base=counts(base_cases),
                               candidate=counts(cand)))  # fmt: skip
    return lists, rows


def judge_tests(s: GateState, versions: Sequence[FileVersions]) -> TestsJudged:
    """Every reading above, for a candidate whose checks passed."""
    checks = s.loaded.policy.checks
    bodies = _Bodies({fv.path: fv for fv in versions}, {})
    base = baseline(s) if any(c.report is not None for c in checks) else None
    lists, rows = _compare_all(s, base, bodies)
    trusted = _trusted_files(s, versions)
    lists.changed.update(_changed_to_pass(s, trusted, base) if trusted and base else ())
    issues = [*_static(s, versions, bodies),
              *_inventory_issues(sorted(lists.removed), sorted(lists.disabled)),
              *(TestIssue(cls="changed-tests", file=None, test=i,
                          what="the base's version of this test fails on the candidate's code")
                for i in sorted(lists.changed))]  # fmt: skip
    shown = _scanned(s, [*lists.texts(), *(t for i in issues for t in (i.file, i.test) if t)])
    lists = lists.map(shown)
    issues = [i.model_copy(update={"file": i.file and shown(i.file), "what": sanitize(i.what, 300),
                                   "test": i.test and shown(i.test)}) for i in issues]  # fmt: skip
    issues, ack = _accept(s, issues, lists.added | _new_static_tests(versions, bodies))
    cut = [_cut(x) for x in (lists.removed, lists.disabled, lists.added, lists.changed)]
    return TestsJudged(
        not_inventoried=tuple(c.name for c in checks if c.report is None),
        counts=tuple(rows), baseline_seq=base.seq if base else None,
        baseline_cached=base.cached if base else None,
        removed=cut[0][0], disabled=cut[1][0], added=cut[2][0], changed_to_pass=cut[3][0],
        moved=tuple(sorted(lists.moved))[:MAX_TEST_LIST],
        trusted_run=tuple(trusted[:MAX_TEST_LIST]), issues=tuple(issues[:MAX_TEST_LIST]),
        acknowledged=ack,
        truncated=any(t for _, t in cut) or max(len(issues), len(lists.moved)) > MAX_TEST_LIST,
    )  # fmt: skip


def _scanned(s: GateState, texts: Sequence[str]) -> Callable[[str], str]:
    """Test ids and file names are the candidate's text (a parametrised id is made at run
    time, never seen by the scan of the change): both scanners read them before they reach
    a verdict; a line with a finding is shown only by its digest."""
    unique = sorted({sanitize(t, 512) for t in texts})
    if not unique:
        return lambda text: sanitize(text, 512)
    report = scan_with_policy([ScanItem.whole("(test ids)", "\n".join(unique))], s.loaded,
                              s.budget)  # fmt: skip
    hidden = {unique[f.line - 1] for f in report.findings
              if not f.allowed and 0 < f.line <= len(unique)}  # fmt: skip

    def shown(text: str) -> str:
        clean = sanitize(text, 512)
        if clean in hidden:
            return f"[redacted: a secret in a test id, {Sha256Digest.of(clean.encode())}]"
        return clean

    return shown
