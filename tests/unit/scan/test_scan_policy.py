"""scan_with_policy: both real scanners under the policy, allowed fingerprints marked once."""

from __future__ import annotations

import random

import corpus

from gatekeeper.scan import Finding, ScanItem, fingerprint
from gatekeeper.scan.policy import ScanReport, allow_by_path, mark_allowed, scan_with_policy
from policy import LoadedPolicy, parse_policy


def policy_allowing(*fingerprints: str) -> LoadedPolicy:
    listed = ", ".join(f'"{fp}"' for fp in fingerprints)
    toml = f"version = 1\n[scanners]\nallow_fingerprints = [{listed}]\n"
    return parse_policy(toml.encode(), "test")


def two_keys() -> tuple[str, str]:
    rng = random.Random(11)
    return corpus.aws_access_key_id(rng), corpus.aws_access_key_id(rng)


def items(*keys: str) -> list[ScanItem]:
    return [ScanItem.whole(f"k{n}.py", f'KEY = "{k}"\n') for n, k in enumerate(keys)]


def test_allowed_fingerprint_is_marked_and_does_not_block() -> None:
    allowed, other = two_keys()
    report = scan_with_policy(items(allowed, other), policy_allowing(fingerprint(allowed)))
    assert {f.scanner for f in report.findings} == {"gitleaks", "detect-secrets"}
    by_file = {(f.file, f.allowed) for f in report.findings}
    assert by_file == {("k0.py", True), ("k1.py", False)}
    assert report.blocking and all(f.file == "k1.py" for f in report.blocking)
    assert [i.name for i in report.scanners] == ["gitleaks", "detect-secrets"]


def test_without_allowed_fingerprints_every_finding_blocks() -> None:
    key, _ = two_keys()
    report = scan_with_policy(items(key), policy_allowing())
    assert report.findings and report.blocking == report.findings
    assert not any(f.allowed for f in report.findings)


def test_only_keeps_the_marks_of_the_findings_it_selects() -> None:
    a = Finding("gitleaks", "r", "a.py", 1, "f" * 64, "p", allowed=True)
    b = Finding("gitleaks", "r", "b.py", 1, "e" * 64, "p")
    report = ScanReport((a, b), ())
    kept = report.only(lambda fs: [f for f in fs if f.file == "a.py"])
    assert kept.findings == (a,) and kept.findings[0].allowed and kept.blocking == ()
    assert report.blocking == (b,)  # the report itself is unchanged (frozen)


def test_mark_allowed_sets_each_flag_from_the_fingerprint() -> None:
    found = [Finding("detect-secrets", "r", "x", n, fp, "p") for n, fp in ((1, "a"), (2, "b"))]
    marked = mark_allowed(found, ["b"])
    assert [f.allowed for f in marked] == [False, True]


def test_path_rules_allow_findings_by_path_and_by_rule_in_its_paths() -> None:
    rules = parse_policy(
        b'version = 1\n[scanners]\nexclude_paths = ["tests/fixtures/", "*.snap"]\n'
        b'[[scanners.allow]]\nrule = "Hex High Entropy String"\npaths = ["data/**/*.json"]\n',
        "test",
    ).policy.scanners

    def at(path: str, rule: str = "generic-api-key") -> Finding:
        return Finding("gitleaks", rule, path, 1, "f" * 64, "p")

    found = [
        at("tests/fixtures/keys.py"),
        at("src/ui/view.snap"),
        at("tests/fixtures/keys.py (as bytes)"),
        at("data/a/b.json", "Hex High Entropy String"),
        at("data/a/b.json"),  # another rule in the allowed paths
        at("src/tests/fixtures/keys.py"),  # the directory is anchored at the root
        at("app/settings.py", "Hex High Entropy String"),
    ]
    allowed = [f.allowed for f in allow_by_path(found, rules)]
    assert allowed == [True, True, True, True, False, False, False]
    assert allow_by_path(found, policy_allowing().policy.scanners) == tuple(found)
