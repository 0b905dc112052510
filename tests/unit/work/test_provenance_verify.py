"""The offline verifier's fixed parts: the schema it ships, the constants it shares with
`oms evidence attest`, the subject rule, and that its command path stays light (the checks
themselves run end to end in tests/e2e/test_provenance_verify.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema

from gatekeeper.gates.result.verdict import Decision
from gatekeeper.work import provenance, provenance_verify
from gatekeeper.work.provenance_verify import _subject

ROOT = Path(__file__).resolve().parents[3]
SHA, TREE = "a" * 40, "b" * 40


def test_the_schema_is_package_data_and_the_docs_link_it() -> None:
    schema = json.loads(provenance_verify.SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shipped = data["tool"]["setuptools"]["package-data"]["gatekeeper.work"]
    assert provenance_verify.SCHEMA_FILE.name in shipped
    assert (
        "(../gatekeeper/work/provenance.schema.json)"
        in (ROOT / "docs" / "provenance.md").read_text()
    )
    assert not (ROOT / "docs" / "provenance.schema.json").exists()  # one copy, not two


def test_the_verifier_accepts_what_attest_signs() -> None:
    assert provenance.PREDICATE == provenance_verify.PREDICATE
    assert Decision.READY.value == provenance_verify.READY


def test_subjects_name_exactly_the_commit_and_its_tree() -> None:
    good = [{"name": "commit", "digest": {"gitCommit": SHA}},
            {"name": "tree", "digest": {"gitTree": TREE}}]  # fmt: skip
    assert _subject(good, SHA, TREE).ok
    assert not _subject(good, "c" * 40, TREE).ok
    assert not _subject(good, SHA, "d" * 40).ok
    assert not _subject([*good, {"name": "x", "digest": {"gitCommit": "c" * 40}}], SHA, TREE).ok
    assert not _subject([good[0], {"digest": {"gitTree": TREE, "sha256": "e" * 64}}], SHA,
                        TREE).ok  # fmt: skip
    assert not _subject(good[:1], SHA, TREE).ok


def test_the_verify_command_imports_none_of_the_gates_readers() -> None:
    """`oms evidence verify --commit` runs on every pull request: loading its command and
    module must not pull in the log readers, the scanners or the gates' payloads."""
    code = ("import sys, gatekeeper.cli.main, gatekeeper.cli.evidence, "
            "gatekeeper.work.provenance_verify; print('\\n'.join(sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()  # fmt: skip
    heavy = ("gatekeeper.gates.result", "gatekeeper.gates.records", "gatekeeper.scan",
             "gatekeeper.cli.evidence_log", "gatekeeper.gates.policy_file",
             "gatekeeper.work.provenance", "jsonschema")  # fmt: skip
    loaded = [m for m in out if m.startswith(heavy) and m != "gatekeeper.work.provenance_verify"]
    assert loaded == []
