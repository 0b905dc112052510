"""The trusted mark's view of a verdict names what the result gate writes."""

from __future__ import annotations

from gatekeeper.gates.mark import VerdictSeen
from gatekeeper.gates.result.payloads import ResultRecord
from gatekeeper.gates.result.verdict import Decision


def test_the_marks_view_of_a_verdict_is_the_result_gates_entry() -> None:
    assert VerdictSeen.KIND == ResultRecord.KIND
    assert VerdictSeen.READY == Decision.READY.value
    assert set(VerdictSeen.model_fields) <= set(ResultRecord.model_fields)
