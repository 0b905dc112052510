"""`oms agent run`: the agent contained in its own profile, its provider traffic brokered.

Modules: `inside` (what the sandbox looks like from inside: paths, the marker),
`payloads` (evidence of a run), `workspace` (the clone the agent works in, and its
result written back as `refs/oms/runs/<run-id>`), `egress` (the broker outside, with
`egress_config`, `egress_http`, `egress_scan`), `relay` (the loopback relay and launcher
inside), `mcp_relay` (oms from inside), `kinds` (claude-code, codex,
command), `run` (the whole run).
"""
