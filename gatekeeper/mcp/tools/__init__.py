"""The tools, one module per group, each a `register(server, ctx)`; the annotations they share.

A tool body parses its input, calls one gate, store or gateway function and bounds the
result; it decides nothing and there is no tool that approves or releases.
"""

from mcp_types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)  # fmt: skip
# Writes only to oms' own append-only evidence store; touches neither the repo nor the world.
RECORDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                          open_world_hint=False)  # fmt: skip
