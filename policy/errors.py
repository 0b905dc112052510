"""The one refusal of the policy package, importable without the model (pydantic)."""

from __future__ import annotations


class PolicyError(Exception):
    """The policy cannot be read or is invalid; nothing governed by it may run."""
