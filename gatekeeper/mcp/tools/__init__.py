"""The tools, one module per group, each a `register(server, ctx)`; the annotations they share.

A tool body parses its input, calls one gate, store or gateway function and bounds the
result; it decides nothing and there is no tool that approves or releases.
"""

from typing import Annotated

from mcp_types import ToolAnnotations
from pydantic import Field

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)  # fmt: skip
# Writes only to oms' own append-only evidence store; touches neither the repo nor the world.
RECORDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                          open_world_hint=False)  # fmt: skip

# Parameters several tools share.
Offset = Annotated[int, Field(description="Where this page starts: 0, or the next_offset "
                              "of the page before.")]  # fmt: skip
RepoPath = Annotated[str, Field(description="A repository-relative path; empty for the "
                                "whole repository.")]  # fmt: skip
