"""`oms_command()`: the absolute argv prefix that clients use to start this oms."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gatekeeper.integrations import oms_command


def test_oms_command_is_the_console_script_beside_the_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "oms").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert oms_command() == [str(tmp_path / "oms")]


def test_oms_command_falls_back_to_the_module_without_the_cwd_on_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert oms_command() == [str(tmp_path / "python"), "-P", "-m", "gatekeeper"]


def test_oms_command_is_absolute() -> None:
    assert Path(oms_command()[0]).is_absolute()
