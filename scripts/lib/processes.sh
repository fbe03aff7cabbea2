# Shared by the scripts that start switchyard processes: every pid pushed onto `pids` is
# killed when the script exits, and `wait_for URL` waits up to 30 s for URL to answer.
# Source it from the repository root: `. scripts/lib/processes.sh`.
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_for() {
    for _ in $(seq 1 300); do
        if curl -sf "$1" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    echo "$1 never answered" >&2
    return 1
}
