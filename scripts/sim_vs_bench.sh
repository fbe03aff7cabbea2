#!/usr/bin/env bash
# Can the simulator's capacity answers be trusted? The same workload, rates and policy run twice:
# `switchyard bench` against `switchyard serve` with real simulated engines (real time, HTTP,
# gateway, scheduler), and `switchyard sim` on the same cluster under a virtual clock. Prints
# TTFT percentiles of both and their ratio for each rate (goal: within 15%).
#
#   scripts/sim_vs_bench.sh [OUT_DIR]
#
# Settings (environment): ENGINES (4), SIM_MODEL (llama-3.1-8b), POLICY (cache-aware),
# RATES (4,8,16), WORKLOAD_FLAGS (plain 2k-token prompts, 64 tokens out, 300 requests),
# ENGINE_FLAGS (none; given to both, for example "--kv-offloading-size 200"), TIME_SCALE (1).
#
# TIME_SCALE below 1 slows the real run down: its engines model time that many times as fast
# as the clock and the bench sends each rate times TIME_SCALE, so the real run is the same run
# stretched out, and its times are compared after multiplying by TIME_SCALE. It is for clusters
# larger than this machine can run in real time (the engines' own CPU work, the gateway's and
# the bench's take that much less of each modelled second).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/sim-vs-bench}
engines=${ENGINES:-4}
sim_model=${SIM_MODEL:-llama-3.1-8b}
policy=${POLICY:-cache-aware}
rates=${RATES:-4,8,16}
workload=${WORKLOAD_FLAGS:---workload plain --input-len 2048 --output-len 64 --num-requests 300}
engine_flags=${ENGINE_FLAGS:-}
scale=${TIME_SCALE:-1}
bench_rates=$(python3 -c "import sys; print(','.join(f'{float(r) * $scale:g}' for r in sys.argv[1].split(',')))" "$rates")
mkdir -p "$out"
cargo build --release -q
bin=target/release/switchyard

port=19700
engine_port=19710
"$bin" serve --backend sim --sim-model "$sim_model" --engines "$engines" --policy "$policy" \
    --port "$port" --engine-port "$engine_port" --sim-time-scale "$scale" $engine_flags \
    >"$out/serve.log" 2>&1 &
serve=$!
trap 'kill $serve 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.1
done
engine_urls=$(for i in $(seq 0 $((engines - 1))); do printf "http://127.0.0.1:%d," $((engine_port + i)); done)
"$bin" bench --url "http://127.0.0.1:$port" $workload --rate "$bench_rates" \
    --engine-metrics "${engine_urls%,}" --reset-prefix-cache --out "$out/bench" >/dev/null
kill $serve
"$bin" sim --instances "$engines" --sim-model "$sim_model" --policy "$policy" $workload \
    $engine_flags --rate "$rates" --out "$out/sim" >/dev/null

python3 - "$out" "$scale" <<'EOF'
import json, sys
out, scale = sys.argv[1], float(sys.argv[2])
bench = json.load(open(f"{out}/bench/result.json"))["results"]
sim = json.load(open(f"{out}/sim/result.json"))["results"]
print("| rate (req/s) | TTFT p50 bench / sim (ms) | p90 | p99 | worst sim/bench |")
print("|---|---|---|---|---|")
worst_all = 0.0
for b, s in zip(bench, sim):
    cells, worst = [], 0.0
    for q in ["p50", "p90", "p99"]:
        x, y = b["summary"]["ttft_ms"][q] * scale, s["summary"]["ttft_ms"][q]
        cells.append(f"{x:.0f} / {y:.0f}")
        worst = max(worst, abs(y / x - 1) if x else float("inf"))
    worst_all = max(worst_all, worst)
    print(f"| {s['rate']:.1f} | " + " | ".join(cells) + f" | {worst:.0%} |")
print(f"\nlargest difference: {worst_all:.0%} (goal: 15%)")
EOF
