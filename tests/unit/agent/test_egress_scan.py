"""egress_scan: leaves scanned once per run, verdicts cached, secrets redacted in place,
canaries found behind JSON escapes. A fake scanner (one rule: `SEKRET-` and 16 letters)
keeps these fast; the real scanners run in tests/e2e/test_agent_egress.py."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import pytest

from gatekeeper.agent.egress_scan import REDACTED, ScanCache, digest, inspect, redact
from gatekeeper.scan import Finding, ScanItem, ScannerUnavailable, fingerprint
from gatekeeper.scan.policy import ScanReport
from gatekeeper.scan.redact import preview
from policy import LoadedPolicy, default_policy

SECRET = re.compile(r"SEKRET-[A-Z]{16}")
ALLOWED = "SEKRET-" + "A" * 16
MARK = REDACTED.format(rule="fake-rule")


def secret(tail: str = "QWERTYUIOPASDFGH") -> str:
    return "SEKRET-" + tail


class FakeScan:
    """Finds SECRET in each item's lines, as a scanner reports it; counts its calls."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[ScanItem]] = []
        self.fail = fail

    def __call__(self, items: Sequence[ScanItem], loaded: LoadedPolicy) -> ScanReport:
        self.calls.append(list(items))
        if self.fail:
            raise ScannerUnavailable("gitleaks timed out after 1 s")
        found = []
        for item in items:
            for n, line in item.lines:
                for m in SECRET.finditer(line):
                    s = m.group(0)
                    found.append(Finding("fake", "fake-rule", item.path, n, fingerprint(s),
                                         preview(s), allowed=s == ALLOWED))  # fmt: skip
        return ScanReport(tuple(found), ())

    @property
    def scanned(self) -> list[str]:
        return ["\n".join(t for _, t in item.lines) for call in self.calls for item in call]


def cache(scan: FakeScan) -> ScanCache:
    return ScanCache(default_policy(), scan)


def body(*messages: str) -> bytes:
    doc = {"model": "m", "messages": [{"role": "user", "content": m} for m in messages]}
    return json.dumps(doc).encode()


def test_redact_replaces_only_the_secret_and_every_occurrence_of_it() -> None:
    s = secret()
    text = f"line one\nkey {s} and again {s}!\nlast"
    f = Finding("fake", "fake-rule", "x", 2, fingerprint(s), preview(s))
    assert redact(text, [f]) == f"line one\nkey {MARK} and again {MARK}!\nlast"


def test_redact_finds_a_short_secret_without_a_preview_prefix() -> None:
    s = "hunter2-xyz"  # < 20 chars: the preview shows no prefix
    f = Finding("fake", "pw", "x", 1, fingerprint(s), preview(s))
    assert redact(f"pw={s};", [f]) == "pw=" + REDACTED.format(rule="pw") + ";"


def test_redact_finds_a_secret_over_several_lines() -> None:
    s = "BEGIN\n" + "Z" * 30 + "\nEND"
    f = Finding("fake", "pem", "x", 2, fingerprint(s), preview(s), end_line=4)
    assert redact(f"a\n{s}\nb", [f]) == "a\n" + REDACTED.format(rule="pem") + "\nb"


def test_redact_replaces_whole_lines_when_the_secret_cannot_be_found() -> None:
    f = Finding("fake", "fake-rule", "x", 2, "0" * 64, preview("y" * 25))
    assert redact("keep\nsomething secret\nkeep", [f]) == f"keep\n{MARK}\nkeep"


def test_redact_replaces_the_longer_secret_first_so_none_of_it_stays() -> None:
    short, long = "abcdefghij-12345678", "abcdefghij-12345678-more-of-it"
    fs = [Finding("fake", r, "x", 1, fingerprint(s), preview(s))
          for r, s in (("short", short), ("long", long))]  # fmt: skip
    out = redact(f"{long} {short}", fs)
    assert out == REDACTED.format(rule="long") + " " + REDACTED.format(rule="short")


def test_a_clean_body_is_forwarded_byte_for_byte() -> None:
    raw = b'{"messages": [{"role": "user", "content": "hello"}],   "x": 1}'
    ins = inspect(raw, [], [], cache(FakeScan()), [])
    assert ins.body == raw and not ins.redacted and not ins.findings and not ins.canary


