"""`remote.checked_url`: the only transports oms runs are https, ssh and local paths.

Everything else — plain http, git://, `ext::`/`fd::` and other `transport::` helpers
(which run commands), relative paths, a URL that git would read as an option — is
refused before git sees it.
"""

from __future__ import annotations

import pytest

from gatekeeper.repo.remote import RemoteRefused, checked_url

ACCEPTED = [
    "https://github.com/a/b.git",
    "ssh://git@github.com/a/b",
    "git@github.com:a/b.git",  # scp-like
    "user@host:path",
    "git@host:22/x",  # scp-like: "22/x" is a path, not a port
    "/srv/git/b.git",
    "file:///srv/git/b.git",
]

REFUSED = [
    "",
    "http://github.com/a/b",
    "git://github.com/a/b",
    "ftp://x",
    "ext::sh -c touch% /tmp/x",
    "fd::3",
    "transport::https://x",
    "https::x",
    "-uhttps://x",
    "-oProxyCommand=x@host:p",
    "ssh://-oProxyCommand=x/y",  # a host that ssh would take as an option
    "ssh://git@-oProxyCommand=x/y",
    "https://-x/y",
    "relative/path",
    "../up",
    "C:/x",
    "git@github.com:/abs",  # scp-like with an absolute path: not a form oms takes
    "/srv/a::b",
    "file://host/x",  # file:// with a host
]


@pytest.mark.parametrize("url", ACCEPTED)
def test_https_ssh_and_local_paths_are_accepted_unchanged(url: str) -> None:
    assert checked_url(url) == url


@pytest.mark.parametrize("url", REFUSED)
def test_other_transports_and_option_like_urls_are_refused(url: str) -> None:
    with pytest.raises(RemoteRefused) as caught:
        checked_url(url)
    assert caught.value.kind == "blocked" and "\n" not in caught.value.message
