"""LLM client throughput against the fake OpenAI-compatible server, beside bare HTTP clients.

The server (tests/fakes/openai_server.py, in its own process, as a real
endpoint would be) answers every request after ``--latency`` seconds (200 ms).
At concurrency c the ideal is c / latency requests per second. For each
concurrency this measures, in one process and interleaved, ``--repeats``
times each, ``--rounds`` requests per slot of concurrency after a warm-up that
opens one connection per slot:

- brewkb's client (the real openai SDK on its aiohttp transport, the
  semaphore, the ledger; no cache);
- a bare aiohttp client (one session, a semaphore, ``json.loads`` of each
  reply): the strongest reference, what the same transport gives without
  the SDK and brewkb;
- a bare httpx client (httpx2, the SDK's default transport), for comparison.

It also prints each client's CPU time per request (this process only; the
server runs in its own).

Targets at concurrency 32: brewkb at least 0.9 of the ideal and at least
0.95x the bare aiohttp client (medians). The default of 20 rounds measures
sustained throughput (640 requests at concurrency 32, about 4 s), what a
refine run's thousands of calls see. With 5 rounds two of the five waves
are the first (every slot's request built at once) and the last (the run
ends with its slowest reply), where the client's own CPU time per request
(printed) is not hidden behind other requests' waiting.

    python bench/llm_throughput.py [--latency 0.2] [--rounds 20] [--repeats 3] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchkit import add_check, checked_repeats, finish, spread, target  # noqa: E402

from brewkb.config import LLMConfig  # noqa: E402
from brewkb.llm.client import LLMClient  # noqa: E402

CONCURRENCY = (1, 8, 32, 64)
TARGET_AT = 32
TARGET_IDEAL = 0.9
TARGET_BARE = 0.95


def body(i: int) -> dict[str, object]:
    return {"model": "fake", "messages": [{"role": "user", "content": f"q{i}"}], "temperature": 0.1,
            "max_tokens": 1024, "seed": 0}


async def timed(n: int, concurrency: int, call: Callable[[int], Awaitable[object]], warm: int) -> float:
    """Requests per second for ``n`` calls, at most ``concurrency`` in flight,
    after ``warm`` calls."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with semaphore:
            await call(i)

    # warm-up: one call per slot opens as many connections as the run keeps busy, as a
    # client that has been running for a while holds them
    await asyncio.gather(*(one(-1 - i) for i in range(warm)))
    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(n)))
    CPU_MS.append((time.process_time() - cpu) / n * 1000)
    return n / (time.perf_counter() - start)


CPU_MS: list[float] = []  # the client's CPU milliseconds per request, one per measurement


async def brewkb_client(base_url: str, concurrency: int, n: int) -> float:
    client = LLMClient(LLMConfig(backend="openai", base_url=base_url, concurrency=concurrency, max_retries=0),
                       environ={})
    try:  # the client's own semaphore bounds the calls; the bench's lets them all through
        return await timed(n, n, lambda i: client.chat(client.request("agent", [{"role": "user", "content": f"q{i}"}])),
                           concurrency)
    finally:
        await client.aclose()


async def bare_aiohttp(base_url: str, concurrency: int, n: int) -> float:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def call(i: int) -> object:
            async with session.post(f"{base_url}/chat/completions", json=body(i),
                                    headers={"authorization": "Bearer unused"}) as response:
                response.raise_for_status()
                return json.loads(await response.read())

        return await timed(n, concurrency, call, concurrency)


async def bare_httpx(base_url: str, concurrency: int, n: int) -> float:
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(limits=limits, timeout=60) as http:
        async def call(i: int) -> object:
            response = await http.post(f"{base_url}/chat/completions", json=body(i),
                                       headers={"authorization": "Bearer unused"})
            response.raise_for_status()
            return json.loads(response.content)

        return await timed(n, concurrency, call, concurrency)


CLIENTS = {"brewkb": brewkb_client, "bare aiohttp": bare_aiohttp, "bare httpx": bare_httpx}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=20, help="requests per slot of concurrency")
    add_check(parser)
    args = parser.parse_args()
    repeats = checked_repeats(args)
    root = Path(__file__).resolve().parents[1]
    server = subprocess.Popen([sys.executable, "-m", "tests.fakes.openai_server", "--latency", str(args.latency)],
                              cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rates: dict[int, dict[str, list[float]]] = {c: {name: [] for name in CLIENTS} for c in CONCURRENCY}
    cpu: dict[int, dict[str, list[float]]] = {c: {name: [] for name in CLIENTS} for c in CONCURRENCY}
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        for concurrency in CONCURRENCY:
            n = concurrency * args.rounds
            for r in range(repeats):
                names = list(CLIENTS) if r % 2 == 0 else list(CLIENTS)[::-1]
                for name in names:
                    rates[concurrency][name].append(asyncio.run(CLIENTS[name](base_url, concurrency, n)))
                    cpu[concurrency][name].append(CPU_MS[-1])
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(10)
    print(f"fake server latency {args.latency * 1000:.0f} ms; {args.rounds} requests per concurrency slot; "
          f"{repeats} repetitions; median req/s (fraction of ideal)")
    print(f"{'concurrency':>12}{'ideal':>9}" + "".join(f"{name:>22}" for name in CLIENTS) + f"{'brewkb/aiohttp':>16}")
    figures: dict[str, object] = {"latency_s": args.latency, "rounds": args.rounds}
    for concurrency in CONCURRENCY:
        ideal = concurrency / args.latency
        medians = {name: statistics.median(v) for name, v in rates[concurrency].items()}
        ratios = [a / b for a, b in zip(rates[concurrency]["brewkb"], rates[concurrency]["bare aiohttp"], strict=True)]
        print(f"{concurrency:>12}{ideal:>9.1f}" + "".join(
            f"{medians[name]:>14.1f} ({medians[name] / ideal:.2f})" for name in CLIENTS)
              + f"{statistics.median(ratios):>16.3f}")
        figures[str(concurrency)] = {"ideal": ideal, **{
            name: {"req_s": spread(v, 1), "of_ideal": spread([x / ideal for x in v], 3),
                   "client_cpu_ms_per_request": spread(cpu[concurrency][name], 3)}
            for name, v in rates[concurrency].items()}, "brewkb_over_aiohttp": spread(ratios, 3)}
    print("client CPU per request, ms (median): " + ", ".join(
        f"{name} {statistics.median(cpu[TARGET_AT][name]):.2f}" for name in CLIENTS) + f" (at concurrency {TARGET_AT})")
    at = figures[str(TARGET_AT)]
    assert isinstance(at, dict)
    finish("llm_throughput", figures, {
        "of_ideal": target(at["brewkb"]["of_ideal"]["median"], TARGET_IDEAL, at_most=False,
                           what=f"of the ideal at concurrency {TARGET_AT}"),
        "over_bare_aiohttp": target(at["brewkb_over_aiohttp"]["median"], TARGET_BARE, at_most=False,
                                    what=f"x a bare aiohttp client at concurrency {TARGET_AT}"),
    }, args.check)


if __name__ == "__main__":
    main()
