"""`oms mcp` serves the gatekeeper's tools by default, every tool on request.

A real MCP client over stdio against the real server: the default lists exactly the
gatekeeper's eleven tools and refuses a call to any other; `--tools all` and the base
policy's `[mcp] tools = "all"` list all thirty; `--tools gatekeeper` narrows a policy's
"all" again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import StdioServerParameters
from support.env import clean_env
from support.mcp_session import session, text_of
from support.oms import run_oms
from support.repos import make_repo

GATEKEEPER = {
    "oms_doctor", "oms_policy", "oms_transfer_preview", "oms_transfer_status",
    "oms_process_result", "oms_evidence_audit", "oms_repo_tree", "oms_repo_search",
    "oms_repo_read_file", "oms_git_status", "oms_git_diff",
}  # fmt: skip
EVERY = 30


def _repo(root: Path, policy: str | None) -> tuple[Path, dict[str, str]]:
    (root / "home").mkdir()
    env = clean_env(root / "home", root / "oms-state")
    files = {"oms.toml": policy} if policy is not None else {}
    repo = make_repo(root / "repo", files, env=env)
    assert run_oms(["init", "--repo", repo], env=env).returncode == 0
    return repo, env


def _listed(repo: Path, env: dict[str, str], *args: str, call: str = "") -> tuple[
    set[str], types.CallToolResult | None
]:  # fmt: skip
    argv = ["-m", "gatekeeper", "mcp", "--repo", str(repo), *args]
    params = StdioServerParameters(command=sys.executable, args=argv, env=env, cwd=str(repo.parent))

    async def run() -> tuple[set[str], types.CallToolResult | None]:
        with open(repo.parent / "mcp.stderr", "a") as errlog:
            async with session(params, errlog, 120) as s:
                names = {t.name for t in (await s.list_tools()).tools}
                return names, (await s.call_tool(call, {}) if call else None)

    return anyio.run(run)


def test_the_default_profile_lists_the_gatekeepers_eleven_and_refuses_the_rest(
    tmp_path: Path,
) -> None:
    repo, env = _repo(tmp_path, None)
    names, refused = _listed(repo, env, call="oms_status")
    assert names == GATEKEEPER
    assert refused is not None and refused.is_error is True
    assert "oms_status" in text_of(refused), text_of(refused)


@pytest.mark.parametrize(
    ("policy", "args", "expected"),
    [
        (None, ("--tools", "all"), EVERY),
        ('version = 1\n[mcp]\ntools = "all"\n', (), EVERY),
        ('version = 1\n[mcp]\ntools = "all"\n', ("--tools", "gatekeeper"), len(GATEKEEPER)),
    ],
)
def test_every_tool_is_served_on_request_by_flag_or_by_the_base_policy(
    tmp_path: Path, policy: str | None, args: tuple[str, ...], expected: int
) -> None:
    repo, env = _repo(tmp_path, policy)
    names, _ = _listed(repo, env, *args, call="")
    assert len(names) == expected and GATEKEEPER <= names


def test_tools_digest_is_per_profile(tmp_path: Path) -> None:
    repo, env = _repo(tmp_path, None)
    digests = {}
    for profile in ("gatekeeper", "all"):
        proc = run_oms(["mcp", "tools-digest", "--repo", repo, "--tools", profile], env=env)
        assert proc.returncode == 0, proc.stderr
        digests[profile] = proc.stdout.strip()
    default = run_oms(["mcp", "tools-digest", "--repo", repo], env=env).stdout.strip()
    assert default == digests["gatekeeper"] != digests["all"]
