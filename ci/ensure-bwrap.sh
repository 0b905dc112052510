#!/usr/bin/env bash
# Make sure a working bubblewrap is present: oms runs no check without it.
# As root on Debian/Ubuntu, install the `bubblewrap` package; otherwise say what to run.
set -eu
if [ -x /usr/bin/bwrap ] || command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "oms: installing bubblewrap (apt-get install bubblewrap)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq bubblewrap >/dev/null
  exit 0
fi
echo "oms: bubblewrap is missing; run: sudo apt-get install bubblewrap" >&2
exit 1
