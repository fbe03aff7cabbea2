#!/usr/bin/env python3
"""Downtime of a request moved between two CPU engines mid-stream, against today's way of moving
it (its engine dies and the gateway resumes it elsewhere by recomputing prompt and output).

Runs two `switchyard engine --backend cpu` processes (the built-in model unless --model names a
directory; `--backend cuda` on a GPU machine, with `--engine-args` such as
`--gpu-memory-utilization 0.4` so that both fit), a scheduler and a gateway, all separate. For
each context length, each trial streams one completion of that many prompt tokens (fresh random
ids, so no prefix is cached) through the gateway and, after --move-after tokens:

- migration: asks the serving engine to move it (`POST /v1/migrations`) to the other one;
- recomputation: kills the serving engine (SIGKILL), so the gateway resumes the stream on the
  other one, then starts it again for the next trial.

Downtime is the largest gap between two tokens the client received after the move began, minus
the median gap before it (the normal step time). Prints one table row per length and way: the
median and largest downtime over the trials, the median step, and, for migration, the median
pause the source reported (suspended_ms) and the KV bytes moved. Every request is greedy; with
--check-identity each moved one is streamed again unmoved and must give the same text.

    scripts/migration_downtime.py [--binary target/release/switchyard] [--lengths 256,2048,8192]
                                  [--trials 10] [--model builtin]
                                  [--ways migration,recomputation] [--backend cpu]
                                  [--engine-args "..."] [--check-identity]
"""

import argparse
import json
import random
import shlex
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

GATEWAY, SCHEDULER, ENGINES = 19700, 19701, (19710, 19711)


def call(url, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return r.read().decode()


def wait_healthy(port):
    for _ in range(600):
        try:
            call(f"http://127.0.0.1:{port}/health", timeout=2)
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"port {port} never became healthy")


def wait_schedulable(count):
    for _ in range(600):
        try:
            listed = json.loads(call(f"http://127.0.0.1:{SCHEDULER}/v1/instances", timeout=2))
            if sum(1 for i in listed if i["schedulable"]) == count:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("the scheduler never saw both engines")


class Cluster:
    def __init__(self, binary, model, max_len, backend="cpu", engine_args=()):
        self.binary, self.model, self.max_len = binary, model, max_len
        self.backend, self.engine_args = backend, list(engine_args)
        self.log = open("/tmp/migration_downtime.log", "w")
        self.engines = {port: self.start_engine(port) for port in ENGINES}
        instances = ",".join(f"http://127.0.0.1:{p}" for p in ENGINES)
        self.others = [
            self.spawn("scheduler", "--port", str(SCHEDULER), "--instances", instances),
        ]
        wait_healthy(SCHEDULER)
        self.others.append(
            self.spawn(
                "gateway", "--port", str(GATEWAY), "--scheduler", f"http://127.0.0.1:{SCHEDULER}"
            )
        )
        wait_healthy(GATEWAY)
        wait_schedulable(2)
        self.name = json.loads(call(f"http://127.0.0.1:{ENGINES[0]}/v1/models"))["data"][0]["id"]
        # The gateway learns the model from the engines: wait until it answers for it.
        for _ in range(100):
            try:
                call(f"http://127.0.0.1:{GATEWAY}/v1/completions",
                     {"model": self.name, "prompt": [300], "max_tokens": 1})
                break
            except urllib.error.HTTPError:
                time.sleep(0.1)
        self.vocab = self.vocab_size()

    def vocab_size(self):
        """The vocabulary size, which the gateway names when it refuses an id past it: its
        tokenizer's (an engine names its logits' width, which may be wider)."""
        try:
            call(f"http://127.0.0.1:{GATEWAY}/v1/completions",
                 {"model": self.name, "prompt": [10**9], "max_tokens": 1})
        except urllib.error.HTTPError as e:
            message = json.loads(e.read())["error"]["message"]
            return int(message.rsplit("size ", 1)[1].rstrip(")."))
        sys.exit("the engine took a token id of a billion")

    def spawn(self, *args):
        return subprocess.Popen([self.binary, *args], stdout=self.log, stderr=self.log)

    def start_engine(self, port):
        process = self.spawn(
            "engine", "--backend", self.backend, "--model", self.model, "--port", str(port),
            "--max-model-len", str(self.max_len), *self.engine_args,
        )
        wait_healthy(port)
        return process

    def restart(self, port):
        self.engines[port].wait()
        self.engines[port] = self.start_engine(port)
        wait_schedulable(2)

    def stop(self):
        for p in [*self.engines.values(), *self.others]:
            p.kill()


