//! Timed requests: from public traces ([`mooncake`], [`azure`]) or generated ([`synthetic`],
//! [`agentic`], [`long_context`]).

pub mod agentic;
pub mod azure;
pub mod long_context;
pub mod mooncake;
pub mod synthetic;

use crate::text::Span;
use serde::Serialize;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: &'static str,
    /// The text.
    pub content: String,
}

/// What a request asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// `/v1/completions` with the text of these spans.
    Text(Vec<Span>),
    /// `/v1/chat/completions` with these messages.
    Chat(Vec<Message>),
}

/// One request of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRequest {
    /// Seconds after the start at which it is sent.
    pub at: f64,
    /// The prompt.
    pub prompt: Prompt,
    /// Prompt length in tokens, as the workload meant it.
    pub prompt_tokens: usize,
    /// Tokens to generate (sent as `max_tokens` with `ignore_eos`).
    pub max_tokens: u32,
    /// The conversation or session it belongs to, where the workload has them (sent as
    /// `prompt_cache_key` when the client names sessions).
    pub session: Option<u32>,
}

/// Scales arrival times so that the workload's mean rate becomes `rate` requests per second.
pub fn at_rate(requests: &mut [BenchRequest], rate: f64) {
    let span = requests.last().map_or(0.0, |r| r.at);
    if requests.len() < 2 || span <= 0.0 || rate <= 0.0 {
        return;
    }
    let factor = (requests.len() - 1) as f64 / rate / span;
    for r in requests.iter_mut() {
        r.at *= factor;
    }
}

/// The rate a workload offers: requests over the span of their arrivals (infinite when they
/// all arrive at once).
pub fn offered_rate(requests: &[BenchRequest]) -> f64 {
    let span = match (requests.first(), requests.last()) {
        (Some(a), Some(b)) => b.at - a.at,
        _ => 0.0,
    };
    if span > 0.0 {
        (requests.len() - 1) as f64 / span
    } else {
        f64::INFINITY
    }
}
