#!/usr/bin/env python3
"""How low any dispatcher could bring a `sim` run's TTFT percentiles: the same arrivals placed by
a clairvoyant earliest-finish dispatcher on instances that only compute prompts.

Reads the `requests.jsonl` that `switchyard sim --out DIR` writes and replays its arrivals (time,
prompt length) on `--instances` instances, each computing the prompts it is given first come,
first served (as vLLM and switchyard's engines do) at `--tokens-per-second`, plus
`--step-overhead` seconds per `--chunk` prompt tokens (a step's fixed cost, shared by the
prompts in it). Each request goes, as it arrives, to the instance that would give it its first
token earliest, knowing every instance's queue exactly. Decodes cost nothing, no prefix is
cached, and no prompt waits for a running seat, so the figures are optimistic: a placement
policy that dispatches on arrival to first-come-first-served engines does not beat them by
much (a central queue that reorders prompts, or prefix caching, can).

The default rate is the simulator's prefill roofline of Llama-3.1-8B on an H100 (989 TFLOPS at
its 0.6 efficiency over 2 FLOPs per weight of the 6.98 B layer weights a token, attention left
out): 42,511 tokens a second.

    scripts/ttft_floor.py DIR/requests.jsonl [--instances 16] [--tokens-per-second 42511]
                          [--step-overhead 0.002] [--chunk 8192]
"""

import argparse
import json


def percentile(sorted_values, share):
    return sorted_values[min(len(sorted_values) - 1, int(share * len(sorted_values)))]


def floor_ttfts(arrivals, instances, tokens_per_second, step_overhead, chunk):
    """TTFT of each (time, prompt tokens) arrival under the clairvoyant dispatcher."""
    free = [0.0] * instances
    ttfts = []
    for sent, prompt in sorted(arrivals):
        seconds = prompt / tokens_per_second + step_overhead * prompt / chunk
        best = min(range(instances), key=lambda i: max(free[i], sent))
        free[best] = max(free[best], sent) + seconds
        ttfts.append(free[best] - sent)
    return ttfts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("requests", help="requests.jsonl of a `switchyard sim --out` run")
    parser.add_argument("--instances", type=int, default=16)
    parser.add_argument("--tokens-per-second", type=float, default=42511.0)
    parser.add_argument("--step-overhead", type=float, default=0.002)
    parser.add_argument("--chunk", type=float, default=8192.0)
    args = parser.parse_args()
    with open(args.requests) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    done = [r for r in rows if r["error"] is None]
    floor = sorted(floor_ttfts([(r["sent_s"], r["prompt_tokens"]) for r in rows],
                               args.instances, args.tokens_per_second, args.step_overhead,
                               args.chunk))
    run = sorted(r["ttft_s"] for r in done)
    print("| TTFT (ms) | p50 | p90 | p99 |")
    print("|---|---|---|---|")
    for name, values in (("this run", run), ("clairvoyant earliest finish", floor)):
        cells = " | ".join(f"{percentile(values, q) * 1000:.0f}" for q in (0.5, 0.9, 0.99))
        print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
