"""Where users already work: agent hooks in the clients' own protocols, installing oms
into Claude Code and Codex, and the formats other tools read (SARIF, JUnit, markdown)."""
