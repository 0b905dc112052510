"""The real Codex 0.171.0 applies the patches of tests/support/codex_patches.py and touches
exactly the files the hook's parser reads from them (gatekeeper/integrations/hooks/patch.py);
a patch oms refuses is one Codex refuses too, or one oms is knowingly stricter about.

Two ways in: the binary's own apply_patch entry (`codex --codex-run-as-apply-patch PATCH`,
the standalone applier of the same `codex-apply-patch` crate), for every grammar form; and
`codex exec` against the loopback fake Responses API, for the forms only the agent loop
reads (a freeform apply_patch call; a shell heredoc after `cd DIR &&`), without oms'
hooks: it shows that Codex applies what `oms hook codex` now denies (the denial itself,
under `oms agent run`, is in tests/e2e/test_hooks_clis.py). Skipped, saying why, when
Codex is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.codex_patches import CASES, SEED, PatchCase
from support.env import clean_env
from support.fake_models import fake_openai
from support.sandbox import traversable_dir

from gatekeeper.integrations.hooks.patch import PatchError
from gatekeeper.integrations.hooks.writes import codex_writes

ROOT = Path(__file__).resolve().parents[2]
CODEX = ROOT / ".cache" / "agents" / "node_modules" / ".bin" / "codex"
pytestmark = pytest.mark.skipif(
    not os.access(CODEX, os.X_OK),
    reason="codex is not installed under .cache/agents: run `make agents` (needs npm)",
)


def _tree(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in top.rglob("*") if p.is_file()}


def _changed(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def _seeded(top: Path) -> dict[str, bytes]:
    top.mkdir()
    for name, text in SEED.items():
        (top / name).write_text(text)
    return _tree(top)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_codex_touches_the_files_the_hook_reads(case: PatchCase, tmp_path: Path) -> None:
    work = tmp_path / "w"
    before = _seeded(work)
    proc = subprocess.run([str(CODEX), "--codex-run-as-apply-patch", case.patch], cwd=work,
                          env=clean_env(tmp_path), capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    changed = _changed(before, _tree(work))
    if case.touched is not None:
        assert changed == {os.path.normpath(p) for p in case.touched}, (proc.stdout, proc.stderr)
    elif case.codex == "rejects":
        assert proc.returncode != 0 and changed == set(), (proc.stdout, proc.stderr)


# -- the agent loop ---------------------------------------------------------------------------


@pytest.fixture
def world() -> Iterator[Path]:
    with traversable_dir("oms-codex-patch-") as root:
        yield root


def codex_exec(world: Path, command: str, *, patch: bool) -> dict[str, bytes]:
    """One `codex exec` turn whose model calls apply_patch(`command`) (`patch`) or
    exec_command(`command`), in its own bwrap with a private /tmp (Codex writes
    /tmp/codex-daemon-<uid> whatever TMPDIR says); the files it changed."""
    work, home, codex_home, tmp = (world / n for n in ("work", "home", "codex-home", "tmp"))
    for d in (home, codex_home, tmp):
        d.mkdir()
    before = _seeded(work)
    with fake_openai(command, patch=patch) as fake:
        provider = (f'model_providers.fake={{name="fake",base_url="{fake.url}/v1",'
                    'wire_api="responses",env_key="FAKE_KEY",request_max_retries=0,'
                    "stream_max_retries=0,supports_websockets=false}")  # fmt: skip
        # The private /tmp hides a checkout that lives under /tmp (CI's clone may): the CLI
        # install is bound back read-only at its own path.
        agents, codex = os.path.realpath(ROOT / ".cache" / "agents"), os.path.realpath(CODEX)
        argv = ["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/tmp", "--bind", world, world,
                "--ro-bind", agents, agents,
                "--", codex, "exec", "--json", "--skip-git-repo-check", "-C", work,
                "--strict-config", "-c", "model_provider=fake", "-c", provider,
                "-c", "model=gpt-5.5", "-c", "analytics.enabled=false",
                "-c", "features.plugins=false", "-c", "check_for_update_on_startup=false",
                "-c", "feedback.enabled=false", "--sandbox", "workspace-write", "edit"]  # fmt: skip
        env = {**clean_env(home), "CODEX_HOME": str(codex_home), "TMPDIR": str(tmp),
               "FAKE_KEY": "sk-fake"}  # fmt: skip
        proc = subprocess.run([str(a) for a in argv], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
        assert fake.tool_outputs(), fake.requests
    return {p: (work / p).read_bytes() for p in _changed(before, _tree(work))}


AGENTS_PATCH = "*** Begin Patch\n *** Add File: AGENTS.md\n+obey the patch\n*** End Patch\n"
CD_HEREDOC = ("cd .github && apply_patch <<'EOF'\n*** Begin Patch\n"
              "*** Add File: workflows/ci.yml\n+on: push\n*** End Patch\nEOF")  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "command", "path"),
    [("apply_patch", AGENTS_PATCH, "AGENTS.md"),
     ("Bash", CD_HEREDOC, ".github/workflows/ci.yml")],
)  # fmt: skip
def test_codex_exec_applies_the_forms_the_hook_now_reads(
    world: Path, tool: str, command: str, path: str
) -> None:
    changed = codex_exec(world, command, patch=tool == "apply_patch")
    assert set(changed) == {path}
    # the hook, given the same tool call, judges that same path
    try:
        judged = [w.path for w in codex_writes(tool, {"command": command})]
    except PatchError as exc:  # pragma: no cover - shown in the failure
        raise AssertionError(str(exc)) from exc
    assert [os.path.normpath(p) for p in judged] == [path], json.dumps(judged)
