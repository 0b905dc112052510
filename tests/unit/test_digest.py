"""`Sha256Digest`: every spelling of one digest parses to one value whose text is
`sha256:` + 64 lowercase hex digits; anything else is a usage error."""

from __future__ import annotations

import hashlib

import pytest

from gatekeeper.digest import Sha256Digest, hex_prefix, resolve_prefix
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


# -- prefixes: a unique prefix of at least 12 hex digits names a digest ------------------

OTHER = hashlib.sha256(b"y").hexdigest()
TWIN = HEX[:14] + "0" * 50  # shares 14 digits with HEX


@pytest.mark.parametrize("text", [HEX[:12], HEX[:20].upper(), "sha256:" + HEX[:12], HEX])
def test_a_unique_prefix_names_its_digest(text: str) -> None:
    assert resolve_prefix(text, [HEX, OTHER], "blob") == Sha256Digest(HEX)


def test_a_prefix_shorter_than_12_is_refused() -> None:
    with pytest.raises(UsageError, match="at least 12 hex digits"):
        resolve_prefix(HEX[:11], [HEX], "blob")


def test_an_ambiguous_prefix_says_how_many_match() -> None:
    with pytest.raises(UsageError, match="ambiguous: 2 manifests"):
        resolve_prefix(HEX[:12], [HEX, TWIN, OTHER], "manifest")
    assert resolve_prefix(HEX[:15], [HEX, TWIN], "manifest") == Sha256Digest(HEX)


def test_a_prefix_nothing_has_is_refused_and_a_full_digest_passes_through() -> None:
    with pytest.raises(UsageError, match="no blob starts with"):
        resolve_prefix(OTHER[:12], [HEX], "blob")
    assert resolve_prefix(OTHER, [], "blob") == Sha256Digest(OTHER)


@pytest.mark.parametrize("text", ["", "sha256:", "xyz" * 5, HEX[:12] + " ", HEX + "0"])
def test_a_prefix_that_is_not_hex_is_refused(text: str) -> None:
    with pytest.raises(UsageError):
        hex_prefix(text)
