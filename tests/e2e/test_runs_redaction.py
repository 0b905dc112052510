"""A provider's answer is redacted before oms stores or shows it (DESIGN.md, "Secrets never
leave"), end to end: a real `ClientSession` over stdio drives `oms mcp` against a lab whose
scripted `command:` roles (under the real `oms agent run`, bwrap) answer with a GitHub token
that each joins at run time from pieces (no file of the test or the policy holds it whole).

Every MCP answer of a consult, a summon, a fan-out, the run's full status, every artifact
and the run list is read, and then every file under `$OMS_HOME` (work.db and its WAL, the
evidence log and blobs, the scan cache): the token is nowhere, the redaction marker is.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import corpus
import pytest
from support.mcp_session import text_of
from support.runs import NEEDS, Mcp, module_env, run_lab

from gatekeeper.scan.redact import REDACTION_MARK

pytestmark = pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")

TOKEN = corpus.github_pat(random.Random(29))
LEAK = "leak:" + ":".join((TOKEN[:3], TOKEN[3:20], TOKEN[20:]))  # joined by the provider
MARK = REDACTION_MARK.split("{", 1)[0]  # "[oms: line redacted: "
LEAKERS = ("qa", "critic", "researcher")


@pytest.fixture(scope="module")
def leaked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    """(`$OMS_HOME`, the text of every MCP answer) after a consult, a summon and a fan-out
    whose providers all answered the token, and every read of what they left."""
    root = tmp_path_factory.mktemp("runs-redaction")
    with pytest.MonkeyPatch.context() as mp:
        env = module_env(root, mp)
        lab = run_lab(root, env, modes=dict.fromkeys(LEAKERS, LEAK))
        with Mcp(lab) as mcp:
            sent: list[str] = []

            def ok(name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
                result = mcp.call(name, args)
                sent.append(text_of(result))
                doc = result.structured_content or {}
                assert not result.is_error and doc.get("ok") is True, (name, sent[-1])
                data: dict[str, Any] = doc["data"]
                return data

            consult = ok("oms_consult", {"goal": "Which tests are missing?", "role": "qa"})
            [answered] = consult["responses"]
            assert answered["ok"] is True and answered["redacted"] >= 1, answered
            rid = consult["run_id"]
            ok("oms_summon", {"run_id": rid, "role": "critic", "brief": "Poke holes"})
            ok("oms_fanout", {"run_id": rid, "items": [{"role": "researcher", "brief": "A"}]})
            full = ok("oms_status", {"run_id": rid, "detail": "full"})
            for art in full["all_artifacts"]:
                ok("oms_read_artifact", {"run_id": rid, "ref": art["ref"]})
            ok("oms_runs", {"limit": 5})
        yield Path(env["OMS_HOME"]), sent


def test_the_planted_token_is_what_the_scanners_find() -> None:
    assert TOKEN.startswith("ghp" + "_") and TOKEN not in LEAK


def test_no_mcp_answer_shows_the_token_and_the_answers_show_the_marker(
    leaked: tuple[Path, list[str]],
) -> None:
    _, sent = leaked
    assert not [s[:200] for s in sent if TOKEN in s]
    assert sum(MARK in s for s in sent) >= 3, sent  # the consult, its status, its artifact
    assert any("goal: Which tests are missing?" in s for s in sent)  # the rest is kept


def test_no_file_under_oms_home_holds_the_token_and_the_blobs_hold_the_marker(
    leaked: tuple[Path, list[str]],
) -> None:
    home, _ = leaked
    files = [p for p in home.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.name.startswith("work.db") for p in files), files
    holding = [str(p.relative_to(home)) for p in files if TOKEN.encode() in p.read_bytes()]
    assert holding == []
    marked = [p for p in files if MARK.encode() in p.read_bytes()]
    assert any("blobs" in p.parts for p in marked), [str(p) for p in marked]
