#!/usr/bin/env bash
# Instructions per request of `switchyard serve` (gateway, in-process scheduler and one sim
# engine), counted by valgrind's callgrind, for two or more binaries: a CPU-cost A/B that a
# shared, noisy machine cannot blur the way it blurs requests per second.
#
#   scripts/gateway_instructions_ab.sh [--engines-over-http] BINARY...
#
# Each binary serves 0 and then 2,000 short token-id completions (8 prompt ids, max_tokens 1)
# over one keep-alive connection; (instructions at 2,000 - instructions at 0) / 2,000 is what
# one request costs, start-up and shutdown cancelled out. Needs valgrind and python3.
set -euo pipefail
MODE=()
if [[ "${1:-}" == "--engines-over-http" ]]; then MODE=(--engines-over-http); shift; fi
N=2000
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/load.py" <<'PY'
import http.client, json, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
body = json.dumps({"model": "qwen3-0.6b", "prompt": list(range(1, 9)), "max_tokens": 1})
deadline = time.time() + 300
while True:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse(); r.read()
        if r.status == 200: break
    except OSError:
        pass
    if time.time() > deadline: sys.exit("serve did not come up")
    time.sleep(0.5)
for _ in range(n):
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse(); d = r.read()
    if r.status != 200: sys.exit(f"status {r.status}: {d[:200]!r}")
PY
count() { # BINARY REQUESTS -> total instructions
  local port=$((20000 + RANDOM % 20000))
  RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$WORK/cg" "$1" serve \
    --host 127.0.0.1 --port $port --engines 1 --engine-port $((port + 1)) --backend sim \
    --sim-time-scale 1000000 --max-model-len 8192 --num-kv-blocks 8192 --max-num-seqs 512 \
    "${MODE[@]}" >"$WORK/log" 2>&1 &
  local pid=$!
  python3 "$WORK/load.py" $port "$2" || { tail "$WORK/log"; kill $pid; exit 1; }
  kill -INT $pid; wait $pid || true
  awk '/^(summary|totals):/ {print $2; exit}' "$WORK/cg"
}
for bin in "$@"; do
  idle=$(count "$bin" 0); busy=$(count "$bin" $N)
  echo "$bin: $(( (busy - idle) / N )) instructions per request (${MODE[*]:-in process})"
done
