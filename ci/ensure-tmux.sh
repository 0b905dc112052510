#!/usr/bin/env bash
# tmux for the conductor's tests (its worker panes and sessions run on a private server).
# As root on Debian/Ubuntu, install the `tmux` package; otherwise the tmux tests skip,
# saying why. Never fails the build: the conductor is optional, the gates are not.
set -u
if command -v tmux >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "oms: installing tmux (apt-get install tmux)" >&2
  export DEBIAN_FRONTEND=noninteractive
  (apt-get update -qq && apt-get install -y -qq tmux) >/dev/null 2>&1 \
    || echo "oms: could not install tmux; the conductor's tmux tests will skip" >&2
  exit 0
fi
echo "oms: tmux is missing (sudo apt-get install tmux); the conductor's tmux tests will skip" >&2
exit 0
