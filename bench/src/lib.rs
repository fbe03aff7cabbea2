//! switchyard-bench: open-loop load against any OpenAI-compatible endpoint (switchyard or another
//! router), from public traces or generators, measured from the client's side.
//!
//! A [`workload`] is a list of timed requests: Mooncake and Azure traces, or Poisson and
//! gamma-bursty arrivals of plain, shared-prefix or multi-turn requests. The [`runner`] sends
//! each at its time whatever happens to the others (open loop), streams the answer and records
//! TTFT, inter-token gaps, end-to-end time, output tokens and errors; [`stats`] summarizes them
//! with percentiles, throughput and goodput under SLOs, and [`report`] writes JSON, a markdown
//! table and SVG plots ([`per_request`]: a line for every request). [`live`] is `switchyard bench`; [`workload_args`] holds the flags it
//! shares with the simulator; [`suite`] runs every placement policy on every workload of the
//! policy suite.

pub mod cluster;
pub mod live;
pub mod per_request;
pub mod report;
pub mod runner;
pub mod sim;
pub mod stats;
pub mod suite;
pub mod suite_args;
pub mod text;
pub mod workload;
pub mod workload_args;
