//! The flags of `switchyard sim --suite` (the placement policy suite, [`crate::suite`]), apart
//! from the suite so that `sim`'s flags can carry them without `sim` importing the suite.

use std::path::PathBuf;
use switchyard_http::flags::Positive;

/// The suite's own flags (the cluster's come from `switchyard sim`).
#[derive(Debug, Clone, clap::Args)]
pub struct SuiteArgs {
    /// Run the placement policy suite: every policy (or those of --policy) on every workload,
    /// each at its highest rate inside the SLOs and at shares of its saturation (SLOs from
    /// --slo-ttft and --slo-tpot, default 1000 and 50 ms).
    #[arg(long)]
    pub suite: bool,
    /// Folder of the public traces (`mooncake/*.jsonl`, `azure2023/*.csv`); a trace that is not
    /// there is skipped, with a note.
    #[arg(long, default_value = "../shared/traces")]
    pub suite_traces: PathBuf,
    /// Virtual seconds each run's arrivals span (a trace's first requests, or a generator's
    /// sessions, enough for that at the rate tried), so that a rate past saturation shows as a
    /// growing queue rather than as one burst that drains.
    #[arg(long, default_value = "60")]
    pub suite_seconds: Positive,
    /// Fewest requests of a run.
    #[arg(long, default_value_t = 1000)]
    pub suite_requests: usize,
    /// Only these workloads of the suite, by name, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub suite_only: Vec<String>,
    /// One more workload, as --workload names it (`mooncake:PATH`, `azure:PATH`, `agentic`, ...);
    /// repeatable. Its --workload flags (seed, sizes) apply.
    #[arg(long = "suite-add")]
    pub suite_add: Vec<String>,
}