def stream(cluster, prompt, tokens, rid, on_token):
    """Streams a greedy completion of `prompt` through the gateway, calling `on_token(response,
    count)` as each token arrives; the text."""
    body = json.dumps({"model": cluster.name, "prompt": prompt, "max_tokens": tokens,
                       "ignore_eos": True,
                       "temperature": 0, "stream": True}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{GATEWAY}/v1/completions", data=body,
        headers={"content-type": "application/json", "x-request-id": rid})
    try:
        response = urllib.request.urlopen(request, timeout=300)
    except urllib.error.HTTPError as e:
        sys.exit(f"{rid}: the gateway answered {e.code}: {e.read().decode()}")
    text, count = [], 0
    with response:
        for line in response:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["text"] is not None:
                text.append(chunk["choices"][0]["text"])
                count += 1
                on_token(response, count)
    return "".join(text)


def trial(cluster, length, way, tokens, move_after, check_identity=False):
    """One stream of `length` prompt tokens moved `way`; (downtime s, step s, report)."""
    rid = f"{way}-{length}-{random.getrandbits(40):x}"
    prompt = [random.randrange(300, cluster.vocab) for _ in range(length)]
    arrivals, report, moved_at = [], {}, [None]

    def on_token(response, count):
        arrivals.append(time.perf_counter())
        if count != move_after:
            return
        source = int(response.headers["x-switchyard-instance"].rsplit(":", 1)[1])
        other = ENGINES[1 - ENGINES.index(source)]
        report["source"] = source

        def move():
            moved_at[0] = time.perf_counter()
            if way == "migration":
                answer = call(f"http://127.0.0.1:{source}/v1/migrations",
                              {"destination": f"http://127.0.0.1:{other}", "request_id": rid})
                report.update(json.loads(answer))
            else:
                cluster.engines[source].kill()

        threading.Thread(target=move).start()

    moved_text = stream(cluster, prompt, tokens, rid, on_token)
    source = report.pop("source", None)
    if way == "recomputation":
        cluster.restart(source)
    if check_identity:
        # Computed afresh, as the moved one was: a cached prefix would be computed in other
        # chunks, which bf16 need not round the same way.
        for port in ENGINES:
            call(f"http://127.0.0.1:{port}/reset_prefix_cache", {})
        unmoved = stream(cluster, prompt, tokens, rid + "-unmoved", lambda *_: None)
        if unmoved != moved_text:
            sys.exit(f"{rid}: moved {way} the text differs from unmoved:\n{moved_text!r}\n"
                     f"{unmoved!r}")
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    step = statistics.median(gaps[: move_after - 1])
    after = [b - a for a, b in zip(arrivals, arrivals[1:]) if b > moved_at[0]]
    if len(arrivals) != tokens:
        sys.exit(f"{rid}: {len(arrivals)} tokens of {tokens}")
    return max(after) - step, step, report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default="target/release/switchyard")
    parser.add_argument("--model", default="builtin")
    parser.add_argument("--lengths", default="256,2048,8192")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--move-after", type=int, default=16)
    parser.add_argument("--ways", default="migration,recomputation")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--engine-args", default="", help="more flags for both engines")
    parser.add_argument("--check-identity", action="store_true",
                        help="stream each prompt again unmoved and compare the texts")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    cluster = Cluster(args.binary, args.model, max(lengths) + args.tokens + 16, args.backend,
                      shlex.split(args.engine_args))
    print("| context (tokens) | way | downtime median (ms) | downtime max (ms) | step median (ms) "
          "| source pause median (ms) | KV moved (MB) |")
    print("|---|---|---|---|---|---|---|")
    try:
        for length in lengths:
            for way in args.ways.split(","):
                rows = [trial(cluster, length, way, args.tokens, args.move_after,
                              args.check_identity)
                        for _ in range(args.trials)]
                downs = [r[0] * 1e3 for r in rows]
                steps = [r[1] * 1e3 for r in rows]
                moved = [r[2]["migrated"][0] for r in rows if r[2].get("migrated")]
                if way == "migration" and len(moved) != len(rows):
                    failed = [r[2] for r in rows if not r[2].get("migrated")]
                    sys.exit(f"moves failed: {failed}")
                pause = f"{statistics.median(m['suspended_ms'] for m in moved):.1f}" if moved else "-"
                mb = f"{statistics.median(m['bytes'] for m in moved) / 1e6:.1f}" if moved else "-"
                print(f"| {length} | {way} | {statistics.median(downs):.1f} | {max(downs):.1f} "
                      f"| {statistics.median(steps):.2f} | {pause} | {mb} |", flush=True)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
