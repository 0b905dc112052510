"""`oms agent run`: the agent contained in its own profile, its provider traffic brokered.

Modules: `inside` (what the sandbox looks like from inside: paths, the marker),
`payloads` (evidence of a run), `workspace` (the clone the agent works in, and its
result written back as `refs/oms/runs/<run-id>`), `egress` (the broker outside and the
loopback relay inside), `mcp_relay` (oms from inside), `kinds` (claude-code, codex,
command), `run` (the whole run).
"""
