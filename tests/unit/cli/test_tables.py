"""Human output for people: rich tables on a terminal, plain grep-able lines otherwise,
colour only without NO_COLOR, untrusted text neither markup nor terminal control, the tail
of a failed check, a refused delivery beside its verdict."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from gatekeeper.cli import render
from gatekeeper.cli.render import Outcome, View
from gatekeeper.errors import Blocked

COMMIT, BASE = "c" * 40, "b" * 40
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own styling
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-7]|9[0-7]|38)[;m]")
BOX = re.compile("[\u2500-\u257f]")
HOSTILE = "[bold]x[/bold] :smile: \x1b[2J\u202e"
SHOWN = "[bold]x[/bold] :smile: \\u001b[2J\\u202e"  # as printed: literal, neutralised

TTY = View(rich=True, color=True, width=100)
TTY_NO_COLOR = View(rich=True, color=False, width=100)


def check(name: str, code: int | None, stderr: str = "", **over: Any) -> dict[str, Any]:
    return {"name": name, "exit_code": code, "timed_out": False, "signal": None,
            "duration_ms": 1500, "stdout_tail": "", "stderr_tail": stderr, **over}  # fmt: skip


def verdict(decision: str = "FAILED", **over: Any) -> dict[str, Any]:
    failing = "\n".join(f"line {i}" for i in range(40)) + f"\nFAILED {HOSTILE}\n"
    return {"decision": decision, "commit": COMMIT, "base": BASE, "evidence_seq": 7,
            "reasons": ["check unit exited 1"], "delivered": None,
            "checks": [check("unit", 1, failing), check("lint", 0, "fine\n")], **over}  # fmt: skip


FINDINGS = {"blocking": 1, "findings": [
    {"file": f"a{HOSTILE}.py", "line": 3, "rule": "aws", "scanner": "gitleaks",
     "preview": "AKIA…", "allowed": False, "fingerprint": "f" * 64},
]}  # fmt: skip

DOCTOR: dict[str, Any] = {
    "repository": {"ok": True, "repo_id": "r1"},
    "bwrap": {"path": "/usr/bin/bwrap", "version": "0.8.0", "source": "system"},
    "probe": {"ok": False, "failures": ["no userns"], "duration_s": 0.1},
    "apparmor": {"restrict_unprivileged_userns": "1"},
    "gitleaks": {"ok": True, "version": "8.18.4"},
    "key": {"ok": False, "error": f"no key {HOSTILE}"},
    "evidence": {"intact": None, "initialised": False},
    "kernel_memory": {"bounded": True, "cgroup": "v1", "reason": "cgroup v1"},
    "problems": ["sandbox probe failed"],
    "remedies": ["oms init --repo DIR"],
}


def plain(lines: list[str]) -> str:
    return SGR.sub("", "\n".join(lines))


# ------------------------------------------------------------- plain, non-tty ---


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(lambda: render.result_lines(verdict()), id="result"),
        pytest.param(lambda: render.scan_lines(FINDINGS), id="scan"),
        pytest.param(lambda: render.doctor_lines(DOCTOR, False), id="doctor"),
    ],
)
def test_off_a_terminal_output_is_plain_lines_without_escapes_or_boxes(lines: Any) -> None:
    text = "\n".join(lines())
    assert "\x1b" not in text and not BOX.search(text)


def test_plain_result_lists_each_check_and_the_tail_of_the_failed_one() -> None:
    lines = render.result_lines(verdict())
    assert lines[:2] == ["FAILED: cccccccccccc (base bbbbbbbbbbbb), evidence seq 7",
                         "  - check unit exited 1"]  # fmt: skip
    assert "  check unit: exit 1 in 1.5 s" in lines and "  check lint: ok in 1.5 s" in lines
    at = lines.index("check unit (exit 1): last 20 line(s) of stderr:")
    assert lines[at + 1 :] == [*(f"  line {i}" for i in range(21, 40)), f"  FAILED {SHOWN}"]
    assert not any("fine" in x for x in lines)  # a passing check's output is not shown


def test_tail_of_each_stream_and_of_a_silent_check() -> None:
    both = check("t", None, "err\n", stdout_tail="out\n", timed_out=True)
    assert render.check_tail_lines(both) == [
        "check t (timed out): last 1 line(s) of stdout:", "  out",
        "check t (timed out): last 1 line(s) of stderr:", "  err",
    ]  # fmt: skip
    assert render.check_tail_lines(check("s", None, signal=9)) == [
        "check s (killed by signal 9): no output"
    ]


def test_a_refused_delivery_is_shown_beside_the_verdict() -> None:
    refused = verdict("READY_FOR_HUMAN", reasons=[], checks=[check("unit", 0)],
                      delivered={"error": "branch main is checked out\nmore"})  # fmt: skip
    lines = render.result_lines(refused)
    assert lines[0].startswith("READY_FOR_HUMAN: cccccccccccc")
    assert lines[-1] == "delivery refused: branch main is checked out"
    gate = render.gate_lines(refused, render.PLAIN)
    assert gate[-2] == "delivery refused: branch main is checked out"
    assert gate[-1].startswith("next: review cccccccccccc and merge it yourself")


def test_ready_ends_with_the_next_step_on_a_terminal_too() -> None:
    ready = verdict("READY_FOR_HUMAN", reasons=[], checks=[check("unit", 0)])
    text = plain(render.gate_lines(ready, TTY)).strip()
    assert text.splitlines()[-1].startswith("next: review cccccccccccc and merge it yourself")
    assert "oms never merges" in text


def test_a_delivery_is_shown() -> None:
    done = {"branch": {"branch": "ok", "action": "created", "commit": COMMIT},
            "push": {"remote": "backup", "branch": "ok"}}  # fmt: skip
    lines = render.delivery_lines({"delivered": done})
    assert lines == ["delivered: branch ok created at cccccccccccc", "delivered: pushed to backup"]


# ------------------------------------------------------------------ terminal ---


def test_on_a_terminal_checks_are_a_table_with_the_failed_tail_below() -> None:
    lines = render.result_lines(verdict(), TTY)
    text = plain(lines)
    assert COLOUR.search("\n".join(lines)), "colour on a terminal without NO_COLOR"
    header = next(x for x in text.splitlines() if "check" in x and "result" in x)
    assert header.split() == ["check", "result", "seconds"]
    assert re.search(r"unit\s+exit 1\s+1\.5", text) and re.search(r"lint\s+ok\s+1\.5", text)
    table_end = text.index("lint")
    assert text.index("last 20 line(s) of stderr") > table_end
    assert f"FAILED {SHOWN}" in text


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(lambda v: render.result_lines(verdict(), v), id="result"),
        pytest.param(lambda v: render.scan_lines(FINDINGS, v), id="scan"),
        pytest.param(lambda v: render.doctor_lines(DOCTOR, False, v), id="doctor"),
    ],
)
def test_on_a_terminal_untrusted_text_is_neither_markup_nor_control(lines: Any) -> None:
    for view in (TTY, TTY_NO_COLOR):
        out = lines(view)
        assert "\x1b" not in SGR.sub("", "\n".join(out)), "only rich's own styling is raw"
        assert "\u202e" not in "\n".join(out)
        assert "[bold]x[/bold] :smile: \\u001b[2J\\u202e" in plain(out)


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(lambda v: render.result_lines(verdict(), v), id="result"),
        pytest.param(lambda v: render.scan_lines(FINDINGS, v), id="scan"),
        pytest.param(lambda v: render.doctor_lines(DOCTOR, False, v), id="doctor"),
    ],
)
def test_no_color_means_no_colour_on_a_terminal(lines: Any) -> None:
    assert COLOUR.search("\n".join(lines(TTY)))
    assert not COLOUR.search("\n".join(lines(TTY_NO_COLOR)))


def test_findings_table_names_place_rule_scanner_and_policy() -> None:
    text = plain(render.scan_lines(FINDINGS, TTY))
    assert re.search(r"where\s+rule\s+scanner\s+preview\s+policy", text)
    assert "aws" in text and "gitleaks" in text and "blocks" in text
    assert text.splitlines()[-1] == "1 finding(s) not allowed by policy"


def test_doctor_table_has_a_status_per_section_then_problems_and_remedies() -> None:
    rows = {x.split()[0]: x.split()[1] for x in plain(render.doctor_lines(DOCTOR, False, TTY))
            .splitlines() if len(x.split()) > 1}  # fmt: skip
    assert rows["repository"] == "ok" and rows["bwrap"] == "ok" and rows["gitleaks"] == "ok"
    assert rows["probe"] == "problem" and rows["key"] == "problem"
    assert rows["evidence"] == "problem" and rows["apparmor"] == "info"
    text = plain(render.doctor_lines(DOCTOR, False, TTY))
    assert "problem: sandbox probe failed" in text and "remedy:  oms init --repo DIR" in text
    assert text.splitlines()[-1] == "NOT READY"


def test_doctor_table_shows_the_work_section() -> None:
    bad = {"ok": False, "transitions": 3, "entries": 3, "interrupted": [],
           "mismatches": [{"seq": 7, "problem": "seq 7 is not in transitions"}]}  # fmt: skip
    cut = {"ok": True, "transitions": 2, "entries": 3, "mismatches": [],
           "interrupted": [{"seq": 9, "kind": "work.dispatch.run", "nonce": "n-1234567"}],
           "warning": "never committed"}  # fmt: skip
    for part, status, says in ((bad, "problem", "1 MISMATCHED"), (cut, "ok", "seq 9")):
        text = plain(render.doctor_lines({**DOCTOR, "work": part}, False, TTY))
        (row,) = [x for x in text.splitlines() if x.split()[:1] == ["work"]]
        assert row.split()[1] == status and says in text
        assert says in "\n".join(render.doctor_lines({**DOCTOR, "work": part}, False))


# ------------------------------------------------------------- which view ---


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("tty", "no_color", "expected"),
    [(False, None, (False, False)), (True, None, (True, True)), (True, "1", (True, False)),
     (True, "", (True, True))],  # no-color.org: set and not empty
)  # fmt: skip
def test_view_follows_the_terminal_and_no_color(
    monkeypatch: pytest.MonkeyPatch, tty: bool, no_color: str | None, expected: tuple[bool, bool]
) -> None:
    monkeypatch.setattr("sys.stdout", _Tty() if tty else io.StringIO())
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    view = View.detect()
    assert (view.rich, view.color) == expected


def test_paging_only_on_a_terminal_and_only_past_a_screen() -> None:
    assert render.paged(30, tty=True, rows=24) and not render.paged(10, tty=True, rows=24)
    assert not render.paged(300, tty=False, rows=24)


# ------------------------------------------------------- refusal with data ---


@click.command()
@render.showing_refusals(render.refused_result_lines)
def refusing() -> Outcome:
    refused = verdict("READY_FOR_HUMAN", reasons=[], checks=[],
                      delivered={"error": "branch main is checked out"})  # fmt: skip
    raise Blocked("branch main is checked out", data=refused)


def test_a_refusal_carrying_a_verdict_shows_it_on_stdout_and_the_refusal_on_stderr(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(refusing, [])
    assert result.exit_code == 3
    assert result.stdout.splitlines() == [
        "READY_FOR_HUMAN: cccccccccccc (base bbbbbbbbbbbb), evidence seq 7",
        "delivery refused: branch main is checked out",
    ]
    assert result.stderr == "oms: blocked: branch main is checked out\n"


def test_with_json_a_refusal_carrying_a_verdict_is_still_one_object() -> None:
    result = CliRunner().invoke(refusing, ["--json"])
    assert result.exit_code == 3 and result.stdout.count("\n") == 1
    assert '"delivered": {"error": "branch main is checked out"}' in result.stdout
