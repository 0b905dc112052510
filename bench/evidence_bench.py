"""Evidence store benchmarks: append rate (single, batched) and audit of 100k / 1M entries.

Anchors measured on this machine: hashlib SHA-256 ~1 GB/s, RFC 6962 leaf hashing ~770k/s.
Goals: >= 1,000 durable entries/s batched; audit of 1M entries <= 5 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from evidence import Draft, EvidenceStore
from evidence.audit import audit
from evidence.checkpoint import Checkpoint, sign_checkpoint
from evidence.merkle import Frontier, leaf_hash
from evidence.store import utc_now


def _fresh(tmp: Path, name: str) -> EvidenceStore:
    store, _ = EvidenceStore.init(tmp / name, "rbench")
    return store


def bench_append(tmp: Path) -> dict[str, float]:
    store = _fresh(tmp, "append")
    n = 300
    t = time.perf_counter()
    for i in range(n):
        store.append(Draft(kind="note", data={"i": i}))
    single = n / (time.perf_counter() - t)
    batches, per = 20, 500
    t = time.perf_counter()
    for b in range(batches):
        store.append_many([Draft(kind="note", data={"i": i, "b": b}) for i in range(per)])
    batched = batches * per / (time.perf_counter() - t)
    return {"single_per_s": single, "batched_per_s": batched}


def generate(store: EvidenceStore, n: int) -> None:
    """Write n valid entries directly (same bytes the store would write), then sign."""
    enc = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode
    genesis = store.lines()[0]  # entry 0 binds the log to its repository: keep it
    prev = hashlib.sha256(genesis).hexdigest()
    frontier = Frontier()
    frontier.append(leaf_hash(genesis))
    now = utc_now()
    with open(store.log_path, "wb") as f:
        f.write(genesis + b"\n")
        for seq in range(1, n):
            line = enc(
                {
                    "v": 1, "seq": seq, "prev": prev, "time": now, "kind": "note",
                    "subject": [], "data": {"message": f"generated entry {seq}"},
                    "blobs": [], "policy": None,
                }
            ).encode()  # fmt: skip
            f.write(line + b"\n")
            prev = hashlib.sha256(line).hexdigest()
            frontier.append(leaf_hash(line))
    note = sign_checkpoint(
        Checkpoint(store.origin, frontier.size, frontier.root()), store.origin, store.key.private
    )
    store.checkpoint_path.write_bytes(note)
    store.witness_path.write_bytes(note)
    (store.dir / "tree.json").unlink(missing_ok=True)


def bench_audit(tmp: Path, n: int) -> dict[str, float]:
    store = _fresh(tmp, f"audit{n}")
    generate(store, n)
    size = store.log_path.stat().st_size
    t = time.perf_counter()
    report = audit(store)
    dt = time.perf_counter() - t
    assert report.intact and report.entries == n, report
    t = time.perf_counter()
    hashlib.sha256(store.log_path.read_bytes()).digest()
    sha_gbs = size / (time.perf_counter() - t) / 1e9
    return {"seconds": dt, "mb": size / 1e6, "sha256_gb_s": sha_gbs}


def main() -> int:
    sizes = [100_000, 1_000_000]
    if "--quick" in sys.argv:
        sizes = [100_000]
    with tempfile.TemporaryDirectory(prefix="oms-bench-", dir=os.environ.get("BENCH_TMP")) as d:
        tmp = Path(d)
        a = bench_append(tmp)
        print(f"append, single (durable, checkpoint each): {a['single_per_s']:8.0f} entries/s")
        print(
            f"append, batched x500 (durable):           {a['batched_per_s']:8.0f} entries/s"
            "   goal >= 1,000/s"
        )
        leaves = [os.urandom(200) for _ in range(200_000)]
        t = time.perf_counter()
        for x in leaves:
            leaf_hash(x)
        rate = len(leaves) / (time.perf_counter() - t)
        print(f"RFC 6962 leaf hashing here:                {rate:8.0f} /s        anchor ~770k/s")
        for n in sizes:
            r = bench_audit(tmp, n)
            print(
                f"audit of {n:>9,} entries ({r['mb']:.0f} MB): {r['seconds']:6.2f} s"
                + ("   goal <= 5 s" if n == 1_000_000 else "")
                + f"   (sha256 here {r['sha256_gb_s']:.2f} GB/s, anchor ~1 GB/s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
