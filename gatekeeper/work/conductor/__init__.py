"""The conductor (issue 18): bare `oms` in tmux, its seven-tool bridge, worker panes, the
waiter, delivery of verified tickets as draft PRs. Thin callers around the gates: nothing
here approves, merges or signs on anyone's behalf."""
