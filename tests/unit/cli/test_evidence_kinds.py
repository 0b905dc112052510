"""`oms evidence log --kind` knows every kind oms writes: each payload model's kind is in a
family it accepts, and anything else is a one-line usage error."""

from __future__ import annotations

import importlib

import pytest

from evidence import Payload
from evidence.entry import GENESIS_KIND
from gatekeeper.cli.evidence_log import FAMILIES, known_kind
from gatekeeper.errors import UsageError

WRITERS = (
    "gatekeeper.agent.payloads", "gatekeeper.gates.result.baseline",
    "gatekeeper.gates.result.payloads", "gatekeeper.gates.result.acknowledge",
    "gatekeeper.gates.toolchain.payloads", "gatekeeper.gates.transfer.payloads",
    "gatekeeper.work.grade", "gatekeeper.work.payloads", "gatekeeper.work.runs.board",
)  # fmt: skip


def _kinds() -> set[str]:
    for module in WRITERS:
        importlib.import_module(module)
    seen, todo = set(), list(Payload.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        kind = getattr(cls, "KIND", None)
        if isinstance(kind, str) and kind:  # a base class's is empty
            seen.add(kind)
    return seen | {GENESIS_KIND, "repair"}


def test_every_kind_oms_writes_is_known() -> None:
    kinds = _kinds()
    assert len(kinds) > 20
    for kind in kinds:
        assert known_kind(kind) == kind


@pytest.mark.parametrize("wanted", ["nonsense", "results", "", ".result"])
def test_an_unknown_kind_is_a_usage_error_naming_the_families(wanted: str) -> None:
    with pytest.raises(UsageError) as err:
        known_kind(wanted)
    assert ", ".join(FAMILIES) in err.value.message and "\n" not in err.value.message
