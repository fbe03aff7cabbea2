#!/usr/bin/env bash
# switchyard serve (simulated engines unless you pass other engine flags) and a Prometheus that
# scrapes it, for trying the dashboards on a laptop. Needs `prometheus` on PATH (Debian:
# apt install prometheus). Grafana: add a Prometheus data source at http://localhost:9090, then
# Dashboards > New > Import each file of dashboards/ and pick that data source.
#
#   deploy/local/run.sh                      # sim engines, vLLM, FastDeploy and MindIE names
#   deploy/local/run.sh --backend cpu        # the built-in model on the CPU
set -euo pipefail
cd "$(dirname "$0")/../.."
data=$(mktemp -d)
trap 'kill 0; rm -rf "$data"' EXIT
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
    args=(--backend sim --metrics-dialect vllm,fastdeploy,mindie)
fi
cargo run --release -- serve --port 8000 --engines 2 --engine-port 8100 "${args[@]}" &
prometheus --config.file=deploy/local/prometheus.yml --storage.tsdb.path="$data" \
    --web.listen-address=localhost:9090 &
echo "switchyard: http://localhost:8000/v1   Prometheus: http://localhost:9090"
wait
