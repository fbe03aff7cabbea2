#!/usr/bin/env bash
# The rescheduler (live migration) on against off in `switchyard sim`, as BENCHMARKS.md's "live
# migration in `sim`" row quotes it: 16 simulated H100s serving Llama-3.1-8B, the predictive
# policy, SLOs TTFT 1 s / TPOT 50 ms, 60 s of requests at each workload's saturation in the
# policy suite.
#
#   scripts/rescheduling_sim.sh [WORKLOAD:RATE ...]   (default: mc:14 lc:75.02 ac:38 ax:280)
#
# WORKLOAD: a short name of scripts/lib/sim_workloads.sh (ac, ax, mc, ms, sp, ag, mt, lc).
# Settings (environment): TRACES (../shared/traces), BIN (target/release/switchyard, built if
# missing). Prints one markdown row per workload: P99 TPOT, P99 E2E and goodput with the
# rescheduler on and off, and how many times lower the tails are with it on (the issue's goal:
# 1.3x lower on three workloads, none worse by more than 2%).
set -euo pipefail
cd "$(dirname "$0")/.."
traces=${TRACES:-../shared/traces}
bin=${BIN:-target/release/switchyard}
[ -x "$bin" ] || cargo build --release -p switchyard
[ $# -ge 1 ] || set -- mc:14 lc:75.02 ac:38 ax:280
. scripts/lib/sim_workloads.sh

# Prints "P99_TPOT_MS P99_E2E_S GOODPUT" of one run.
run() {
    local workload=$1 rate=$2 flags requests
    flags=$(workload_flags "$workload")
    requests=$(awk -v r="$rate" 'BEGIN {printf "%d", 60 * r}')
    # shellcheck disable=SC2086 # the workload's flags split into words on purpose
    "$bin" sim --instances 16 --sim-model llama-3.1-8b --policy predictive \
        --slo-ttft 1000 --slo-tpot 50 $flags --rate "$rate" --num-requests "$requests" "${@:3}" \
        2>/dev/null | awk -F'|' '/^\| predictive/ {
            split($10, tpot, "/"); split($12, e2e, "/"); gsub(/ /, "", $8);
            printf "%.1f %.2f %s\n", tpot[2], e2e[2], $8; exit }'
}

echo "| workload | rate (req/s) | P99 TPOT on / off (ms) | P99 E2E on / off (s) | goodput on / off | tails lower with it on (TPOT, E2E) |"
echo "|---|---|---|---|---|---|"
for point in "$@"; do
    IFS=: read -r workload rate <<<"$point"
    read -r tpot_on e2e_on good_on <<<"$(run "$workload" "$rate")"
    read -r tpot_off e2e_off good_off <<<"$(run "$workload" "$rate" --no-rescheduling)"
    ratios=$(awk -v a="$tpot_off" -v b="$tpot_on" -v c="$e2e_off" -v d="$e2e_on" \
        'BEGIN {printf "%.2fx, %.2fx", a / b, c / d}')
    echo "| $workload | $rate | $tpot_on / $tpot_off | $e2e_on / $e2e_off | $good_on / $good_off | $ratios |"
done
