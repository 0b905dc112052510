"""Reporters oms binds into a check's sandbox as data and runs with the check's own interpreter.

They import nothing from gatekeeper: each file is a standalone script (stdlib only)."""