def test_a_secret_in_a_leaf_is_redacted_and_the_body_stays_the_same_json() -> None:
    s = secret()
    ins = inspect(body("hi", f"use {s} now"), [], [], cache(FakeScan()), [])
    assert ins.redacted and s.encode() not in ins.body
    doc = json.loads(ins.body)
    assert [m["content"] for m in doc["messages"]] == ["hi", f"use {MARK} now"]
    assert doc["model"] == "m" and {f.fingerprint for f in ins.findings} == {fingerprint(s)}


def test_a_secret_in_a_key_is_redacted_too() -> None:
    s = secret()
    ins = inspect(json.dumps({s: 1}).encode(), [], [], cache(FakeScan()), [])
    assert json.loads(ins.body) == {MARK: 1}


def test_an_allowed_finding_is_not_redacted() -> None:
    raw = body(f"fixture {ALLOWED}")
    ins = inspect(raw, [], [], cache(FakeScan()), [])
    assert ins.body == raw and not ins.findings


def test_a_resent_conversation_scans_only_its_new_leaves() -> None:
    scan = FakeScan()
    c = cache(scan)
    inspect(body("first question"), [], [], c, [])
    before, calls = c.scanned_bytes, len(scan.calls)
    inspect(body("first question", "second question"), [], [], c, [])
    assert len(scan.calls) == calls + 1  # one scan call for all new leaves together
    assert scan.scanned[-1:] == ["second question"]
    assert c.scanned_bytes - before == len("second question")
    inspect(body("first question", "second question"), [], [], c, [])
    assert len(scan.calls) == calls + 1  # nothing new: no scan at all


def test_a_leaf_redacted_once_is_redacted_again_when_resent_without_a_rescan() -> None:
    s = secret()
    scan = FakeScan()
    c = cache(scan)
    first = inspect(body(f"here: {s}"), [], [], c, [])
    again = inspect(body(f"here: {s}", "and more"), [], [], c, [])
    assert first.redacted and again.redacted and s.encode() not in again.body
    assert json.loads(again.body)["messages"][0]["content"] == f"here: {MARK}"
    assert [[t for _, t in i.lines] for i in scan.calls[-1]] == [["and more"]]  # no rescan


def test_a_body_with_duplicate_keys_is_scanned_and_redacted_as_one_text() -> None:
    s = secret()
    raw = ('{"content": "' + s + '", "content": "clean"}').encode()
    scan = FakeScan()
    ins = inspect(raw, [], [], cache(scan), [])
    assert scan.scanned == [raw.decode()]
    assert ins.redacted and s.encode() not in ins.body and b'"clean"' in ins.body


def test_a_body_that_is_not_json_is_scanned_and_redacted_as_text() -> None:
    s = secret()
    ins = inspect(f"plain {s} text".encode(), [], [], cache(FakeScan()), [])
    assert ins.body == f"plain {MARK} text".encode()


def test_header_values_are_scanned_and_redacted() -> None:
    s = secret()
    ins = inspect(body("hi"), [("user-agent", f"x/{s}")], [], cache(FakeScan()), [])
    assert ins.headers == (("user-agent", f"x/{MARK}"),) and ins.redacted


def test_a_canary_behind_json_escapes_is_found_and_nothing_is_scanned() -> None:
    canary = "oms-canary-5f3a9c"
    escaped = "".join(f"\\u{ord(c):04x}" for c in canary)
    scan = FakeScan()
    ins = inspect(('{"content": "' + escaped + '"}').encode(), [], [], cache(scan), [canary])
    assert ins.canary and not scan.calls


def test_a_canary_in_a_body_that_is_not_json_is_found() -> None:
    ins = inspect(b"\xff raw oms-canary-1 bytes", [], [], cache(FakeScan()), ["oms-canary-1"])
    assert ins.canary


def test_an_empty_canary_token_matches_nothing() -> None:
    assert not inspect(body("hi"), [], [], cache(FakeScan()), [""]).canary


