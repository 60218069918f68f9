"""Load test of `execcritic serve`: CLIENTS concurrent streaming chat clients for DURATION seconds.

usage: serve_load.py BASE_URL MODEL SERVER_PID OUT.json [--clients 64] [--duration 20] [--max-tokens 48]

Each client sends streaming chat requests (stream_options.include_usage, ignore_eos, 8 distinct
conversations) back to back until the time is up, measuring time to first token, inter-token
latency and request latency. Before the timed run a short warm-up at full concurrency settles the
caches; afterwards the server must be idle again (no running or admitted sequences) and its resident
memory back near the post-warm-up level. Exits 1 on any failed request or leak.
"""
import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import httpx


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def gauges(client, base):
    text = (await client.get(f"{base}/metrics")).text
    out = {}
    for name in ("execcritic_running_sequences", "execcritic_admitted_sequences", "execcritic_queue_depth"):
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        out[name] = float(m.group(1))
    return out


async def wait_idle(client, base, deadline=30.0):
    end = time.monotonic() + deadline
    while True:
        g = await gauges(client, base)
        if g["execcritic_running_sequences"] == 0 and g["execcritic_admitted_sequences"] == 0:
            return g
        if time.monotonic() > end:
            return g
        await asyncio.sleep(0.05)


async def one_request(client, base, model, i, max_tokens, stats):
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"Conversation {i % 8}: list the files."}],
        "max_tokens": max_tokens, "temperature": 1.0, "seed": i, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    first = last = None
    usage = None
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            stats["errors"].append(f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
            return
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                stats["errors"].append(str(chunk["error"]))
                return
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices", []):
                d = c.get("delta", {})
                if d.get("content") or d.get("reasoning_content"):
                    now = time.perf_counter()
                    if first is None:
                        first = now
                        stats["ttft"].append(now - t0)
                    else:
                        stats["itl"].append(now - last)
                    last = now
    if usage is None:
        stats["errors"].append("no usage chunk")
        return
    stats["e2e"].append(time.perf_counter() - t0)
    stats["tokens"] += usage["completion_tokens"]
    stats["requests"] += 1


async def run(base, model, clients, duration, max_tokens):
    stats = {"ttft": [], "itl": [], "e2e": [], "errors": [], "tokens": 0, "requests": 0}
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        stop = time.monotonic() + duration

        async def worker(w):
            k = 0
            while time.monotonic() < stop:
                try:
                    await one_request(client, base, model, w * 1000 + k, max_tokens, stats)
                except Exception as e:  # a failed request is a result, not a crash
                    stats["errors"].append(repr(e))
                k += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(clients)))
        stats["wall"] = time.perf_counter() - t0
    return stats


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base"); ap.add_argument("model"); ap.add_argument("pid", type=int); ap.add_argument("out")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    await run(a.base, a.model, a.clients, 3.0, a.max_tokens)  # warm-up
    async with httpx.AsyncClient(timeout=30) as c:
        await wait_idle(c, a.base)
    rss_idle = rss_mib(a.pid)
    s = await run(a.base, a.model, a.clients, a.duration, a.max_tokens)
    async with httpx.AsyncClient(timeout=30) as c:
        after = await wait_idle(c, a.base)
    rss_after = rss_mib(a.pid)
    ms = lambda x: None if x is None else round(x * 1000, 2)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "what": f"{a.clients} concurrent streaming chat clients for {a.duration:.0f} s on loopback (tiny fixture model, CPU engine)",
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit, "note": a.note,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared)",
        "clients": a.clients, "duration_s": round(s["wall"], 2), "max_tokens": a.max_tokens,
        "requests": s["requests"], "errors": len(s["errors"]), "error_samples": s["errors"][:5],
        "completion_tokens": s["tokens"],
        "throughput_tokens_per_s": round(s["tokens"] / s["wall"], 1),
        "requests_per_s": round(s["requests"] / s["wall"], 2),
        "ttft_ms": {p: ms(pct(s["ttft"], int(p[1:]))) for p in ("p50", "p90", "p99")},
        "inter_token_latency_ms": {p: ms(pct(s["itl"], int(p[1:]))) for p in ("p50", "p90", "p99")},
        "request_latency_ms": {p: ms(pct(s["e2e"], int(p[1:]))) for p in ("p50", "p90", "p99")},
        "after": {"running_sequences": after["execcritic_running_sequences"],
                  "admitted_sequences": after["execcritic_admitted_sequences"],
                  "queue_depth": after["execcritic_queue_depth"]},
        "rss_mib": {"idle_after_warmup": round(rss_idle, 1), "idle_after_load": round(rss_after, 1)},
    }
    leak = rss_after > rss_idle * 1.25 + 32
    idle = all(v == 0 for v in result["after"].values())
    result["ok"] = not s["errors"] and idle and not leak and s["requests"] > 0
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(json.dumps(result, indent=2))
    sys.exit(0 if result["ok"] else 1)


asyncio.run(main())
