//! `switchyard`: the one binary. Each subcommand is a thin entry into its crate.

mod reference;
mod serve;

use clap::{CommandFactory, Parser, Subcommand};

/// mimalloc: a router allocates and frees small buffers on every request, across threads, and
/// glibc's allocator spent about 15% of the gateway's CPU on it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "switchyard",
    version,
    about = "One OpenAI-compatible endpoint in front of many LLM engine replicas"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run engines, scheduler and gateway in one process: one OpenAI endpoint in front of them.
    Serve(Box<serve::ServeArgs>),
    /// Run engine instances (OpenAI server + continuous batching + KV cache + backend).
    Engine {
        /// Where the instances listen.
        #[command(flatten)]
        listen: switchyard_engine::config::ListenArgs,
        /// What they run.
        #[command(flatten)]
        engine: switchyard_engine::config::EngineArgs,
    },
    /// Open-loop load against an OpenAI-compatible endpoint from a trace or a generator, with
    /// client-side latency percentiles, goodput and plots.
    Bench(switchyard_bench::live::BenchArgs),
    /// The whole cluster under a virtual clock (real scheduler and engine cores, simulated step
    /// times): replay a trace in seconds, compare placement policies, plan capacity.
    Sim(switchyard_bench::sim::SimArgs),
    /// Run a backend directly on token ids: a prompt's logits, greedy tokens, step throughput.
    Forward(switchyard_engine::forward_check::ForwardArgs),
    /// Compile every CUDA kernel to PTX (no GPU needed) and report the first error or warning.
    CudaKernels {
        /// `compute_XY` architectures, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "80,90")]
        arch: Vec<u32>,
    },
    /// Run the gateway alone, in front of a scheduler.
    Gateway(switchyard_gateway::launcher::GatewayArgs),
    /// Run the scheduler alone, over a list of engine instances.
    Scheduler(switchyard_scheduler::launcher::SchedulerArgs),
    /// Print the configuration reference (docs/configuration.md) from these definitions.
    #[command(hide = true)]
    Reference,
}

/// Transparent huge pages off for this process (mimalloc is also built not to ask for them):
/// with them, the kernel's khugepaged turns every 2 MiB of the allocator's arena that still holds
/// a few KiB in use into a whole resident huge page, and a long-running gateway's resident memory
/// rose by half, for minutes at a time, about twenty minutes into a steady soak.
#[cfg(target_os = "linux")]
fn disable_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and changes only this process's
    // memory policy.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

fn main() -> anyhow::Result<()> {
    #[cfg(target_os = "linux")]
    disable_transparent_huge_pages();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Serve(args) => {
            tracing::info!("switchyard serve starting with {args:?}");
            runtime.block_on(serve::run(*args))
        }
        Command::Engine { listen, engine } => {
            tracing::info!("switchyard engine starting with {listen:?} {engine:?}");
            runtime.block_on(switchyard_engine::launcher::run(listen, engine))
        }
        Command::Bench(args) => runtime.block_on(switchyard_bench::live::run_bench(args)),
        Command::Sim(args) if args.suite.suite => switchyard_bench::suite::run_suite(&args),
        Command::Sim(args) => switchyard_bench::sim::run_sim(args),
        Command::Forward(args) => switchyard_engine::forward_check::run(args),
        Command::CudaKernels { arch } => {
            let sizes = switchyard_engine::backend::cuda::compile_kernels_to_ptx(&arch)
                .map_err(anyhow::Error::msg)?;
            for (file, bytes) in sizes {
                println!("{file}: {bytes} bytes of PTX");
            }
            Ok(())
        }
        Command::Gateway(args) => {
            tracing::info!("switchyard gateway starting with {args:?}");
            runtime.block_on(switchyard_gateway::launcher::run(
                args,
                switchyard_engine::launcher::shutdown_signal(),
            ))
        }
        Command::Reference => {
            print!("{}", reference::configuration_reference(&Cli::command()));
            Ok(())
        }
        Command::Scheduler(args) => {
            tracing::info!("switchyard scheduler starting with {args:?}");
            runtime.block_on(switchyard_scheduler::launcher::run(
                args,
                switchyard_engine::launcher::shutdown_signal(),
            ))
        }
    }
}
