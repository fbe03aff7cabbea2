//! Watching a relayed answer pass by, without holding it back, to measure what the client sees:
//! time to first token, the gaps between tokens, time per output token and output tokens.

use crate::metrics::GatewayMetrics;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Instant;

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    delta: Option<ChunkDelta>,
}

#[derive(Deserialize)]
struct ChunkDelta {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct ChunkUsage {
    completion_tokens: u64,
}

impl Chunk {
    /// Whether the chunk carries generated text.
    fn has_text(&self) -> bool {
        self.choices.iter().any(|c| {
            c.text.as_deref().is_some_and(|t| !t.is_empty())
                || c.delta
                    .as_ref()
                    .and_then(|d| d.content.as_deref())
                    .is_some_and(|t| !t.is_empty())
        })
    }
}

/// Observes one relayed answer; records its token metrics when dropped.
pub struct RelayObserver {
    metrics: Arc<GatewayMetrics>,
    model: String,
    started: Instant,
    streaming: bool,
    pending: Vec<u8>,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    text_events: u64,
    reported_tokens: Option<u64>,
}

impl RelayObserver {
    /// Observes an answer for `model` to a request that arrived at `started`; `streaming` says
    /// whether the answer is server-sent events (else one JSON body).
    pub fn new(
        metrics: Arc<GatewayMetrics>,
        model: String,
        started: Instant,
        streaming: bool,
    ) -> Self {
        RelayObserver {
            metrics,
            model,
            started,
            streaming,
            pending: Vec::new(),
            first_token: None,
            last_token: None,
            text_events: 0,
            reported_tokens: None,
        }
    }

    /// Looks at the next piece of the answer.
    pub fn observe(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        if !self.streaming {
            return;
        }
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.pending.drain(..end + 2).collect();
            for line in event.split(|&b| b == b'\n') {
                if let Some(data) = line.strip_prefix(b"data: ") {
                    self.on_event(data);
                }
            }
        }
    }

    fn on_event(&mut self, data: &[u8]) {
        let Ok(chunk) = serde_json::from_slice::<Chunk>(data) else {
            return;
        };
        if let Some(usage) = &chunk.usage {
            self.reported_tokens = Some(usage.completion_tokens);
        }
        if chunk.has_text() {
            let now = Instant::now();
            match self.last_token {
                None => self.first_token = Some(now),
                Some(last) => self
                    .metrics
                    .on_token_gap(&self.model, (now - last).as_secs_f64() * 1000.0),
            }
            self.last_token = Some(now);
            self.text_events += 1;
        }
    }
}

impl Drop for RelayObserver {
    fn drop(&mut self) {
        let end = Instant::now();
        let tokens = if self.streaming {
            self.reported_tokens.unwrap_or(self.text_events)
        } else {
            match serde_json::from_slice::<Chunk>(&self.pending) {
                Ok(body) => {
                    self.first_token = Some(end);
                    body.usage.map_or(0, |u| u.completion_tokens)
                }
                Err(_) => 0,
            }
        };
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
    fn counts_tokens_of_a_stream_split_anywhere() {
        let metrics = Arc::new(GatewayMetrics::new().unwrap());
        let stream = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" b\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" c\"}}]}\n\n",
            "data: [DONE]\n\n"
        );
        {
            let mut observer =
                RelayObserver::new(metrics.clone(), "m".into(), Instant::now(), true);
            for piece in stream.as_bytes().chunks(7) {
                observer.observe(piece);
            }
        }
        assert_eq!(
            value(&metrics, "request_output_tokens_total{model=\"m\"}"),
            3.0
        );
        assert_eq!(
            value(&metrics, "request_ttft_milliseconds_count{model=\"m\"}"),
            1.0
        );
        assert_eq!(
            value(&metrics, "request_itl_milliseconds_count{model=\"m\"}"),
            2.0
        );
        assert_eq!(
            value(&metrics, "request_tpot_milliseconds_count{model=\"m\"}"),
            1.0
        );
    }

    #[test]
    fn reads_usage_of_a_whole_body() {
        let metrics = Arc::new(GatewayMetrics::new().unwrap());
        {
            let mut observer =
                RelayObserver::new(metrics.clone(), "m".into(), Instant::now(), false);
            observer.observe(
                br#"{"choices":[{"index":0,"text":"hi there"}],"usage":{"prompt_tokens":3,"#,
            );
            observer.observe(br#""completion_tokens":5,"total_tokens":8}}"#);
        }
        assert_eq!(
            value(&metrics, "request_output_tokens_total{model=\"m\"}"),
            5.0
        );
        assert_eq!(
            value(&metrics, "request_output_tokens_count{model=\"m\"}"),
            1.0
        );
    }
}
