"""Refusals of the sandbox: each means nothing was run."""

from __future__ import annotations


class SandboxError(Exception):
    """Base class for sandbox refusals."""


class SandboxUnavailable(SandboxError):
    """bwrap is missing, too old, or failed its probe: no check may run."""


class ProfileError(SandboxError):
    """The profile asks for something the sandbox never allows (e.g. binding $OMS_HOME)."""
