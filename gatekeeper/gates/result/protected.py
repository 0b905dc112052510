"""Protected paths: a candidate that touches one is blocked, not merely flagged.

Built in: the policy file, CI configuration, hook managers, agent configuration,
git metadata files, oms' own files and scanner configuration and ignore files;
plus `[protected] paths` from the base policy, in the pattern language of
`policy/paths.py` (case ignored: on a case-insensitive filesystem
`.GitHub/Workflows/x.yml` is the CI file).
"""

from __future__ import annotations

from collections.abc import Sequence

from gatekeeper.gates.result.builtin import BUILTIN
from gatekeeper.gates.result.verdict import ProtectedChange
from gatekeeper.repo.change import FileChange
from policy.paths import matches

__all__ = ["BUILTIN", "matches", "protected_changes"]


def protected_changes(
    files: Sequence[FileChange], extra: Sequence[str]
) -> tuple[ProtectedChange, ...]:
    """Every change to a built-in or policy-named protected path, with its pattern."""
    patterns = (*BUILTIN, *extra)
    hits = []
    for f in files:
        pattern = matches(f.path, patterns)
        if pattern is not None:
            hits.append(ProtectedChange.of(f, pattern))
    return tuple(hits)
