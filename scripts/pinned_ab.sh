#!/usr/bin/env bash
# A/B of what `switchyard serve`'s gateway adds to a short request, for two or more builds of the
# binary, beside nginx proxying the same engine. Every thread is pinned: `wrk -t1 -c1` on core 0;
# serve (gateway, scheduler, engine) and nginx on core 1, so what a proxy adds is the work on its
# path, not where the kernel woke it. The builds take turns, ROUNDS times (default 3); each turn
# starts a fresh serve and times, with wrk for SECONDS (default 2) each, the engine straight, the
# engine through nginx and the engine through serve's gateway. Prints one line a turn: the
# medians of what nginx and the gateway add at p50, in microseconds.
#
#   scripts/pinned_ab.sh BIN [BIN ...] [-- SERVE_FLAGS ...]
#   (needs nginx-light, wrk and util-linux's taskset; EXTRA serve flags, e.g. --engines-over-http)
set -euo pipefail
rounds=${ROUNDS:-3}
seconds=${SECONDS_PER_TARGET:-2}
bins=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do bins+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
extra=("$@")
[ ${#bins[@]} -gt 0 ] || { echo "usage: $0 BIN [BIN ...] [-- SERVE_FLAGS ...]" >&2; exit 2; }

dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
cat >"$dir/post.lua" <<'EOF'
wrk.method = "POST"
wrk.body = '{"model":"qwen3-0.6b","prompt":[1,2,3,4,5,6,7,8],"max_tokens":1}'
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  io.write(string.format("p50 %d\n", latency:percentile(50)))
end
EOF
gw=19400 engine=19500 nginx=19600
cat >"$dir/nginx.conf" <<EOF
worker_processes 1; master_process off; daemon off; pid $dir/nginx.pid; error_log $dir/error.log;
events { worker_connections 1024; }
http { access_log off; client_body_temp_path $dir; proxy_temp_path $dir;
  upstream engine { server 127.0.0.1:$engine; keepalive 64; }
  server { listen 127.0.0.1:$nginx; location / { proxy_pass http://engine;
    proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } } }
EOF
taskset -c 1 nginx -c "$dir/nginx.conf" -p "$dir" 2>/dev/null &
nginx_pid=$!

p50() { taskset -c 0 wrk -t1 -c1 -d"${seconds}s" -s "$dir/post.lua" "http://127.0.0.1:$1/v1/completions" | awk '/^p50/ {print $2}'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for round in $(seq "$rounds"); do
  for bin in "${bins[@]}"; do
    taskset -c 1 "$bin" serve --engines 1 --port "$gw" --engine-port "$engine" \
      --backend sim --sim-time-scale 1000000 --sim-model qwen3-0.6b --max-model-len 8192 \
      --num-kv-blocks 8192 --max-num-seqs 512 "${extra[@]}" >"$dir/serve.log" 2>&1 &
    serve_pid=$!
    for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$gw/health" && break; sleep 0.1; done
    p50 "$engine" >/dev/null; p50 "$nginx" >/dev/null; p50 "$gw" >/dev/null
    nginx_added=() gateway_added=()
    for _ in 1 2 3; do
      e=$(p50 "$engine"); n=$(p50 "$nginx"); g=$(p50 "$gw")
      nginx_added+=($((n - e))); gateway_added+=($((g - e)))
    done
    n=$(printf '%s\n' "${nginx_added[@]}" | median)
    g=$(printf '%s\n' "${gateway_added[@]}" | median)
    echo "round $round $(basename "$bin"): nginx adds $n us, gateway adds $g us ($(awk "BEGIN {printf \"%.2f\", $g / $n}")x)"
    kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
  done
done
kill "$nginx_pid" 2>/dev/null || true
