"""A read-only agent run (an advisor's, a grader's): /workspace bound read-only, the probe
holding it to that, and the agent's input on a sealed memfd it cannot change."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from sandbox import agent as ag
from sandbox.agent_probe import check_inside
from sandbox.agent_runner import _stdin_fd

# The other test module's helpers: the same profile and the same good probe output.
from tests.unit.sandbox.test_agent_profile import (
    BASE_ENV,
    LIMITS,
    argv_of,
    good_probe_output,
    pairs,
)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    (tmp_path / "run" / "oms").mkdir(parents=True)
    return tmp_path / "run"


def readonly() -> ag.AgentProfile:
    return ag.agent_profile(LIMITS, [], BASE_ENV, [], {}, workspace_readonly=True)


def test_a_read_only_profile_binds_the_workspace_read_only(run_dir: Path) -> None:
    argv = argv_of(readonly(), run_dir)
    ws = (str(run_dir.parent / "ws"), ag.WORKSPACE)
    assert ws in pairs(argv, "--ro-bind") and ws not in pairs(argv, "--bind")


def test_the_read_only_workspace_is_part_of_the_profile_digest() -> None:
    plain = ag.agent_profile(LIMITS, [], BASE_ENV, [], {})
    assert readonly().digest != plain.digest
    assert "workdir_readonly" not in plain.canonical()  # unchanged for every other run


def test_the_probe_of_a_read_only_profile_wants_the_workspace_not_writable() -> None:
    p = readonly()
    good = good_probe_output(p).replace("/workspace yes", "/workspace no")
    assert check_inside(good, p, []) == []
    fails = check_inside(good.replace("/workspace no", "/workspace yes"), p, [])
    assert any("not writable inside" in f for f in fails), fails


def test_the_agents_input_is_a_sealed_memfd_at_offset_zero() -> None:
    fd = _stdin_fd(b"the task\n")
    try:
        assert os.read(fd, 100) == b"the task\n"
        with pytest.raises(OSError) as info:
            os.write(fd, b"x")
        assert info.value.errno == errno.EPERM
        again = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)  # nor through a fresh open
        try:
            with pytest.raises(OSError) as info:
                os.write(again, b"x")
            assert info.value.errno == errno.EPERM
        finally:
            os.close(again)
    finally:
        os.close(fd)


def test_no_input_is_dev_null_read_only() -> None:
    fd = _stdin_fd(None)
    try:
        assert os.read(fd, 10) == b""
        with pytest.raises(OSError):
            os.write(fd, b"x")
    finally:
        os.close(fd)
