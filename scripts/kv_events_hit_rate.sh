#!/usr/bin/env bash
# The prefix hit rate a scheduler reaches from vLLM-format KV events (ZMQ, translated from the
# engines' blocks and tokens) against switchyard's own events, on the same simulated engines and
# the same shared-prefix workload (issue 29's goal: at least 0.95x).
#
#   scripts/kv_events_hit_rate.sh [OUT_DIR]
#
# One set of sim engines publishes both: its own event stream, and vLLM's format
# (`--kv-events-port`). Three schedulers, each with its gateway, follow them:
# - own: as switchyard engines (status and KV events over their SSE streams);
# - zmq: as switchyard engines whose KV events come from the vLLM-format publisher
#   (`URL;kv-events=PORT`): the event path alone differs from `own`;
# - vllm: as vLLM instances (`vllm@URL;kv-events=PORT`): status scraped from /metrics as for a
#   real vLLM, the gateway given the engines' tokenizer with `--tokenizer`.
# Each is benched in turn, caches emptied before each run. Settings (environment): ENGINES (4), SIM_MODEL (llama-3.1-8b), RATES (8,32),
# POLICY (cache-aware), WORKLOAD_FLAGS, BIN (a prebuilt binary; default: cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/kv-events-hit-rate}
engines=${ENGINES:-4}
sim_model=${SIM_MODEL:-llama-3.1-8b}
rates=${RATES:-8,32}
policy=${POLICY:-cache-aware}
workload=${WORKLOAD_FLAGS:---workload shared-prefix --groups 30 --users-per-group 5 --system-len 2000 --question-len 64 --output-len 64}
mkdir -p "$out"
if [ -z "${BIN:-}" ]; then
    cargo build --release -q
    BIN=target/release/switchyard
fi
. scripts/lib/processes.sh

engine_port=19500 zmq_port=19600 replay_port=19700
export SWITCHYARD_CACHE_DIR="$out/cache"
"$BIN" engine --backend sim --sim-model "$sim_model" --instances "$engines" --port "$engine_port" \
    --host 127.0.0.1 --kv-events-port "$zmq_port" --kv-events-replay-port "$replay_port" \
    >"$out/engines.log" 2>&1 &
pids+=($!)
own=() zmq=() vllm=() urls=()
for i in $(seq 0 $((engines - 1))); do
    url="http://127.0.0.1:$((engine_port + i))"
    wait_for "$url/health"
    urls+=("$url")
    own+=("$url")
    zmq+=("$url;kv-events=$((zmq_port + i));kv-events-replay=$((replay_port + i))")
    vllm+=("vllm@$url;kv-events=$((zmq_port + i));kv-events-replay=$((replay_port + i))")
done
model=$(curl -s "${urls[0]}/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
tokenizer_dir=$(ls -d "$SWITCHYARD_CACHE_DIR"/builtin-* | head -1)

start() { # name port command...
    local name=$1 port=$2
    shift 2
    "$@" >"$out/$name.log" 2>&1 &
    pids+=($!)
    wait_for "http://127.0.0.1:$port/health"
}
start scheduler-own 19801 "$BIN" scheduler --host 127.0.0.1 --port 19801 --policy "$policy" \
    --instances "$(IFS=,; echo "${own[*]}")"
start scheduler-vllm 19802 "$BIN" scheduler --host 127.0.0.1 --port 19802 --policy "$policy" \
    --instances "$(IFS=,; echo "${vllm[*]}")"
start scheduler-zmq 19803 "$BIN" scheduler --host 127.0.0.1 --port 19803 --policy "$policy" \
    --instances "$(IFS=,; echo "${zmq[*]}")"
start gateway-zmq 19903 "$BIN" gateway --host 127.0.0.1 --port 19903 \
    --scheduler http://127.0.0.1:19803
start gateway-own 19901 "$BIN" gateway --host 127.0.0.1 --port 19901 \
    --scheduler http://127.0.0.1:19801
start gateway-vllm 19902 "$BIN" gateway --host 127.0.0.1 --port 19902 \
    --scheduler http://127.0.0.1:19802 --tokenizer "$model=$tokenizer_dir"
sleep 3
joined=$(IFS=,; echo "${urls[*]}")
for name in own zmq vllm; do
    case $name in own) port=19901 ;; vllm) port=19902 ;; zmq) port=19903 ;; esac
    echo "== $name"
    "$BIN" bench --url "http://127.0.0.1:$port" --model "$model" $workload --rate "$rates" \
        --engine-metrics "$joined" --reset-prefix-cache --out "$out/$name" | tee "$out/$name.md"
done
