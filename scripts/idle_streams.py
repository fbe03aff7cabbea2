#!/usr/bin/env python3
"""Many concurrent idle streams: N streaming completions held open at once through a gateway,
each getting its headers and then mostly nothing (slow simulated engines keep them waiting),
for HOLD seconds; then all are closed and the cluster must drain to zero.

Runs the gateway, the scheduler and two engine processes separately (each stream costs the
gateway two sockets, the client's and the engine's, or only the client's with --engine-http2),
and the clients here with asyncio.

    scripts/idle_streams.py [--streams N] [--hold SECONDS] [--engine-http2]

Prints how many streams opened, how many broke before they were closed, the gateway's open
file descriptors and resident memory while holding them, and whether everything drained.
"""

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import urllib.request

BIN = "target/release/switchyard"
GATEWAY, SCHEDULER, ENGINES = 19900, 19901, (19910, 19911)


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def wait_healthy(port):
    for _ in range(600):
        try:
            get(f"http://127.0.0.1:{port}/health")
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"port {port} never became healthy")


def metric(port, name):
    for line in get(f"http://127.0.0.1:{port}/metrics").splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def process_figures(pid):
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) // 1024
    return fds, rss


async def open_stream(i, opened, broken):
    reader, writer = await asyncio.open_connection("127.0.0.1", GATEWAY)
    body = json.dumps({"prompt": f"idle stream {i}", "max_tokens": 2000, "ignore_eos": True,
                       "stream": True}).encode()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 + f"content-length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        broken.append(status.decode(errors="replace").strip())
        writer.close()
        return None
    opened.append(i)
    return reader, writer


async def hold(stream, broken, stop):
    reader, writer = stream
    # Read what arrives (keep-alives, a token now and then) until told to stop.
    while not stop.is_set():
        try:
            chunk = await asyncio.wait_for(reader.read(65536), timeout=1.0)
        except asyncio.TimeoutError:
            continue
        if not chunk:
            broken.append("closed by the server")
            return
    writer.close()


async def run(streams, hold_seconds, gateway_pid):
    opened, broken = [], []
    started = time.time()
    results = []
    for batch in range(0, streams, 500):
        results += await asyncio.gather(
            *(open_stream(i, opened, broken) for i in range(batch, min(streams, batch + 500))),
            return_exceptions=True)
    open_seconds = time.time() - started
    errors = [r for r in results if isinstance(r, BaseException)]
    live = [r for r in results if isinstance(r, tuple)]
    print(f"opened {len(opened)} of {streams} streams in {open_seconds:.1f} s "
          f"({len(errors)} connection errors, {len(broken)} refused: {broken[:3]})")
    stop = asyncio.Event()
    holders = [asyncio.create_task(hold(s, broken, stop)) for s in live]
    await asyncio.sleep(hold_seconds / 2)
    fds, rss = process_figures(gateway_pid)
    current = metric(GATEWAY, "gateway_current_requests")
    print(f"holding: gateway in flight {current:.0f}, open fds {fds}, resident {rss} MiB")
    await asyncio.sleep(hold_seconds / 2)
    stop.set()
    await asyncio.gather(*holders)
    print(f"held {hold_seconds} s; broke before the client closed them: {len(broken)}")
    return len(opened), len(broken) + len(errors)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=10000)
    parser.add_argument("--hold", type=float, default=60)
    parser.add_argument("--engine-http2", action="store_true",
                        help="the gateway speaks HTTP/2 to the engines (one socket per engine)")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    per_stream = 1 if args.engine_http2 else 2
    if per_stream * args.streams + 100 > hard:
        print(f"note: the gateway needs {per_stream} socket(s) per stream; "
              f"the open-file limit is {hard}")
    env = dict(os.environ, RUST_LOG="warn")
    procs = []
    try:
        for port in ENGINES:
            procs.append(subprocess.Popen(
                [BIN, "engine", "--host", "127.0.0.1", "--port", str(port), "--backend", "sim",
                 "--sim-time-scale", "0.02", "--max-waiting-requests", "100000"],
                env=env, stdout=subprocess.DEVNULL))
        for port in ENGINES:
            wait_healthy(port)
        instances = ",".join(f"http://127.0.0.1:{p}" for p in ENGINES)
        procs.append(subprocess.Popen(
            [BIN, "scheduler", "--host", "127.0.0.1", "--port", str(SCHEDULER),
             "--instances", instances], env=env, stdout=subprocess.DEVNULL))
        wait_healthy(SCHEDULER)
        gateway = subprocess.Popen(
            [BIN, "gateway", "--host", "127.0.0.1", "--port", str(GATEWAY), "--scheduler",
             f"http://127.0.0.1:{SCHEDULER}", "--served-model-name", "qwen3-0.6b"]
            + (["--engine-http2"] if args.engine_http2 else []),
            env=env, stdout=subprocess.DEVNULL)
        procs.append(gateway)
        wait_healthy(GATEWAY)
        time.sleep(2)
        opened, broken = asyncio.run(run(args.streams, args.hold, gateway.pid))
        drained = False
        for _ in range(300):
            busy = metric(GATEWAY, "gateway_current_requests") + sum(
                metric(p, "vllm:num_requests_running") + metric(p, "vllm:num_requests_waiting")
                for p in ENGINES)
            if busy == 0:
                drained = True
                break
            time.sleep(0.1)
        print(f"drained to zero after the clients left: {drained}")
        ok = opened == args.streams and broken == 0 and drained
        print(f"RESULT streams {args.streams}: opened {opened}, broken {broken}, "
              f"drained {drained}: {'ok' if ok else 'FAILED'}")
        sys.exit(0 if ok else 1)
    finally:
        for p in procs:
            p.kill()


if __name__ == "__main__":
    main()
