#!/usr/bin/env bash
# How many instructions one request costs `switchyard serve` in user space, through its gateway
# and calling its engine directly, counted by valgrind's callgrind (apt install valgrind). Unlike
# timings on this shared 2-core machine, the counts repeat within a few thousand, so a change of
# a few microseconds of work shows. One short non-streamed token-id request at a time over a
# keep-alive connection; counting starts after a warm-up. Leaves the callgrind profiles in
# OUT_DIR for `callgrind_annotate --inclusive=yes`.
#
#   scripts/gateway_instructions.sh [OUT_DIR]     (REQUESTS, default 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/gateway-instructions}
requests=${REQUESTS:-1000}
mkdir -p "$out"
cargo build --release -p switchyard
body='{"model":"qwen3-0.6b","prompt":[1,2,3,4,5,6,7,8],"max_tokens":1}'

# Sends N requests to PORT one after another over one connection.
send() {
  python3 - "$1" "$2" "$body" <<'EOF'
import http.client, sys
port, n, body = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
c = http.client.HTTPConnection("127.0.0.1", port)
for _ in range(n):
    c.request("POST", "/v1/completions", body, {"content-type": "application/json"})
    r = c.getresponse(); r.read(); assert r.status == 200
EOF
}

count() {
  local name=$1 port=$2
  rm -f "$out/$name.out"*
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/$name.out" \
    target/release/switchyard serve --engines 1 --port 19000 --engine-port 19100 \
    --backend sim --sim-time-scale 1000000 --sim-model qwen3-0.6b \
    --max-model-len 8192 --num-kv-blocks 8192 --max-num-seqs 512 >"$out/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 120); do curl -sf -o /dev/null http://127.0.0.1:19000/health && break; sleep 1; done
  send "$port" 50
  callgrind_control -i on "$pid" >/dev/null 2>&1
  send "$port" "$requests"
  callgrind_control -i off "$pid" >/dev/null 2>&1
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  local total
  total=$(callgrind_annotate "$out/$name.out".1 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  echo "$name: $((total / requests)) instructions per request"
}

count engine 19100
count gateway 19000
