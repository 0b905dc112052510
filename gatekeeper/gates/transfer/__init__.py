"""The transfer gate: signed manifests, approval packets, single-use approvals."""
