//! switchyard-protocol: every type that crosses a wire between switchyard's parts and its
//! clients, and the block hasher they all share.
//!
//! - [`openai`]: the OpenAI-compatible API (with the vLLM extensions a router needs).
//! - [`anthropic`]: Anthropic's Messages API, as far as a router reads it.
//! - [`hashing`]: chained XXH3-64 block hashes, identical in engines, scheduler and gateway.
//! - [`engine_state`]: the status snapshots an engine pushes to the scheduler.
//! - [`kv_events`]: the prefix-cache events an engine pushes to the scheduler's index.
//! - [`schedule`]: the schedule API between gateway and scheduler.
//! - [`secret`]: API keys, compared in constant time and never printed.
//! - [`clock`]: the Unix-time clock the processes share.
//! - [`vllm_kv_events`]: what the publisher and subscriber of vLLM's KV-event format share.
//! - [`model_description`]: what an engine tells a gateway about the model it serves.
//! - [`migration`]: moving a running request between engines, and following it.
//! - [`sglang`]: SGLang's native `/generate` API, read as the completion it amounts to.

pub mod anthropic;
pub mod clock;
pub mod engine_state;
pub mod hashing;
pub mod kv_events;
pub mod migration;
pub mod model_description;
pub mod openai;
pub mod schedule;
pub mod secret;
pub mod sglang;
pub mod tpot_so_far;
pub mod vllm_kv_events;

/// The request header that asks a switchyard engine for the ids of the generated tokens in a
/// stream: each event then carries them in an SSE comment line, `: token_ids 1,2,3`, which SSE
/// clients ignore and switchyard's gateway reads (to resume a broken stream elsewhere) and drops.
pub const TOKEN_IDS_HEADER: &str = "x-switchyard-token-ids";

/// The request header, on a request that continues another engine's answer (it moved, or that
/// engine broke), that counts the prompt's last tokens which that engine generated but whose text
/// was never sent: they end in an unfinished UTF-8 character. The engine sends their text with
/// the first text it makes, as the first engine would have.
pub const UNSENT_TOKENS_HEADER: &str = "x-switchyard-unsent-tokens";
