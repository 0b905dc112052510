"""Git plumbing under oms' own configuration.

Refs, the change, scratch copies, policy-at-ref and the paths that may be served.
"""
