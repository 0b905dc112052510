"""The doctor's `provider_keys` section: whether `oms agent run --egress api` would have a
provider key to inject. Missing is a warning, never "not ready": the gates need no key, and
subscription logins use `--egress tunnel`."""

from __future__ import annotations

import os

from evidence import state_root
from gatekeeper.agent.egress_config import KEY_ENV, provider_keys
from gatekeeper.errors import ConfigError
from gatekeeper.gates.doctor import Extra
from gatekeeper.repo.git import Repo

NAME = "provider_keys"
NO_KEY = (
    "`oms agent run --egress api` has no provider key: set {names} in oms' environment "
    "(or write it, chmod 600, to $OMS_HOME/providers/anthropic or openai); a subscription "
    "login uses --egress tunnel"
)


def doctor_check(repo: Repo) -> Extra:
    del repo  # the keys are oms' own, whatever the repository
    try:
        held = provider_keys(os.environ, state_root()).held()
    except ConfigError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "unreadable"
        return Extra(name=NAME, section={"held": [], "error": first},
                     warnings=(f"provider key unusable for --egress api: {first}",))  # fmt: skip
    if held:
        return Extra(name=NAME, section={"held": list(held)})
    names = " or ".join(KEY_ENV.values())
    return Extra(name=NAME, section={"held": []}, warnings=(NO_KEY.format(names=names),))
