#!/usr/bin/env bash
# Side by side, on the same simulated engines and the same workload: switchyard (scheduler +
# gateway), SGLang Model Gateway (`smg`, cache_aware and round_robin) and vLLM Router
# (cache_aware and round_robin), each driven by `switchyard bench` over a sweep of request rates;
# plus the engines called directly at a low rate, to show what each router adds.
#
#   scripts/peers.sh [OUT_DIR]
#
# Settings (environment): ENGINES (4), SIM_MODEL (llama-3.1-8b), RATES (4,16,32,64),
# WORKLOAD_FLAGS (a shared-prefix workload), SLO_TTFT / SLO_TPOT (ms: 2000 / 100),
# SWITCHYARD_POLICIES (cache-aware; comma-separated, each run through its own scheduler),
# PEER_POLICIES (cache_aware,round_robin; a space for none), LOW_RATE_RUNS (1; 0 skips the
# 1 req/s runs), SWITCHYARD_SCHEDULER_FLAGS (more flags for switchyard's scheduler, e.g. its
# SLOs or --no-rescheduling; none by default).
# The summary gives each router's highest rate inside the SLOs: the highest swept rate at which
# at least 90% of the requests met both (and every lower rate did too).
# The peers are installed with pip into a virtual environment under target/; they are never a
# dependency of the build or the tests. Writes OUT_DIR/<router>/result.{json,md} and the SVG
# plots, and OUT_DIR/summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/peers}
engines=${ENGINES:-4}
sim_model=${SIM_MODEL:-llama-3.1-8b}
rates=${RATES:-4,16,32,64}
SWITCHYARD_POLICIES=${SWITCHYARD_POLICIES:-cache-aware}
PEER_POLICIES=${PEER_POLICIES:-cache_aware,round_robin}
LOW_RATE_RUNS=${LOW_RATE_RUNS:-1}
slo_ttft=${SLO_TTFT:-2000}
slo_tpot=${SLO_TPOT:-100}
workload=${WORKLOAD_FLAGS:---workload shared-prefix --groups 30 --users-per-group 5 --system-len 2000 --question-len 64 --output-len 64}
venv=target/peers-venv
mkdir -p "$out"

if [ ! -x "$venv/bin/smg" ] || [ ! -x "$venv/bin/vllm-router" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q smg vllm-router
fi
cargo build --release -q
bin=target/release/switchyard
. scripts/lib/processes.sh

engine_port=19500
"$bin" engine --backend sim --sim-model "$sim_model" --instances "$engines" --port "$engine_port" \
    --host 127.0.0.1 >"$out/engines.log" 2>&1 &
pids+=($!)
urls=()
for i in $(seq 0 $((engines - 1))); do
    urls+=("http://127.0.0.1:$((engine_port + i))")
    wait_for "http://127.0.0.1:$((engine_port + i))/health"
done
joined=$(IFS=,; echo "${urls[*]}")
model=$(curl -s "${urls[0]}/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')

bench() { # name url flags...
    local name=$1 url=$2
    shift 2
    if [ "$LOW_RATE_RUNS" = 0 ] && [ "${name%-low}" != "$name" ]; then return 0; fi
    echo "== $name"
    # Caches start cold for every router and every rate (--reset-prefix-cache).
    "$bin" bench --url "$url" --model "$model" $workload --slo-ttft "$slo_ttft" --slo-tpot "$slo_tpot" \
        --engine-metrics "$joined" --reset-prefix-cache --out "$out/$name" "$@" | tee "$out/$name.md"
}

start() { # name port command...
    local name=$1 port=$2
    shift 2
    "$@" >"$out/$name.log" 2>&1 &
    pids+=($!)
    wait_for "http://127.0.0.1:$port/health" || wait_for "http://127.0.0.1:$port/v1/models"
}

stop_last() { kill "${pids[-1]}" 2>/dev/null || true; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'; }

# What a router adds: the same low-rate workload straight to one engine, then through each.
bench direct-low "${urls[0]}" --rate 1 --num-requests 40

for policy in ${SWITCHYARD_POLICIES//,/ }; do
    start "switchyard-$policy-scheduler" 19600 "$bin" scheduler --port 19600 --host 127.0.0.1 \
        --instances "$joined" --policy "$policy" ${SWITCHYARD_SCHEDULER_FLAGS:-}
    start "switchyard-$policy" 19601 "$bin" gateway --port 19601 --host 127.0.0.1 \
        --scheduler http://127.0.0.1:19600 --served-model-name "$model"
    bench "switchyard-$policy-low" http://127.0.0.1:19601 --rate 1 --num-requests 40
    bench "switchyard-$policy" http://127.0.0.1:19601 --rate "$rates"
    stop_last
    stop_last
done

for policy in ${PEER_POLICIES//,/ }; do
    start "smg-$policy" 19602 "$venv/bin/smg" launch --host 127.0.0.1 --port 19602 --policy "$policy" \
        --worker-urls "${urls[@]}"
    bench "smg-$policy-low" http://127.0.0.1:19602 --rate 1 --num-requests 40
    bench "smg-$policy" http://127.0.0.1:19602 --rate "$rates"
    stop_last
    start "vllm-router-$policy" 19603 "$venv/bin/vllm-router" --host 127.0.0.1 --port 19603 \
        --policy "$policy" --worker-urls "${urls[@]}"
    bench "vllm-router-$policy-low" http://127.0.0.1:19603 --rate 1 --num-requests 40
    bench "vllm-router-$policy" http://127.0.0.1:19603 --rate "$rates"
    stop_last
done

{
    echo "Engines: $engines simulated $sim_model on H100; workload: $workload; SLOs: TTFT $slo_ttft ms, TPOT $slo_tpot ms."
    echo
    for f in "$out"/*.md; do
        [ "$(basename "$f")" = summary.md ] && continue
        echo "### $(basename "$f" .md)"
        echo
        grep '^|' "$f" | awk '!seen[$0]++'
        echo
    done
    echo "### Highest rate inside the SLOs (at least 90% of requests within both)"
    echo
    python3 - "$out" <<'PY'
import json, pathlib, sys
print("| router | SLO attainment at each rate | highest rate inside the SLOs |")
print("|---|---|---|")
for result in sorted(pathlib.Path(sys.argv[1]).glob("*/result.json")):
    name = result.parent.name
    if name.endswith("-low"):
        continue
    runs = sorted(json.loads(result.read_text())["results"], key=lambda r: r["rate"])
    best = None
    for run in runs:
        if run["summary"]["slo_attainment"] < 0.9:
            break
        best = run["rate"]
    shares = ", ".join(f'{r["rate"]:g}: {100 * r["summary"]["slo_attainment"]:.0f}%' for r in runs)
    print(f"| {name} | {shares} | {'below ' + format(runs[0]['rate'], 'g') if best is None else format(best, 'g')} |")
PY
} >"$out/summary.md"
echo "summary: $out/summary.md"
