#!/usr/bin/env bash
# Soak: steady open-loop load for DURATION seconds against a gateway, a scheduler and two engine
# processes, killing (`kill -9`) and restarting one engine every RESTART_EVERY seconds. Samples
# every process's resident memory (each engine's per lifetime), and at the end reconciles the
# request counts of the client, the gateway, the scheduler and the engines (each engine's
# finished requests are read just before it is killed, and at the end).
#
#   scripts/soak.sh [OUT_DIR]
#
# Settings (environment): DURATION (1800), RATE (100 req/s), RESTART_EVERY (300), IDLE_AFTER
# (0 s of sampling without load after the run), BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/soak}
duration=${DURATION:-1800}
rate=${RATE:-100}
restart_every=${RESTART_EVERY:-300}
idle_after=${IDLE_AFTER:-0}
mkdir -p "$out"
rm -f "$out/engine-finished.txt"
# BIN runs a given build (one copied aside, so that rebuilding meanwhile cannot change it).
bin=${BIN:-target/release/switchyard}
[ -n "${BIN:-}" ] || cargo build --release -q
export RUST_LOG=warn
engine() { # PORT
    "$bin" engine --host 127.0.0.1 --port "$1" --backend sim >>"$out/engine-$1.log" 2>&1 &
    echo $!
}
# A port without a process (an engine between its kill and restart) sums to 0.
sum() { { curl -s "http://127.0.0.1:$1/metrics" || true; } | awk -v p="$2" 'index($0, p) == 1 {s += $NF} END {print s + 0}'; }
healthy() { for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return; sleep 0.1; done; }
engine 19610 >/dev/null; engine 19611 >/dev/null
healthy 19610; healthy 19611
"$bin" scheduler --host 127.0.0.1 --port 19601 \
    --instances http://127.0.0.1:19610,http://127.0.0.1:19611 >"$out/scheduler.log" 2>&1 &
scheduler=$!
healthy 19601
"$bin" gateway --host 127.0.0.1 --port 19600 --scheduler http://127.0.0.1:19601 \
    --served-model-name qwen3-0.6b >"$out/gateway.log" 2>&1 &
gateway=$!
healthy 19600
trap 'kill $scheduler $gateway 2>/dev/null; pkill -f -- "--port 1961[01] --backend sim" || true' EXIT
rss() { awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$1/status" 2>/dev/null || echo 0; }
(
    start=$(date +%s)
    while true; do
        engines=""
        for port in 19610 19611; do
            # Between a kill and the restart the port has no engine.
            pid=$(pgrep -f -- "--port $port --backend sim" | head -1 || true)
            engines="$engines engine-$port ${pid:-none} $(rss "${pid:-0}")"
        done
        # Requests in flight in the gateway and waiting in the engines, beside the memory.
        load="inflight $(sum 19600 gateway_current_requests) waiting $(sum 19610 'vllm:num_requests_waiting') $(sum 19611 'vllm:num_requests_waiting')"
        # The gateway's open sockets and files: connections it keeps.
        load="$load fds $(ls "/proc/$gateway/fd" 2>/dev/null | wc -l)"
        echo "$(( $(date +%s) - start )) gateway $(rss $gateway) scheduler $(rss $scheduler)$engines $load"
        sleep 10
    done
) >"$out/rss.txt" &
sampler=$!
(
    n=0
    while sleep "$restart_every"; do
        port=$((19610 + n % 2))
        pid=$(pgrep -f -- "--port $port --backend sim" | head -1)
        sum "$port" 'vllm:request_success_total' >>"$out/engine-finished.txt"
        kill -9 "$pid"
        sleep 5
        engine "$port" >/dev/null
        echo "restarted the engine on $port at $(date +%T)"
        n=$((n + 1))
    done
) >"$out/restarts.txt" 2>&1 &
restarter=$!
requests=$((rate * duration))
"$bin" bench --url http://127.0.0.1:19600 --workload plain --input-len 256 --output-len 64 \
    --rate "$rate" --num-requests "$requests" --request-timeout 60 --out "$out/bench" 2>/dev/null
kill $restarter 2>/dev/null || true
# IDLE_AFTER seconds without load, still sampled: memory a process keeps once idle.
sleep "$idle_after"
kill $sampler 2>/dev/null || true
echo "gateway request_total by status:"
curl -s http://127.0.0.1:19600/metrics | grep '^request_total{'
echo "gateway requests: $(sum 19600 'request_total{'), retries: $(sum 19600 'request_retry_total{'), resumed: $(sum 19600 'request_stream_continuation_total{')"
echo "scheduler decisions: $(sum 19601 'scheduler_scheduling_total')"
for port in 19610 19611; do sum "$port" 'vllm:request_success_total' >>"$out/engine-finished.txt"; done
echo "engines finished, read before each kill and at the end (those that ended between the last read and a kill are missing): $(awk '{s += $1} END {print s}' "$out/engine-finished.txt")"
cat "$out/restarts.txt"
echo "resident memory (s, MiB):"
awk 'NR == 1 || NR % 30 == 0' "$out/rss.txt"
tail -1 "$out/rss.txt"
