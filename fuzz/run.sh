#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each (default 600), one after another,
# starting from the committed seeds; new inputs go to fuzz/corpus/, crashes to fuzz/artifacts/.
# Needs the nightly toolchain and cargo-fuzz: `rustup toolchain install nightly`,
# `cargo install cargo-fuzz`. Usage: fuzz/run.sh [SECONDS] [TARGET ...]
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-600}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    echo "== $target for $seconds s"
    cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1
done
