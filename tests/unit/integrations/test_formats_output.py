"""`--output FILE` and the pairing of `--format` with `--output`.

The invariant: never replace a device, a symlink, a directory or any non-regular file at
an output path. No test writes to a device: a fifo stands in for one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gatekeeper.cli.formats import Plan, plan
from gatekeeper.errors import UsageError
from gatekeeper.outfile import check_output, write_output


def test_write_output_replaces_a_regular_file_atomically(tmp_path: Path) -> None:
    out = tmp_path / "oms.sarif"
    out.write_text("old")
    write_output(out, "new\n")
    assert out.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["oms.sarif"]  # no temp file left
    write_output(tmp_path / "fresh.md", "x\n")
    assert (tmp_path / "fresh.md").read_text() == "x\n"


def test_a_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="symlink"):
        write_output(link, "overwrite")
    assert link.is_symlink() and target.read_text() == "keep"
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="symlink"):
        check_output(dangling)


def test_a_fifo_a_directory_and_a_missing_directory_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        write_output(fifo, "x")
    assert fifo.exists() and not fifo.is_file()
    with pytest.raises(UsageError, match="directory"):
        write_output(tmp_path, "x")
    with pytest.raises(UsageError, match="directory does not exist"):
        check_output(tmp_path / "no" / "such.sarif")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_formats_pair_with_outputs_in_order() -> None:
    assert plan((), (), as_json=False) == Plan((), "text")
    assert plan((), (), as_json=True) == Plan((), "json")
    assert plan(("sarif",), (), as_json=False) == Plan((), "sarif")
    assert plan(("sarif", "markdown"), ("a.sarif", "b.md"), as_json=False) == Plan(
        (("sarif", Path("a.sarif")), ("markdown", Path("b.md"))), "text"
    )
    assert plan(("sarif", "junit"), ("a.sarif",), as_json=False) == Plan(
        (("sarif", Path("a.sarif")),), "junit"
    )
    assert plan((), ("v.json",), as_json=True) == Plan((("json", Path("v.json")),), "json")
    assert plan(("markdown",), ("-",), as_json=False) == Plan((), "markdown")


@pytest.mark.parametrize(
    ("formats", "outputs", "as_json", "message"),
    [
        (("sarif",), (), True, "--json is --format json"),
        (("sarif", "junit", "markdown"), ("a",), False, "stdout takes one"),
        (("sarif", "junit"), ("-",), False, "stdout takes one"),
    ],
)
def test_pairings_that_cannot_be_are_usage_errors(
    formats: tuple[str, ...], outputs: tuple[str, ...], as_json: bool, message: str
) -> None:
    with pytest.raises(UsageError, match=message) as exc:
        plan(formats, outputs, as_json)
    assert exc.value.exit_code == 2
