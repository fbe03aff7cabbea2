#!/usr/bin/env bash
# Overload: open-loop load at twice the cluster's capacity for a minute against `switchyard
# serve` with admission limits, then the same light load as before it. Prints bench's table for
# each phase (done / sent, errors by kind, TTFT and E2E of the admitted requests), how fast the
# refusals came back during the overload, and the process's resident memory in each phase.
#
#   scripts/overload.sh [OUT_DIR]
#
# Settings (environment): ENGINES (2), CAPACITY (requests/s the cluster serves; measured first
# when unset), OVERLOAD_SECONDS (60), SIM_TIME_SCALE (1).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/overload}
engines=${ENGINES:-2}
seconds=${OVERLOAD_SECONDS:-60}
mkdir -p "$out"
cargo build --release -q
bin=target/release/switchyard
port=19800
base="http://127.0.0.1:$port"
"$bin" serve --backend sim --sim-time-scale "${SIM_TIME_SCALE:-1}" --engines "$engines" \
    --port "$port" --engine-port 19810 --max-concurrent-requests 64 --queue-size 64 \
    --queue-timeout 2 >"$out/serve.log" 2>&1 &
serve=$!
trap 'kill $serve 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
    curl -sf "$base/health" >/dev/null 2>&1 && break
    sleep 0.1
done
rss() { awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$serve/status"; }
workload=(--workload plain --input-len 256 --output-len 64)
phase() { # NAME RATE SECONDS
    local n
    n=$(python3 -c "print(max(1, int($2 * $3)))")
    echo "== $1: $2 req/s for $3 s ($n requests), resident memory before: $(rss) MiB"
    "$bin" bench --url "$base" "${workload[@]}" --rate "$2" --num-requests "$n" \
        --request-timeout 60 --out "$out/$1" 2>/dev/null
    echo "resident memory after $1: $(rss) MiB"
}
capacity=${CAPACITY:-}
if [ -z "$capacity" ]; then
    phase capacity 400 15
    capacity=$(python3 -c "import json; r = json.load(open('$out/capacity/result.json'))['results'][0]; print(round(r['summary']['request_throughput'], 1))")
fi
half=$(python3 -c "print($capacity / 2)")
double=$(python3 -c "print($capacity * 2)")
echo "capacity: $capacity req/s"
phase before "$half" 30
(
    sleep 20
    for _ in $(seq 1 50); do
        curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -H 'content-type: application/json' \
            -d '{"prompt": "probe", "max_tokens": 64}' "$base/v1/completions"
    done >"$out/probes.txt"
) &
probes=$!
peak=0
(
    while kill -0 $serve 2>/dev/null; do rss; sleep 1; done >"$out/rss.txt"
) &
sampler=$!
phase overload "$double" "$seconds"
wait $probes
kill $sampler 2>/dev/null || true
peak=$(sort -n "$out/rss.txt" | tail -1)
echo "peak resident memory during the overload: $peak MiB"
python3 - "$out/probes.txt" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for code, t in rows:
    by.setdefault(code, []).append(float(t))
for code, ts in sorted(by.items()):
    ts.sort()
    p = lambda q: ts[min(len(ts) - 1, int(q * len(ts)))]
    print(f"probes during the overload: {len(ts)} answered {code}, p50 {p(0.5) * 1000:.0f} ms, max {ts[-1] * 1000:.0f} ms")
PY
phase after "$half" 30
