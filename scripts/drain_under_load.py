#!/usr/bin/env python3
"""Drain an engine with N running requests by live migration, under load, and check that every
request finishes whole.

Runs two simulated engines (Llama-3.1-8B on H100 by default, real time), a scheduler that
follows an instances file, and a gateway, all separate processes. The file names engine A only
while N streaming completions start (so all N run on A), then engine B too; once B is
schedulable, `POST /v1/instances/drain` empties A while more requests keep arriving (--load
requests a second, placed on B since A is draining). Prints the drain's answer, the time the
KV of the blocks moved takes over the simulated link (blocks x block bytes / 25 Gb/s, plus 1 ms a
stage) and the drain's time beyond it, the moves' own durations, and checks that every stream
ended with all its tokens and `[DONE]`.

    scripts/drain_under_load.py [--binary target/release/switchyard] [--requests 64]
                                [--tokens 2000] [--load 20]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

GATEWAY, SCHEDULER, ENGINES = 19600, 19601, (19610, 19611)


def call(url, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return r.read().decode()


def wait_until(check, what, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"timed out waiting for {what}")


def metric(port, name):
    total = 0.0
    for line in call(f"http://127.0.0.1:{port}/metrics").splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def schedulable():
    listed = json.loads(call(f"http://127.0.0.1:{SCHEDULER}/v1/instances"))
    return {i["meta"]["id"] for i in listed if i["schedulable"]}


def stream(tokens, results, i):
    body = {"prompt": f"request {i} of the drain", "max_tokens": tokens, "ignore_eos": True,
            "temperature": 0, "stream": True}
    request = urllib.request.Request(
        f"http://127.0.0.1:{GATEWAY}/v1/completions", data=json.dumps(body).encode(),
        headers={"content-type": "application/json"})
    got, done = 0, False
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            for line in response:
                if line.startswith(b"data: [DONE]"):
                    done = True
                elif line.startswith(b"data: {"):
                    chunk = json.loads(line[6:])
                    assert "error" not in chunk, chunk
                    if chunk["choices"]:
                        got += 1
    except Exception as e:  # noqa: BLE001 - reported below, with the request
        results[i] = f"failed: {e}"
        return
    results[i] = "whole" if done and got == tokens else f"{got} tokens, done={done}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default="target/release/switchyard")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--load", type=float, default=20.0)
    parser.add_argument("--sim-model", default="llama-3.1-8b")
    parser.add_argument("--kv-bytes-per-token", type=int, default=131072,
                        help="the model's KV bytes per token (Llama-3.1-8B: 131072)")
    args = parser.parse_args()
    urls = [f"http://127.0.0.1:{p}" for p in ENGINES]
    folder = tempfile.mkdtemp()
    instances = os.path.join(folder, "instances")
    with open(instances, "w") as f:
        f.write(urls[0] + "\n")
    log = open("/tmp/drain_under_load.log", "w")
    spawn = lambda *a: subprocess.Popen([args.binary, *a], stdout=log, stderr=log)  # noqa: E731
    processes = [spawn("engine", "--backend", "sim", "--sim-model", args.sim_model, "--port",
                       str(p)) for p in ENGINES]
    try:
        for p in ENGINES:
            wait_until(lambda p=p: call(f"http://127.0.0.1:{p}/health") is not None, "an engine")
        processes.append(spawn("scheduler", "--port", str(SCHEDULER), "--instances-file",
                               instances, "--discovery-interval", "0.2"))
        wait_until(lambda: schedulable() == {urls[0]}, "engine A")
        processes.append(spawn("gateway", "--port", str(GATEWAY), "--scheduler",
                               f"http://127.0.0.1:{SCHEDULER}"))
        wait_until(lambda: call(f"http://127.0.0.1:{GATEWAY}/v1/completions",
                                {"prompt": "hi", "max_tokens": 1}) is not None, "the gateway")
        results = {}
        threads = [threading.Thread(target=stream, args=(args.tokens, results, i))
                   for i in range(args.requests)]
        for t in threads:
            t.start()
        running = f"vllm:num_requests_running"
        wait_until(lambda: metric(ENGINES[0], running) == args.requests, "all running on A")
        with open(instances, "a") as f:
            f.write(urls[1] + "\n")
        wait_until(lambda: schedulable() == set(urls), "engine B")
        stop = threading.Event()

        def load():
            n = args.requests
            while not stop.is_set():
                t = threading.Thread(target=stream, args=(64, results, n))
                t.start()
                threads.append(t)
                n += 1
                time.sleep(1 / args.load)

        loader = threading.Thread(target=load)
        loader.start()
        time.sleep(1)
        started = time.time()
        report = json.loads(call(f"http://127.0.0.1:{SCHEDULER}/v1/instances/drain",
                                 {"instance": urls[0], "timeout_s": 120}))
        wall = time.time() - started
        stop.set()
        loader.join()
        for t in threads:
            t.join()
        moves_ms = metric(SCHEDULER, "scheduler_migration_duration_milliseconds_sum")
        blocks = metric(SCHEDULER, "scheduler_migration_blocks_sum")
        transfer = blocks * 16 * args.kv_bytes_per_token * 8 / 25e9
        pause = metric(SCHEDULER, "scheduler_migration_downtime_milliseconds_sum")
        count = metric(SCHEDULER, "scheduler_migration_downtime_milliseconds_count")
        bad = {i: r for i, r in results.items() if r != "whole"}
        print(json.dumps(report))
        print(f"drain {report['seconds']:.2f} s (wall {wall:.2f} s); KV transfer time "
              f"{transfer:.2f} s ({blocks:.0f} blocks), beyond it "
              f"{report['seconds'] - transfer:.2f} s; moves' own durations sum to "
              f"{moves_ms / 1e3:.2f} s; mean pause {pause / max(count, 1):.2f} ms over "
              f"{count:.0f} moves")
        print(f"{len(results)} requests (the {args.requests} drained and the load), "
              f"{len(results) - len(bad)} whole, {len(bad)} not: {dict(list(bad.items())[:5])}")
        if bad or report["failed"] or report["remaining"]:
            sys.exit(1)
    finally:
        for p in processes:
            p.kill()


if __name__ == "__main__":
    main()
