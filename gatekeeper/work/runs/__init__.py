"""Runs (thehood's model): plan, orchestrate, consult, summon, fanout, continue, loop,
reconcile, abort, status, list — thin callers of the orchestration core and the gates.

`model` (what a run is), `store` (runs in work.db, fenced), `gates` (the only ways through
an approval gate), `ask` (one read-only provider call), `engine` (one step at a time, the
loop), the step modules (`readonly`, `implement`, `reconcile`), `actions` (next_actions),
and `api` (one function per command and MCP tool).
"""
