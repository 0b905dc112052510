"""The typed results of `oms init` / `evidence note|key|repair`: today's JSON, exactly."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from gatekeeper.gates.records import (
    AdoptedAppend,
    Initialised,
    KeyInfo,
    NoteRecorded,
    NothingToRepair,
    Quarantined,
    repair_result,
)

# What EvidenceStore.repair answers, each shape with the variant it must become.
REPAIRS: list[tuple[dict[str, Any], type[pydantic.BaseModel]]] = [
    ({"repaired": False, "quarantined_bytes": 0}, NothingToRepair),
    ({"repaired": True, "adopted_entries": 2, "quarantined_bytes": 0}, AdoptedAppend),
    ({"quarantined_bytes": 9, "quarantined_entries": 1, "quarantine_file": "q-1.jsonl",
      "repaired": True, "seq": 7}, Quarantined),
]  # fmt: skip


@pytest.mark.parametrize(("answer", "variant"), REPAIRS)
def test_each_repair_answer_becomes_its_variant_with_the_same_json(
    answer: dict[str, Any], variant: type[pydantic.BaseModel]
) -> None:
    result = repair_result(answer)
    assert type(result) is variant
    assert json.dumps(result.to_json()) == json.dumps(answer)


def test_a_repair_answer_of_an_unknown_shape_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError):
        repair_result({"repaired": True, "quarantined_bytes": 0, "surprise": 1})


def test_init_note_and_key_keep_their_keys_in_order() -> None:
    init = Initialised(created=True, state_root="/s", repo_id="r", key_id="k", entries=1,
                       default_branch=None)  # fmt: skip
    assert list(init.to_json()) == [
        "created", "state_root", "repo_id", "key_id", "entries", "default_branch",
        "trusted_mark",
    ]  # fmt: skip
    note = NoteRecorded(seq=3, kind="note", time="t", blobs=("a" * 64,))
    assert note.to_json() == {"seq": 3, "kind": "note", "time": "t", "blobs": ["a" * 64]}
    key = KeyInfo(key_id="k", public_key_pem="PEM", note_name="oms/r", signer_key="ed25519:K")
    assert list(key.to_json()) == ["key_id", "public_key_pem", "note_name", "signer_key"]
