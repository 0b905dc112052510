"""One ticket's Codex session store (gatekeeper/agent/codex_sessions.py): what a run leaves
in its CODEX_HOME is kept only as a regular rollout file reached without a link, and the
next run gets exactly that rollout back. The real `codex exec resume` of a stored session
runs in tests/e2e/test_codex_worker.py."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from gatekeeper.agent.codex_sessions import save, seed, stored_session

SID = "01a23caa-6929-7f50-baac-57d31c93ea47"
NEWER = "01a23caa-7ba3-76a0-a6a0-cf6df628617a"


def rollout(home: Path, when: str, sid: str, text: str = "{}\n") -> Path:
    path = home / ".codex" / "sessions" / "2026" / "12" / "03" / f"rollout-{when}-{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_newest_rollout_is_kept_and_seeded_into_the_next_runs_fresh_codex_home(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    first = tmp_path / "run1"
    rollout(first, "2026-12-03T16-08-50", SID, "old\n")
    rollout(first, "2026-12-03T16-08-55", NEWER, "whole history\n")
    assert save(store, first) == NEWER
    assert stored_session(store) == NEWER
    assert stat.S_IMODE((store / "rollout.jsonl").stat().st_mode) == 0o600
    nxt = tmp_path / "run2"
    (nxt / ".codex").mkdir(parents=True)
    assert seed(store, nxt) == NEWER
    copied = list((nxt / ".codex" / "sessions").rglob("*.jsonl"))
    assert [p.name for p in copied] == [f"rollout-2026-12-03T16-08-55-{NEWER}.jsonl"]
    assert copied[0].read_text() == "whole history\n"


def test_a_link_a_fifo_or_a_name_that_is_not_a_rollouts_is_never_kept(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host file\n")
    home = tmp_path / "run"
    link = rollout(home, "2026-12-03T16-08-59", SID)
    link.unlink()
    link.symlink_to(secret)  # the agent's link to a host file
    (home / ".codex" / "sessions" / "2026" / "12" / "03" / "notes.jsonl").write_text("x\n")
    (home / ".codex" / "sessions" / "2027").symlink_to(secret.parent)
    store = tmp_path / "store"
    assert save(store, home) is None
    assert stored_session(store) is None and not store.exists()


def test_a_store_whose_record_does_not_name_its_rollout_resumes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    home = tmp_path / "run"
    rollout(home, "2026-12-03T16-08-50", SID)
    assert save(store, home) == SID
    meta = json.loads((store / "session.json").read_text())
    for bad in ({**meta, "id": NEWER}, {**meta, "path": "../../etc/passwd"},
                {**meta, "id": "--last"}, [meta]):  # fmt: skip
        (store / "session.json").write_text(json.dumps(bad))
        assert stored_session(store) is None
        fresh = tmp_path / f"fresh-{len(str(bad))}"
        (fresh / ".codex").mkdir(parents=True)
        assert seed(store, fresh) is None
        assert not (fresh / ".codex" / "sessions").exists()
