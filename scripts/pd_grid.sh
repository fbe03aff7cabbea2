#!/usr/bin/env bash
# Prefill/decode disaggregation in `switchyard sim`, one configuration against another, on the
# grid BENCHMARKS.md's PD rows quote: 16 simulated H100s serving Llama-3.1-8B, the predictive
# policy, SLOs TTFT 2 s / TPOT 25 ms, a 400 Gb/s KV link, the rescheduler on (as by default).
#
#   scripts/pd_grid.sh CONFIG...      e.g. scripts/pd_grid.sh colocated adaptive 9:7 14:2
#
# CONFIG: `colocated` (no --pd), `adaptive` (--pd adaptive) or `P:D` (a static split).
# Settings (environment): WORKLOADS (ac ax mc ms sp ag mt lc: Azure code and conversation,
# Mooncake conversation and synthetic, shared-prefix, agentic, multi-turn, long-context),
# TRACES (../shared/traces), BIN (target/release/switchyard, built if missing), JOBS (2 runs at
# once).
# Each workload runs at three points (two for Mooncake synthetic) around its saturation under
# these SLOs; the generated workloads at one rate and seeds 1-3; long-context at 55, 60 and 65
# req/s, each the mean of seeds 1-6 (2,000 requests a run: its goodput moves a few percent with
# the seed). Prints one markdown row per configuration and workload: the goodput (req/s inside
# both SLOs) at each point.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,17p "$0"; exit 2; }
traces=${TRACES:-../shared/traces}
bin=${BIN:-target/release/switchyard}
jobs=${JOBS:-2}
workloads=${WORKLOADS:-ac ax mc ms sp ag mt lc}
[ -x "$bin" ] || cargo build --release -p switchyard

. scripts/lib/sim_workloads.sh

# The grid points of a workload, each RATE:REQUESTS[:SEED].
points() {
    case $1 in
    ac) echo "34:1700 38:1900 42:2100" ;;
    ax) echo "180:5400 200:6000 220:6600" ;;
    mc) echo "10:1000 12:1000 14:1000" ;;
    ms) echo "2:1000 3:1000" ;;
    sp) echo "200:3000:1 200:3000:2 200:3000:3" ;;
    ag) echo "80:3000:1 80:3000:2 80:3000:3" ;;
    mt) echo "100:3000:1 100:3000:2 100:3000:3" ;;
    lc) for rate in 55 60 65; do for seed in 1 2 3 4 5 6; do printf '%s ' "$rate:2000:$seed"; done; done ;;
    esac
}

# One run: prints "RATE GOODPUT".
run() {
    local config=$1 workload=$2 point=$3 rate requests seed pd=() seed_flag=()
    IFS=: read -r rate requests seed <<<"$point"
    case $config in
    colocated) ;;
    *) pd=(--pd "$config") ;;
    esac
    [ -n "${seed:-}" ] && seed_flag=(--seed "$seed")
    # shellcheck disable=SC2046 # the workload's flags split into words on purpose
    "$bin" sim --instances 16 --sim-model llama-3.1-8b --policy predictive \
        --slo-ttft 2000 --slo-tpot 25 --kv-transfer-gbps 400 "${pd[@]}" \
        $(workload_flags "$workload") "${seed_flag[@]}" --rate "$rate" --num-requests "$requests" \
        2>/dev/null | awk -F'|' -v rate="$rate" '/^\| predictive/ {gsub(/ /, "", $8); print rate, $8; exit}'
}
export -f run workload_flags
export bin traces

echo "| configuration | workload | goodput at each point (req/s) |"
echo "|---|---|---|"
for config in "$@"; do
    for workload in $workloads; do
        # shellcheck disable=SC2016 # expanded by the inner shell
        results=$(points "$workload" | tr ' ' '\n' | grep . |
            xargs -P "$jobs" -I{} bash -c 'run "$0" "$1" "$2"' "$config" "$workload" {})
        # The mean over seeds at each rate, in rate order.
        row=$(echo "$results" | awk '{sum[$1] += $2; n[$1]++} END {for (r in sum) printf "%s %.2f\n", r, sum[r] / n[r]}' |
            sort -n | awk '{printf "%s%s at %s", (NR > 1 ? ", " : ""), $2, $1} END {print ""}')
        echo "| $config | $workload | $row |"
    done
done
