"""`oms doctor`'s MCP tools digest from the cache: the same digest the server gives, without
the MCP SDK when the key matches, and computed afresh on any doubt."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from gatekeeper.mcp import digest_cache
from gatekeeper.mcp.digest_cache import cache_file, cache_key, doctor_digest
from gatekeeper.mcp.server import tools_digest

# In a fresh process: the digest doctor reports, and whether the SDK was loaded for it.
WARM = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from gatekeeper.mcp.digest_cache import doctor_digest\n"
    "got = doctor_digest(Path(sys.argv[1]))\n"
    "print(json.dumps([got, 'mcp' in sys.modules, 'gatekeeper.mcp.server' in sys.modules]))\n"
)


def _fresh(repo: Path, env: dict[str, str]) -> list[object]:
    proc = subprocess.run([sys.executable, "-P", "-c", WARM, str(repo)], env=env,
                          capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    return list(json.loads(proc.stdout))


def test_a_warm_cache_gives_the_servers_digest_without_loading_the_sdk(
    git_repo: Path, oms_env: dict[str, str]
) -> None:
    served = anyio.run(tools_digest, git_repo, None)[0]
    assert _fresh(git_repo, oms_env) == [served, True, True]  # cold: computed, then stored
    assert _fresh(git_repo, oms_env) == [served, False, False]  # warm: read back
    stored = json.loads(cache_file("gatekeeper").read_text())
    assert stored["digest"] == served and stored["key"] == cache_key("gatekeeper")


@pytest.mark.parametrize(
    "entry",
    [
        "not json",
        '{"format": 1, "key": "KEY", "digest": "sha256:00"}',
        '{"format": 2, "key": "KEY", "digest": "sha256:' + "0" * 64 + '"}',
        '{"format": 1, "key": "another", "digest": "sha256:' + "0" * 64 + '"}',
    ],
)
def test_a_doubtful_entry_is_a_miss_and_is_replaced(git_repo: Path, entry: str) -> None:
    path = cache_file("gatekeeper")
    path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    path.write_text(entry.replace("KEY", cache_key("gatekeeper")))
    served = anyio.run(tools_digest, git_repo, None)[0]
    assert doctor_digest(git_repo) == served
    assert json.loads(path.read_text())["digest"] == served


def test_a_matching_entry_is_what_doctor_reports(git_repo: Path) -> None:
    """Proof that a hit is read, not recomputed: a planted digest for the right key comes back."""
    path = cache_file("gatekeeper")
    path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    planted = "sha256:" + "ab" * 32
    path.write_text(json.dumps({"format": 1, "key": cache_key("gatekeeper"), "digest": planted}))
    assert doctor_digest(git_repo) == planted


def test_the_key_changes_with_the_profile_and_oms_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    before = cache_key("gatekeeper")
    assert cache_key("all") != before
    # Another source tree (one byte of one tool module differs) is another key.
    for name in digest_cache.CODE_PACKAGES:
        src = Path(digest_cache.__file__).resolve().parents[2] / name
        shutil.copytree(src, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    copy = tmp_path / "gatekeeper" / "mcp" / "digest_cache.py"
    monkeypatch.setattr(digest_cache, "__file__", str(copy))
    assert cache_key("gatekeeper") == before
    tool = tmp_path / "gatekeeper" / "mcp" / "tools" / "policy.py"
    tool.write_text(tool.read_text().replace("The effective policy", "The policy"))
    assert cache_key("gatekeeper") != before
