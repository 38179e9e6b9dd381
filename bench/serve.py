"""What ``brewkb serve`` adds over calling the upstream directly.

A fake upstream (an aiohttp server in its own process, on loopback) answers
every streamed chat completion after a fixed ``--latency`` (200 ms) with
``--chunks`` server-sent events (20) ``--gap`` apart (5 ms), as a model
streams its tokens. ``brewkb serve`` runs in front of it as the real CLI runs
it (its own process, a KB of ``--recipes`` generated recipes, recording every
conversation). A client in this process streams chat completions, each a new
conversation whose user message is different words (so every request
retrieves and records), at 1, 32 and 128 concurrent streams: the same
requests in turn directly to the upstream, through two reference relays and
through the proxy, ``--repeats`` times each. A request's latency is from
sending it to reading its last byte.

The references say what one more hop costs on the machine: a bare relay in
Python (aiohttp's server and client in a process of their own, relaying and
nothing else) and, where ``socat`` is installed, a relay in C (socat, one
process per connection, bytes in and bytes out). What the proxy adds over the
Python relay is brewkb's own share.

Figures per concurrency (medians over the repeats): the latency the proxy
adds at p50 and p99 (proxied minus direct, in the same repeat), and the
throughput through the proxy as a share of the direct one. Then 10,000
requests (``--memory-requests``) through the proxy at 128 streams, with the
proxy's resident memory after the first 2,000 and at the end.

Targets: p50 added ≤ 2 ms, p99 added ≤ 10 ms, throughput ≥ 0.95 of direct at
every concurrency; memory growth from 2,000 to 10,000 requests ≤ 10 MB.

    nice -n 10 python bench/serve.py [--latency 0.2] [--repeats 3] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import add_check, checked_repeats, finish, spread, target  # noqa: E402

WORDS = ("order refund cancel address invoice account password shipping return exchange delivery payment card "
         "subscription plan upgrade discount coupon warranty repair booking seat flight hotel room ticket change "
         "update delete create report export import schedule meeting calendar reminder message email phone").split()
WAVES = {1: 40, 32: 256, 128: 768}
"""Requests of one measured wave at each concurrency."""
MEMORY_MARK = 2000


def _events(chunks: int) -> list[bytes]:
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "bench"}
    deltas = [{"role": "assistant", "content": ""}] + [{"content": f"token{i} "} for i in range(chunks - 2)]
    out = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in out] + [b"data: [DONE]\n\n"]


def upstream_main(latency: float, chunks: int, gap: float) -> None:
    """The fake upstream: prints its base URL, serves until stdin closes."""
    events = _events(chunks)

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        await asyncio.sleep(latency)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(event)
            if gap:
                await asyncio.sleep(gap)
        await response.write_eof()
        return response

    asyncio.run(_serve_until_stdin_closes(chat))


def relay_main(upstream: str) -> None:
    """The bare relay in front of ``upstream``: prints its base URL, relays until stdin closes."""

    async def main() -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256),
                                         auto_decompress=False) as session:
            async def relay(request: web.Request) -> web.StreamResponse:
                headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
                async with session.post(upstream + "/chat/completions", data=await request.read(),
                                        headers=headers) as answer:
                    response = web.StreamResponse(status=answer.status,
                                                  headers={"content-type": answer.headers.get("content-type", "")})
                    await response.prepare(request)
                    async for chunk in answer.content.iter_any():
                        await response.write(chunk)
                    await response.write_eof()
                    return response

            await _serve_until_stdin_closes(relay)

    asyncio.run(main())


async def _serve_until_stdin_closes(chat: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> None:
    """Serve ``chat`` at ``/v1/chat/completions`` on a free loopback port, print
    the base URL, stop when stdin closes."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=2048)
    await site.start()
    print(f"http://127.0.0.1:{runner.addresses[0][1]}/v1", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


def socat_relay(upstream: str) -> tuple[subprocess.Popen[bytes], str] | None:
    """socat relaying a free loopback port to ``upstream``, once it listens (None without socat)."""
    if not shutil.which("socat"):
        return None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    target = upstream.split("//", 1)[1].split("/", 1)[0]
    process = subprocess.Popen(["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr,backlog=2048",
                                f"TCP:{target}"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("socat did not start listening")


def make_kb(folder: Path, recipes: int) -> Path:
    kb = folder / "kb"
    subprocess.run([sys.executable, "-m", "brewkb", "init", str(kb)], check=True, capture_output=True)
    rng = random.Random(0)
    for i in range(recipes):
        words = rng.sample(WORDS, 6)
        (kb / "recipes" / f"task-{i}.md").write_text(
            f"---\nname: task-{i}\ndescription: {' '.join(words[:4])}\n---\n\n## How to perform\n\n"
            + "".join(f"{n}. `{w}_{i}(id)` then check the {words[(n + 1) % 6]}.\n" for n, w in enumerate(words, 1)))
    for args in (["add", "-A"], ["commit", "-qm", "recipes"]):
        subprocess.run(["git", *args], cwd=kb, check=True, capture_output=True)
    return kb


def _body(n: int) -> bytes:
    rng = random.Random(n)
    ask = " ".join(rng.choice(WORDS) for _ in range(12))
    return json.dumps({"model": "bench", "stream": True, "messages": [
        {"role": "system", "content": "You are the support agent of a company. Be brief and exact. " * 4},
        {"role": "user", "content": f"Request {n}: please {ask}."}]}).encode()


async def wave(url: str, concurrency: int, total: int, start: int) -> tuple[list[float], float]:
    """``total`` streamed requests, ``concurrency`` at a time; latencies and elapsed seconds."""
    connector = aiohttp.TCPConnector(limit=concurrency)
    headers = {"Authorization": "Bearer sk-bench", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        async def one(n: int) -> float:
            began = time.perf_counter()
            async with session.post(url + "/chat/completions", data=_body(n)) as answer:
                assert answer.status == 200, await answer.text()
                async for _ in answer.content.iter_any():
                    pass
            return time.perf_counter() - began

        await asyncio.gather(*(one(start - i - 1) for i in range(concurrency)))  # open the connections
        queue = iter(range(start, start + total))
        latencies: list[float] = []

        async def worker() -> None:
            for n in queue:
                latencies.append(await one(n))

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, time.perf_counter() - began


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(args: argparse.Namespace, urls: dict[str, str], pids: dict[str, int],
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``urls``: the base URL of each arm, "direct" first and "proxied" last."""
    figures: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    n = 1_000_000
    for concurrency, total in WAVES.items():
        kept: dict[str, list[float]] = {k: [] for k in ("p50", "p99", "relay_p50", "relay_p99", "socat_p50",
                                                       "socat_p99", "own_p50", "own_p99", "ratio", "relay_cpu",
                                                       "cpu")}
        for _ in range(args.repeats):
            waves = {}
            for name, url in urls.items():
                pid = pids.get(name)
                before = _cpu_s(pid) if pid else 0.0
                waves[name] = asyncio.run(wave(url, concurrency, total, n))
                n += total + concurrency
                if pid:
                    kept["cpu" if name == "proxied" else "relay_cpu"].append(
                        (_cpu_s(pid) - before) / (total + concurrency) * 1000)
            (direct, direct_s), (relayed, _), (proxied, proxied_s) = (waves[k] for k in ("direct", "relay", "proxied"))
            for q, name in ((0.5, "p50"), (0.99, "p99")):
                kept[name].append((_percentile(proxied, q) - _percentile(direct, q)) * 1000)
                kept[f"relay_{name}"].append((_percentile(relayed, q) - _percentile(direct, q)) * 1000)
                kept[f"own_{name}"].append((_percentile(proxied, q) - _percentile(relayed, q)) * 1000)
                if "socat" in waves:
                    kept[f"socat_{name}"].append((_percentile(waves["socat"][0], q) - _percentile(direct, q)) * 1000)
            kept["ratio"].append(direct_s / proxied_s)
            print(f"  {concurrency:>3} streams:" + "".join(
                f" {name} p50 {_percentile(lat, 0.5) * 1000:6.1f} p99 {_percentile(lat, 0.99) * 1000:6.1f} ms "
                f"{total / s:5.1f}/s |" for name, (lat, s) in waves.items())
                + f" CPU a request: relay {kept['relay_cpu'][-1]:.2f} ms, proxy {kept['cpu'][-1]:.2f} ms", flush=True)
        figures[f"c{concurrency}"] = {"added_p50_ms": spread(kept["p50"], 2), "added_p99_ms": spread(kept["p99"], 2),
                                      "relay_added_p50_ms": spread(kept["relay_p50"], 2),
                                      "relay_added_p99_ms": spread(kept["relay_p99"], 2),
                                      "over_relay_p50_ms": spread(kept["own_p50"], 2),
                                      "over_relay_p99_ms": spread(kept["own_p99"], 2),
                                      "throughput_ratio": spread(kept["ratio"], 3), "proxy_cpu_ms": spread(kept["cpu"], 2),
                                      "relay_cpu_ms": spread(kept["relay_cpu"], 2)}
        if kept["socat_p50"]:
            figures[f"c{concurrency}"].update(socat_added_p50_ms=spread(kept["socat_p50"], 2),
                                              socat_added_p99_ms=spread(kept["socat_p99"], 2))
        med = {k: v["median"] for k, v in figures[f"c{concurrency}"].items()}
        if kept["socat_p50"]:
            print(f"  {concurrency:>3} streams, medians: the relay in C (socat) adds p50 "
                  f"{med['socat_added_p50_ms']:+.2f} ms, p99 {med['socat_added_p99_ms']:+.2f} ms", flush=True)
        print(f"  {concurrency:>3} streams, medians: the relay adds p50 {med['relay_added_p50_ms']:+.2f} ms, "
              f"p99 {med['relay_added_p99_ms']:+.2f} ms; brewkb serve adds p50 {med['added_p50_ms']:+.2f} ms, "
              f"p99 {med['added_p99_ms']:+.2f} ms, of which over the relay p50 {med['over_relay_p50_ms']:+.2f} ms, "
              f"p99 {med['over_relay_p99_ms']:+.2f} ms", flush=True)
        targets[f"c{concurrency}_p50_added"] = target(med["added_p50_ms"], 2.0, what="ms")
        targets[f"c{concurrency}_p99_added"] = target(med["added_p99_ms"], 10.0, what="ms")
        targets[f"c{concurrency}_throughput"] = target(med["throughput_ratio"], 0.95, at_most=False,
                                                       what="of direct")
    proxy = urls["proxied"]
    asyncio.run(wave(proxy, 128, MEMORY_MARK, n))
    at_mark = _rss_mb(pids["proxied"])
    asyncio.run(wave(proxy, 128, args.memory_requests - MEMORY_MARK, n + MEMORY_MARK + 200))
    at_end = _rss_mb(pids["proxied"])
    print(f"  memory: {at_mark:.1f} MB after {MEMORY_MARK:,} requests, {at_end:.1f} MB after "
          f"{args.memory_requests:,}", flush=True)
    figures["memory_mb"] = {"after_2000": round(at_mark, 1), "at_end": round(at_end, 1),
                            "requests": args.memory_requests}
    targets["memory_growth"] = target(at_end - at_mark, 10.0, what="MB")
    return figures, targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.2, help="upstream's time to first byte, s")
    parser.add_argument("--chunks", type=int, default=20, help="events per answer")
    parser.add_argument("--gap", type=float, default=0.005, help="seconds between two events")
    parser.add_argument("--recipes", type=int, default=200)
    parser.add_argument("--memory-requests", type=int, default=10_000)
    parser.add_argument("--upstream-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--relay-to", help=argparse.SUPPRESS)
    add_check(parser)
    args = parser.parse_args()
    if args.upstream_only:
        upstream_main(args.latency, args.chunks, args.gap)
        return
    if args.relay_to:
        relay_main(args.relay_to)
        return
    repeats = checked_repeats(args)
    args.repeats = repeats
    load = os.getloadavg()
    print(f"load average at start {load[0]:.2f} on {os.cpu_count()} cores (others may share the machine)")
    with tempfile.TemporaryDirectory() as tmp:
        kb = make_kb(Path(tmp), args.recipes)
        fake = subprocess.Popen([sys.executable, __file__, "--upstream-only", "--latency", str(args.latency),
                                 "--chunks", str(args.chunks), "--gap", str(args.gap)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert fake.stdout is not None
        upstream = fake.stdout.readline().strip()
        bare = subprocess.Popen([sys.executable, __file__, "--relay-to", upstream], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert bare.stdout is not None
        relay = bare.stdout.readline().strip()
        socat = socat_relay(upstream)
        serve = subprocess.Popen([sys.executable, "-m", "brewkb", "serve", "--upstream", upstream, "--port", "0",
                                  "--json"], cwd=kb, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert serve.stdout is not None
        proxy = json.loads(serve.stdout.readline())["url"]
        try:
            print(f"upstream {upstream}: first byte after {args.latency * 1000:.0f} ms, {args.chunks} events "
                  f"{args.gap * 1000:.0f} ms apart; bare relay at {relay}; brewkb serve at {proxy}, "
                  f"{args.recipes} recipes; " + (f"socat at {socat[1]}" if socat else "no socat installed"))
            urls = {"direct": upstream, "relay": relay, **({"socat": socat[1]} if socat else {}), "proxied": proxy}
            figures, targets = measure(args, urls, {"relay": bare.pid, "proxied": serve.pid})
        finally:
            serve.terminate()
            serve.wait(timeout=60)
            if socat:
                socat[0].terminate()
                socat[0].wait(timeout=30)
            for helper in (bare, fake):
                helper.stdin.close()  # type: ignore[union-attr]
                helper.wait(timeout=30)
        written = sum(1 for p in (kb / "runs").rglob("serve/*.jsonl") for _ in p.open())
    load = os.getloadavg()
    print(f"load average at end {load[0]:.2f}; {written:,} conversations recorded")
    figures["recorded"] = written
    figures["setup"] = {"latency_s": args.latency, "chunks": args.chunks, "gap_s": args.gap,
                        "recipes": args.recipes, "repeats": repeats}
    finish("serve", figures, targets, args.check)


if __name__ == "__main__":
    main()
