"""Orchestration: goals, tickets, fenced leases, dispatch to provider adapters, verify.

A thin caller around the gates (DESIGN.md "Orchestration"): it adds no authority.
"""
