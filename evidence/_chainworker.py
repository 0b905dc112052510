"""Audit worker: `python -m evidence._chainworker PATH START END` checks one span of whole lines.

Prints the encoded Chunk on stdout. Spawned by `chaincheck.check_whole_lines`.
"""

from __future__ import annotations

import sys

from .chaincheck import check_chunk, encode_chunk, split_whole


def main(argv: list[str]) -> int:
    path, start, end = argv[0], int(argv[1]), int(argv[2])
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    if len(data) != end - start or not data.endswith(b"\n"):
        return 1
    sys.stdout.buffer.write(encode_chunk(check_chunk(split_whole(data))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
