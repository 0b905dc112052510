"""The one shared test harness: isolated environments, real git repositories, the real CLI.

`env` makes environments that cannot reach the user's own home or git config, `repos`
builds real repositories, `oms` runs the CLI and checks its one-JSON-object contract,
`sandbox` holds what the bwrap tests share. `tests/conftest.py` wraps them as fixtures.
"""
