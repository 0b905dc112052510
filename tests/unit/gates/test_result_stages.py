"""The secrets stage's canary check reads each whole text as it is: a gate whose change the
scan-result cache answers never splits that change into lines (items split lazily)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gatekeeper.gates.result.stages import canary_reasons
from gatekeeper.scan import ScanItem
from gatekeeper.scan.canary import plant_canary

RUN = "20261201T150000Z-0123abcd"


class _Unsplit(ScanItem):
    """A scan item that fails the test when anything splits it into lines."""

    __slots__ = ()

    @property
    def lines(self) -> Sequence[tuple[int, str]]:
        raise AssertionError("the item was split into lines")


def test_the_canary_check_reads_a_whole_text_without_splitting_it(oms_home: Path) -> None:
    token = plant_canary(RUN)
    items = [_Unsplit.whole("clean.txt", "nothing here\n"),
             _Unsplit.whole("notes.md", f"line one\nsee {token} here\n")]  # fmt: skip
    assert canary_reasons(items) == [
        f"canary of agent run {RUN} found in notes.md: the agent reached oms' state"
    ]


def test_the_canary_check_still_reads_the_lines_a_change_adds(oms_home: Path) -> None:
    token = plant_canary(RUN)
    assert canary_reasons([ScanItem("added.md", [(4, "see"), (5, f"{token} here")])]) == [
        f"canary of agent run {RUN} found in added.md: the agent reached oms' state"
    ]
    assert canary_reasons([ScanItem("split.md", [(1, token[:20]), (2, token[20:])])]) == []
