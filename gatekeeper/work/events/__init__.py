"""Typed events (issue 18): GitHub sync, provider-hook observations, the conductor's
notification batches and the request-only outbox. Data only: no event is ever a command."""
