"""A stand-in `crontab` for tests: this machine has no cron daemon.

The script takes `-l` and `-` as crontab does, keeps the table in `$CRONTAB_FILE`, and says
"no crontab for user" with exit 1 when there is none. Nothing runs the table: a test runs a
line's command itself, as cron would.
"""

from __future__ import annotations

from pathlib import Path

CRONTAB = """#!/bin/sh
f="$CRONTAB_FILE"
case "$1" in
  -l) if [ -f "$f" ]; then cat "$f"; else echo "no crontab for $(id -un)" >&2; exit 1; fi ;;
  -) cat > "$f" ;;
  *) echo "usage" >&2; exit 2 ;;
esac
"""


def fake_crontab(bin_dir: Path) -> Path:
    """`bin_dir/crontab`, executable; put `bin_dir` on PATH and set CRONTAB_FILE."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "crontab"
    script.write_text(CRONTAB)
    script.chmod(0o755)
    return script
