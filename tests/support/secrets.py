"""Fake secrets for tests: made at run time, so that no secret-shaped literal is committed."""

from __future__ import annotations

import random
import string

_B32 = string.ascii_uppercase + "234567"


def fake_aws_key() -> str:
    """A fresh fake AWS access key id that both scanners match."""
    while True:
        tail = "".join(random.choices(_B32, k=16))
        if len(set(tail)) >= 12:  # clear of Gitleaks' entropy floor
            return "AK" + "IA" + tail