def test_a_scanner_failure_is_raised_and_caches_nothing() -> None:
    failing = FakeScan(fail=True)
    c = cache(failing)
    with pytest.raises(ScannerUnavailable):
        inspect(body("hi"), [], [], c, [])
    ok = FakeScan()
    c._scan = ok  # the same cache, now with a working scanner: it must scan again
    inspect(body("hi"), [], [], c, [])
    assert ok.scanned == ["modelmmessagesroleusercontenthi"]


def test_a_deeply_nested_body_is_walked_without_recursion() -> None:
    s = secret()
    raw = ("[" * 900 + json.dumps(s) + "]" * 900).encode()
    ins = inspect(raw, [], [], cache(FakeScan()), [])
    assert ins.redacted and s.encode() not in ins.body


def test_digest_is_the_sha256_of_the_text() -> None:
    assert digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def blocks(*texts: str) -> bytes:
    """One user message whose content is text blocks: the shape a split secret takes."""
    content = [{"type": "text", "text": t} for t in texts]
    return json.dumps({"messages": [{"role": "user", "content": content}]}).encode()


def texts_of(raw: bytes) -> list[str]:
    return [b["text"] for b in json.loads(raw)["messages"][0]["content"]]


@pytest.mark.parametrize("at", [1, 6, 7, 8, 15, 22])
def test_a_secret_split_across_two_blocks_is_found_and_each_part_redacted(at: int) -> None:
    s = secret()
    ins = inspect(blocks(f"see {s[:at]}", f"{s[at:]} there"), [], [], cache(FakeScan()), [])
    assert ins.redacted and {f.fingerprint for f in ins.findings} == {fingerprint(s)}
    assert texts_of(ins.body) == [f"see {MARK}", f"{MARK} there"]


@pytest.mark.parametrize("cuts", [(3, 9), (7, 8), (1, 22)])
def test_a_secret_split_across_three_blocks_redacts_its_part_in_each(
    cuts: tuple[int, int],
) -> None:
    s = secret()
    a, b = cuts
    ins = inspect(blocks(s[:a], s[a:b], s[b:] + " tail"), [], [], cache(FakeScan()), [])
    assert texts_of(ins.body) == [MARK, MARK, f"{MARK} tail"]


def test_a_secret_split_between_a_key_and_its_value_is_found() -> None:
    s = secret()
    ins = inspect(json.dumps({s[:9]: s[9:]}).encode(), [], [], cache(FakeScan()), [])
    assert json.loads(ins.body) == {MARK: MARK}


def test_the_new_leaves_are_one_item_in_document_order_without_a_separator() -> None:
    scan = FakeScan()
    inspect(json.dumps({"a": ["b", {"c": "d"}], "e": "f"}).encode(), [], [], cache(scan), [])
    assert scan.scanned == ["abcdef"]


def test_a_leaf_partly_redacted_stays_so_when_resent_alone() -> None:
    s = secret()
    c = cache(FakeScan())
    inspect(blocks(f"x {s[:10]}", s[10:]), [], [], c, [])
    again = inspect(blocks(f"x {s[:10]}", "other"), [], [], c, [])
    assert texts_of(again.body) == [f"x {MARK}", "other"]


def test_a_secret_split_across_two_requests_is_a_stated_limit() -> None:
    """docs/threat-model.md: the first part was seen (and cached) alone, so the second
    request's join holds only the second part; nothing is found."""
    s = secret()
    c = cache(FakeScan())
    inspect(blocks(s[:10]), [], [], c, [])
    assert not inspect(blocks(s[:10], s[10:]), [], [], c, []).findings


def test_query_values_are_scanned_each_on_its_own_and_redacted() -> None:
    s = secret()
    scan = FakeScan()
    ins = inspect(body("hi"), [("accept", "x")], [("beta", f"{s}")], cache(scan), [])
    assert ins.query == (("beta", MARK),) and ins.headers == (("accept", "x"),)
    assert sorted(scan.scanned) == sorted(["modelmmessagesroleusercontenthi", "x", s])


def test_a_canary_split_across_two_leaves_is_found() -> None:
    ins = inspect(blocks("oms-can", "ary-1"), [], [], cache(FakeScan()), ["oms-canary-1"])
    assert ins.canary
