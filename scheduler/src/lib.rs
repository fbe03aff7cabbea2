//! switchyard-scheduler: decides which engine instance takes each request.
//!
//! - [`cms`]: every instance's description and latest status.
//! - [`lrs`]: what this scheduler dispatched that engines have not reported yet.
//! - [`predictor`]: step-time fits and the TTFT / TPOT predictions built on them.
//! - [`pressure`]: each instance's recent share of time spent on prefill.
//! - [`score`]: the predictive policy's score: SLO misses and added latency of a placement.
//! - [`admission`]: with `--slo-admission`, which requests predicted to miss are refused.
//! - [`prefix_index`]: which instance holds which prefix block.
//! - [`policy`]: candidate metrics, filters and selectors.
//! - [`rescheduler`]: which instance hands a running request to which (live migration).
//! - [`adaptive_pd`]: which neutral instances lean prefill or decode under adaptive PD, and
//!   [`pd_split`]: when every prompt is handed over, with the decode side sized first.
//! - [`moving_sum`]: sums that fade with time, behind adaptive PD's rates.
//! - [`sessions`]: sticky sessions, each kept on its instance while that is within a load bound.
//! - [`scheduler`]: all of the above behind schedule / release / report.
//! - [`scrape`]: engine state from the `/metrics` pages of vLLM, SGLang, FastDeploy and MindIE.
//! - [`vllm_events`]: vLLM's and SGLang's KV events, read and turned into switchyard's hashes.
//! - [`service`]: the scheduler running: HTTP API, instance sources, metrics.
//!
//! Every function here takes the time as an argument and never reads a clock, so the same code
//! runs behind the HTTP service and under the cluster simulator's virtual clock.

pub mod adaptive_pd;
pub mod admission;
pub mod answer_length;
pub mod cms;
pub mod handoffs;
pub mod launcher;
pub mod lrs;
pub mod miss_share;
pub mod moving_sum;
pub mod pd_split;
pub mod policy;
pub mod predictor;
pub mod prefix_index;
pub mod pressure;
pub mod recent_median;
pub mod rescheduler;
pub mod scheduler;
pub mod score;
pub mod scrape;
pub mod service;
pub mod sessions;
pub mod step_fits;
pub mod vllm_events;

pub use scheduler::{Placement, ScheduleError, Scheduler, SchedulerConfig};
