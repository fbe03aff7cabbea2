//! Watching a relayed answer pass by, without holding it back, to measure what the client sees:
//! time to first token, the gaps between tokens, time per output token and output tokens.

use crate::metrics::GatewayMetrics;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Instant;

/// What the gateway reads of one streamed chunk (completions or chat).
#[derive(Debug, Default, Deserialize)]
pub struct ChunkView {
    /// The choices' news.
    #[serde(default)]
    pub choices: Vec<ChoiceView>,
    /// Usage, on the last chunk (or every chunk with continuous usage stats).
    #[serde(default)]
    pub usage: Option<UsageView>,
}

/// One choice's news in a chunk.
#[derive(Debug, Default, Deserialize)]
pub struct ChoiceView {
    /// The choice's index.
    #[serde(default)]
    pub index: u32,
    /// New text (completions).
    #[serde(default)]
    pub text: Option<String>,
    /// New message content (chat).
    #[serde(default)]
    pub delta: Option<DeltaView>,
    /// Set when the choice ended.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// A chat delta's content.
#[derive(Debug, Default, Deserialize)]
pub struct DeltaView {
    /// New content.
    #[serde(default)]
    pub content: Option<String>,
}

/// Token counts of a chunk's usage.
#[derive(Debug, Default, Deserialize)]
pub struct UsageView {
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Generated tokens.
    #[serde(default)]
    pub completion_tokens: u64,
}

impl ChunkView {
    /// Reads a chunk's JSON; `None` if it is not a chunk.
    pub fn parse(data: &[u8]) -> Option<ChunkView> {
        serde_json::from_slice(data).ok()
    }

    /// Whether the chunk carries generated text.
    pub fn has_text(&self) -> bool {
        self.choices.iter().any(|c| !c.new_text().is_empty())
    }

    /// Whether this is the usage-only last chunk of `include_usage`.
    pub fn is_usage_only(&self) -> bool {
        self.choices.is_empty() && self.usage.is_some()
    }
}

impl ChoiceView {
    /// The new text of the choice, in either layout.
    pub fn new_text(&self) -> &str {
        self.text
            .as_deref()
            .or_else(|| self.delta.as_ref().and_then(|d| d.content.as_deref()))
            .unwrap_or_default()
    }
}

/// Observes one relayed answer; records its token metrics when dropped.
pub struct RelayObserver {
    metrics: Arc<GatewayMetrics>,
    token_gaps: prometheus::Histogram,
    model: String,
    started: Instant,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    text_events: u64,
    reported_tokens: Option<u64>,
}

impl RelayObserver {
    /// Observes the answer for `model` to a request that arrived at `started`.
    pub fn new(metrics: Arc<GatewayMetrics>, model: String, started: Instant) -> Self {
        RelayObserver {
            token_gaps: metrics.token_gaps(&model),
            metrics,
            model,
            started,
            first_token: None,
            last_token: None,
            text_events: 0,
            reported_tokens: None,
        }
    }

    /// Looks at the next chunk of the answer, arrived at `now`.
    pub fn observe(&mut self, chunk: &ChunkView, now: Instant) {
        if let Some(usage) = &chunk.usage {
            self.reported_tokens = Some(usage.completion_tokens);
        }
        if chunk.has_text() {
            match self.last_token {
                None => self.first_token = Some(now),
                Some(last) => self.token_gaps.observe((now - last).as_secs_f64() * 1000.0),
            }
            self.last_token = Some(now);
            self.text_events += 1;
        }
    }
}

impl Drop for RelayObserver {
    fn drop(&mut self) {
        let end = Instant::now();
        let tokens = self.reported_tokens.unwrap_or(self.text_events);
        let Some(first) = self.first_token else {
            return;
        };
        let ttft_ms = (first - self.started).as_secs_f64() * 1000.0;
        let decode_ms = (end - first).as_secs_f64() * 1000.0;
        self.metrics
            .on_tokens(&self.model, tokens, ttft_ms, decode_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(metrics: &GatewayMetrics, series: &str) -> f64 {
        metrics
            .render()
            .lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    }

    #[test]
    fn counts_tokens_gaps_and_usage() {
        let metrics = Arc::new(GatewayMetrics::new().unwrap());
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":" a"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":" b"}}]}"#,
            r#"{"choices":[{"index":0,"text":" c","finish_reason":"length"}]}"#,
        ];
        {
            let mut observer = RelayObserver::new(metrics.clone(), "m".into(), Instant::now());
            for c in chunks {
                observer.observe(&ChunkView::parse(c.as_bytes()).unwrap(), Instant::now());
            }
        }
        assert_eq!(
            value(&metrics, "request_output_tokens_total{model=\"m\"}"),
            3.0
        );
        assert_eq!(
            value(&metrics, "request_itl_milliseconds_count{model=\"m\"}"),
            2.0
        );
        {
            let mut observer = RelayObserver::new(metrics.clone(), "m".into(), Instant::now());
            observer.observe(
                &ChunkView::parse(chunks[1].as_bytes()).unwrap(),
                Instant::now(),
            );
            let usage = ChunkView::parse(
                br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}"#,
            )
            .unwrap();
            assert!(usage.is_usage_only());
            observer.observe(&usage, Instant::now());
        }
        assert_eq!(
            value(&metrics, "request_output_tokens_total{model=\"m\"}"),
            8.0,
            "the reported usage wins over counted events"
        );
        assert_eq!(
            value(&metrics, "request_ttft_milliseconds_count{model=\"m\"}"),
            2.0
        );
    }
}
