"""Orchestration: the state store, roles, goals, tickets, dispatch, providers."""
