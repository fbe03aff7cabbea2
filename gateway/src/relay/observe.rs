//! Watching a relayed answer pass by, without holding it back, to measure what the client sees:
//! time to first token, the gaps between tokens, time per output token and output tokens.

use crate::metrics::GatewayMetrics;
use crate::relay::chunk::ChunkView;
use std::sync::Arc;
use std::time::Instant;
use switchyard_protocol::schedule::Observed;

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
        let tokens = chunk.usage.as_ref().map(|u| u.completion_tokens);
        self.observe_news(chunk.has_text(), tokens, now);
    }

    /// Notes an event of the answer, arrived at `now`: whether it carries generated text, and
    /// the answer's output tokens so far, where it says.
    pub fn observe_news(&mut self, text: bool, tokens: Option<u64>, now: Instant) {
        if tokens.is_some() {
            self.reported_tokens = tokens;
        }
        if text {
            match self.last_token {
                None => self.first_token = Some(now),
                Some(last) => self.token_gaps.observe((now - last).as_secs_f64() * 1000.0),
            }
            self.last_token = Some(now);
            self.text_events += 1;
        }
    }

    /// What the client saw of the answer, as it ends at `end`.
    pub fn observed(&self, end: Instant) -> Observed {
        let tokens = self.reported_tokens.unwrap_or(self.text_events);
        let Some(first) = self.first_token else {
            return Observed::default();
        };
        Observed {
            ttft_ms: Some((first - self.started).as_secs_f64() * 1000.0),
            tpot_ms: (tokens > 1)
                .then(|| (end - first).as_secs_f64() * 1000.0 / (tokens - 1) as f64),
            hand_off: None,
            output_tokens: u32::try_from(tokens).ok(),
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
    use std::time::Duration;

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

    fn chunk(json: &str) -> ChunkView {
        ChunkView::parse(json.as_bytes()).expect("a chunk")
    }

    #[test]
    fn what_the_client_saw_counts_the_answers_tokens_by_its_usage_else_its_text_events() {
        let metrics = Arc::new(GatewayMetrics::new().unwrap());
        let start = Instant::now();
        let text = r#"{"choices":[{"index":0,"text":"hi"}]}"#;
        let mut observer = RelayObserver::new(metrics.clone(), "m".into(), start);
        assert_eq!(
            observer.observed(start),
            Observed::default(),
            "no token yet"
        );
        for i in 1..=3 {
            observer.observe(&chunk(text), start + Duration::from_millis(10 * i));
        }
        let seen = observer.observed(start + Duration::from_millis(30));
        assert_eq!(seen.output_tokens, Some(3));
        assert!((seen.ttft_ms.unwrap() - 10.0).abs() < 1e-6);
        assert!((seen.tpot_ms.unwrap() - 10.0).abs() < 1e-6);
        observer.observe(
            &chunk(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}"#),
            start + Duration::from_millis(31),
        );
        assert_eq!(
            observer
                .observed(start + Duration::from_millis(31))
                .output_tokens,
            Some(4),
            "the engine's count wins"
        );
    }
}
