"""`oms agent run` broker benchmark: `bench_broker()`, called by bench/agent_bench.py.

    .venv/bin/python bench/agent_broker_bench.py [--quick]

Broker: a conversation growing to 1 MB in 20 turns (each turn resends everything and adds
~50 KB), POSTed to /v1/messages through the real broker (unix socket, both real scanners,
the policy's defaults) and, beside it, straight to the same loopback fake. Goals (issue
12): broker p50 per turn <= 1.2 x the fake's own p50 plus one Gitleaks start-up; bytes
handed to the scanners <= 1.1 x the bytes that were new (not 20 x 1 MB).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiohttp import web

from gatekeeper.agent.egress import Broker, ProviderKeys, Upstreams
from gatekeeper.scan import ScanItem
from gatekeeper.scan.policy import scan_with_policy
from policy import default_policy

RUN_ID = "20261201T150000Z-0a1b2c3d"
WORDS = "value config result items handler request data count total index buffer parse".split()
GOAL_LATENCY = 1.2
GOAL_SCAN_RATIO = 1.1


def code_like(rng: random.Random, size: int) -> str:
    """About `size` characters of source-like lines (no secrets)."""
    lines, n = [], 0
    while n < size:
        line = "    " * rng.randint(0, 3) + " ".join(rng.choices(WORDS, k=rng.randint(3, 12)))
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)


def conversation(turns: list[str]) -> bytes:
    roles = ["user", "assistant"]
    msgs = [{"role": roles[i % 2], "content": [{"type": "text", "text": t}]}
            for i, t in enumerate(turns)]  # fmt: skip
    return json.dumps({"model": "bench", "max_tokens": 16, "messages": msgs}).encode()


@contextmanager
def fake_upstream() -> Iterator[int]:
    """A loopback fake of /v1/messages that reads the body and answers a small message."""

    async def messages(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"id": "msg", "content": [{"type": "text", "text": "ok"}]})

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/messages", messages)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield int(runner.addresses[0][1])
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.run_until_complete(runner.cleanup())
        loop.close()


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=120)
        self.unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.unix_path)
        self.sock = s


def post(conn: http.client.HTTPConnection, body: bytes) -> float:
    t = time.perf_counter()
    conn.request("POST", "/v1/messages", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    if resp.status != 200:
        raise SystemExit(f"bench: status {resp.status}")
    return time.perf_counter() - t


def gitleaks_startup_s(runs: int = 3) -> float:
    """One scan of a few bytes with both scanners: the fixed cost of a scan call."""
    item = [ScanItem.whole("tiny", "hello world\n")]
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        scan_with_policy(item, default_policy())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_broker(turns: int = 20, total_bytes: int = 1_000_000) -> list[str]:
    """Figures beside their anchors, one line each (also printed)."""
    rng = random.Random(12)
    texts = [code_like(rng, total_bytes // turns) for _ in range(turns)]
    bodies = [conversation(texts[: n + 1]) for n in range(turns)]
    new_bytes = sum(len(t.encode()) for t in texts)
    with fake_upstream() as port, tempfile.TemporaryDirectory(prefix="oms-bb-", dir="/tmp") as d:
        direct = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        fake_times = [post(direct, b) for b in bodies]
        direct.close()
        url = f"http://127.0.0.1:{port}"
        broker = Broker(Path(d) / "b.sock", run_id=RUN_ID, egress="api",
                        keys=ProviderKeys(anthropic="bench-key", openai=None),
                        upstreams=Upstreams(url, url), on_secret="redact",
                        loaded=default_policy(), canaries=["oms-canary-bench"],
                        record=lambda _: None)  # fmt: skip
        broker.start()
        try:
            conn = UnixHTTPConnection(str(Path(d) / "b.sock"))
            broker_times = [post(conn, b) for b in bodies]
            conn.close()
        finally:
            totals = broker.stop()
        scanned = broker.scanned_bytes
    startup = gitleaks_startup_s()
    fake_p50, broker_p50 = statistics.median(fake_times), statistics.median(broker_times)
    goal = GOAL_LATENCY * fake_p50 + startup
    lines = [
        f"broker: {turns} turns to {len(bodies[-1]) / 1e6:.2f} MB, "
        f"{totals.forwarded} forwarded, {totals.bytes_up / 1e6:.1f} MB up",
        f"broker p50 per turn {broker_p50 * 1e3:.0f} ms (p95 "
        f"{sorted(broker_times)[int(0.95 * (turns - 1))] * 1e3:.0f} ms) vs fake direct p50 "
        f"{fake_p50 * 1e3:.1f} ms + one scan start-up {startup * 1e3:.0f} ms "
        f"-> goal <= {goal * 1e3:.0f} ms: {'met' if broker_p50 <= goal else 'MISSED'}",
        f"scanned {scanned / 1e6:.3f} MB for {new_bytes / 1e6:.3f} MB new "
        f"({scanned / new_bytes:.3f}x; goal <= {GOAL_SCAN_RATIO}x, naive would be "
        f"{sum(len(b) for b in bodies) / new_bytes:.1f}x): "
        f"{'met' if scanned <= GOAL_SCAN_RATIO * new_bytes else 'MISSED'}",
    ]
    for line in lines:
        print(line)
    return lines


def main() -> int:
    quick = "--quick" in sys.argv
    lines = bench_broker(turns=10 if quick else 20, total_bytes=200_000 if quick else 1_000_000)
    return 0 if all("MISSED" not in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
