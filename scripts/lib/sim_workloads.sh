# Shared by the scripts that run `switchyard sim` on the suite's workloads by short name:
# `workload_flags NAME` prints the --workload flags of ac, ax (Azure code and conversation), mc,
# ms (Mooncake conversation and synthetic), sp (shared-prefix), ag (agentic), mt (multi-turn)
# and lc (long-context), the traces read from $traces.
# Source it from the repository root: `. scripts/lib/sim_workloads.sh`.
workload_flags() {
    case $1 in
    ac) echo "--workload azure:$traces/azure2023/AzureLLMInferenceTrace_code.csv" ;;
    ax) echo "--workload azure:$traces/azure2023/AzureLLMInferenceTrace_conv.csv" ;;
    mc) echo "--workload mooncake:$traces/mooncake/conversation_trace.jsonl" ;;
    ms) echo "--workload mooncake:$traces/mooncake/synthetic_trace.jsonl" ;;
    sp) echo "--workload shared-prefix --groups 600" ;;
    ag) echo "--workload agentic --conversations 430" ;;
    mt) echo "--workload multi-turn --conversations 600" ;;
    lc) echo "--workload long-context" ;;
    *) echo "unknown workload $1" >&2; return 1 ;;
    esac
}
