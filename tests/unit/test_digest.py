"""`Sha256Digest`: every spelling of one digest parses to one value whose text is
`sha256:` + 64 lowercase hex digits; anything else is a usage error."""

from __future__ import annotations

import hashlib

import pytest

from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import UsageError

HEX = hashlib.sha256(b"x").hexdigest()


@pytest.mark.parametrize("text", [HEX, HEX.upper(), "sha256:" + HEX, "SHA256:" + HEX.upper()])
def test_every_spelling_parses_to_the_one_form(text: str) -> None:
    d = Sha256Digest.parse(text)
    assert d == Sha256Digest.of(b"x") and str(d) == "sha256:" + HEX
    assert Sha256Digest.parse(d) is d


BAD = ["", HEX[:-1], HEX + "0", "sha512:" + HEX, "sha256:" + HEX[:-1] + "g", " " + HEX,
       HEX[:-1] + "\u0660", "sha256:" + HEX + "\n", "-" + HEX[1:]]  # fmt: skip


@pytest.mark.parametrize("text", BAD, ids=repr)
def test_anything_else_is_a_usage_error_in_one_line(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        Sha256Digest.parse(text)
    assert "\n" not in str(caught.value) and caught.value.exit_code == 2


def test_the_value_itself_refuses_upper_case() -> None:
    with pytest.raises(UsageError):
        Sha256Digest(HEX.upper())
