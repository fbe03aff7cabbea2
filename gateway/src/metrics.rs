//! The gateway's Prometheus families, in Llumnix's names (no prefix). The `model` label only takes
//! configured model names (the pool's and the route config's), or `""` for requests naming none,
//! so clients cannot grow it.

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    Opts, Registry, TextEncoder,
};
use rustc_hash::FxHashMap;
use std::sync::RwLock;
use std::time::Instant;

const SEC: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0,
];
const STAGE_MS: &[f64] = &[0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0];
const QUEUE_MS: &[f64] = &[
    1.0, 5.0, 10.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
];
const TTFT_MS: &[f64] = &[
    10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0, 30000.0,
    60000.0,
];
const TOKEN_MS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0,
];
const PERCENT: &[f64] = &[
    0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0,
];
const COUNT: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0,
    65536.0, 131072.0,
];

fn plain_histogram(reg: &Registry, name: &str, help: &str) -> prometheus::Result<Histogram> {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(PERCENT.to_vec()))?;
    reg.register(Box::new(h.clone()))?;
    Ok(h)
}

/// Every family the gateway exports.
pub struct GatewayMetrics {
    registry: Registry,
    started: Instant,
    requests: IntCounterVec,
    retries: IntCounterVec,
    input_tokens_total: IntCounterVec,
    input_tokens: HistogramVec,
    output_tokens_total: IntCounterVec,
    output_tokens: HistogramVec,
    ttft: HistogramVec,
    itl: HistogramVec,
    tpot: HistogramVec,
    e2e: HistogramVec,
    prefix_hit: Histogram,
    max_prefix_hit: Histogram,
    preprocess: HistogramVec,
    schedule: HistogramVec,
    queue: HistogramVec,
    postprocess: HistogramVec,
    fallbacks: IntCounterVec,
    fallback_after_429: IntCounterVec,
    continuations: IntCounterVec,
    mirrors: IntCounterVec,
    route_reloads: IntCounterVec,
    /// Requests being served.
    pub current: IntGauge,
    pending: IntGauge,
    rejected: IntCounterVec,
    breakers: prometheus::IntGaugeVec,
    uptime: Gauge,
    /// Each model's series, found by label once rather than on every observation.
    series: RwLock<FxHashMap<String, ModelSeries>>,
}

/// One model's per-request series (the children of the families labelled by `model` alone).
struct ModelSeries {
    input_tokens_total: IntCounter,
    input_tokens: Histogram,
    output_tokens_total: IntCounter,
    output_tokens: Histogram,
    ttft: Histogram,
    itl: Histogram,
    tpot: Histogram,
    e2e: Histogram,
    preprocess: Histogram,
    schedule: Histogram,
    queue: Histogram,
    postprocess: Histogram,
    /// `request_total` with status 200.
    succeeded: IntCounter,
}

impl GatewayMetrics {
    /// Registers every family (and the process collector).
    pub fn new() -> prometheus::Result<Self> {
        let reg = Registry::new();
        #[cfg(target_os = "linux")]
        reg.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> prometheus::Result<IntCounterVec> {
                let c = IntCounterVec::new(Opts::new(name, help), labels)?;
                reg.register(Box::new(c.clone()))?;
                Ok(c)
            };
        let histogram =
            |name: &str, help: &str, buckets: &[f64]| -> prometheus::Result<HistogramVec> {
                let h = HistogramVec::new(
                    HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                    &["model"],
                )?;
                reg.register(Box::new(h.clone()))?;
                Ok(h)
            };
        let gauge = |name: &str, help: &str| -> prometheus::Result<IntGauge> {
            let g = IntGauge::new(name, help)?;
            reg.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let pending = gauge("gateway_pending_requests", "Requests queued for admission.")?;
        let breakers = prometheus::IntGaugeVec::new(
            Opts::new(
                "gateway_circuit_breaker_state",
                "Circuit breaker of an instance: 1 open, 2 half-open (closed ones are absent).",
            ),
            &["instance_id"],
        )?;
        reg.register(Box::new(breakers.clone()))?;
        let rejected = counter(
            "request_rejected_total",
            "Requests refused by admission, by reason.",
            &["reason"],
        )?;
        let uptime = Gauge::new("uptime_seconds", "Seconds since the gateway started.")?;
        reg.register(Box::new(uptime.clone()))?;
        Ok(GatewayMetrics {
            requests: counter(
                "request_total",
                "Finished requests by HTTP status.",
                &["model", "status_code"],
            )?,
            retries: counter(
                "request_retry_total",
                "Retries on another instance, by cause.",
                &["model", "status_code"],
            )?,
            input_tokens_total: counter(
                "request_input_tokens_total",
                "Prompt tokens of requests.",
                &["model"],
            )?,
            input_tokens: histogram("request_input_tokens", "Prompt tokens per request.", COUNT)?,
            output_tokens_total: counter(
                "request_output_tokens_total",
                "Generated tokens of requests.",
                &["model"],
            )?,
            output_tokens: histogram(
                "request_output_tokens",
                "Generated tokens per request.",
                COUNT,
            )?,
            ttft: histogram(
                "request_ttft_milliseconds",
                "Arrival to first generated token, in ms.",
                TTFT_MS,
            )?,
            itl: histogram(
                "request_itl_milliseconds",
                "Gaps between streamed tokens, in ms.",
                TOKEN_MS,
            )?,
            tpot: histogram(
                "request_tpot_milliseconds",
                "Time per output token after the first, in ms.",
                TOKEN_MS,
            )?,
            prefix_hit: plain_histogram(
                &reg,
                "request_prefix_cache_hit_percent",
                "Cached share of the prompt on the chosen instance.",
            )?,
            max_prefix_hit: plain_histogram(
                &reg,
                "request_max_prefix_cache_hit_percent",
                "Best cached share of the prompt over all instances.",
            )?,
            e2e: histogram(
                "request_e2e_latency_seconds",
                "Arrival to last byte, in seconds.",
                SEC,
            )?,
            preprocess: histogram(
                "request_preprocess_duration_milliseconds",
                "Parse, template, tokenize and hash, in ms.",
                STAGE_MS,
            )?,
            schedule: histogram(
                "request_schedule_duration_milliseconds",
                "Scheduling, retries included, in ms.",
                STAGE_MS,
            )?,
            queue: histogram(
                "request_queue_duration_milliseconds",
                "Wait in the admission queue, in ms.",
                QUEUE_MS,
            )?,
            postprocess: histogram(
                "request_postprocess_duration_milliseconds",
                "Relay work of a request (reading, rewriting and framing its chunks), in ms.",
                STAGE_MS,
            )?,
            fallbacks: counter(
                "request_fallback_total",
                "Attempts on a route's fallback chain, by outcome (success, HTTP status).",
                &["model", "status_code"],
            )?,
            fallback_after_429: counter(
                "request_fallback_retry_success_total",
                "Fallbacks that succeeded after the previous target answered 429.",
                &["model"],
            )?,
            continuations: counter(
                "request_stream_continuation_total",
                "Streams continued on another instance: broken ones resumed (resumed) or not (failed), moved ones followed (migrated).",
                &["model", "outcome"],
            )?,
            mirrors: counter(
                "gateway_mirror_requests_total",
                "Mirrored copies of requests, by outcome (success, failure, dropped).",
                &["model", "outcome"],
            )?,
            route_reloads: counter(
                "gateway_route_config_reloads_total",
                "Reloads of the route config, by result (success, error).",
                &["result"],
            )?,
            current: gauge("gateway_current_requests", "Requests in flight.")?,
            pending,
            rejected,
            breakers,
            uptime,
            started: Instant::now(),
            registry: reg,
            series: RwLock::default(),
        })
    }

    /// Runs `observe` on `model`'s series, creating them the first time.
    fn with_series<T>(&self, model: &str, observe: impl FnOnce(&ModelSeries) -> T) -> T {
        if let Some(series) = self
            .series
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(model)
        {
            return observe(series);
        }
        let mut all = self.series.write().unwrap_or_else(|e| e.into_inner());
        let series = all.entry(model.to_string()).or_insert_with(|| {
            let one = [model];
            ModelSeries {
                input_tokens_total: self.input_tokens_total.with_label_values(&one),
                input_tokens: self.input_tokens.with_label_values(&one),
                output_tokens_total: self.output_tokens_total.with_label_values(&one),
                output_tokens: self.output_tokens.with_label_values(&one),
                ttft: self.ttft.with_label_values(&one),
                itl: self.itl.with_label_values(&one),
                tpot: self.tpot.with_label_values(&one),
                e2e: self.e2e.with_label_values(&one),
                preprocess: self.preprocess.with_label_values(&one),
                schedule: self.schedule.with_label_values(&one),
                queue: self.queue.with_label_values(&one),
                postprocess: self.postprocess.with_label_values(&one),
                succeeded: self.requests.with_label_values(&[model, "200"]),
            }
        });
        observe(series)
    }

    /// A request for `model` with `prompt_tokens`, preprocessed in `preprocess_ms`.
    pub fn on_prepared(&self, model: &str, prompt_tokens: u32, preprocess_ms: f64) {
        self.with_series(model, |s| {
            s.input_tokens_total.inc_by(prompt_tokens as u64);
            s.input_tokens.observe(prompt_tokens as f64);
            s.preprocess.observe(preprocess_ms);
        });
    }

    /// A placement expecting `cached` of `prompt` tokens cached, where the best instance had `best`.
    pub fn on_placed(&self, prompt: u32, cached: u32, best: u32) {
        if prompt > 0 {
            self.prefix_hit
                .observe(100.0 * cached as f64 / prompt as f64);
            self.max_prefix_hit
                .observe(100.0 * best as f64 / prompt as f64);
        }
    }

    /// Scheduling (retries included) took `ms`.
    pub fn on_scheduled(&self, model: &str, ms: f64) {
        self.with_series(model, |s| s.schedule.observe(ms));
    }

    /// A retry after `cause` (an HTTP status, or `network_error`).
    pub fn on_retry(&self, model: &str, cause: &str) {
        self.retries.with_label_values(&[model, cause]).inc();
    }

    /// A request waited `ms` for admission.
    pub fn on_queued(&self, model: &str, ms: f64) {
        self.with_series(model, |s| s.queue.observe(ms));
    }

    /// A request's relay work took `ms` in all.
    pub fn on_postprocessed(&self, model: &str, ms: f64) {
        self.with_series(model, |s| s.postprocess.observe(ms));
    }

    /// An attempt on the fallback chain ended with `outcome`.
    pub fn on_fallback(&self, model: &str, outcome: &str) {
        self.fallbacks.with_label_values(&[model, outcome]).inc();
    }

    /// A fallback succeeded after a 429.
    pub fn on_fallback_after_429(&self, model: &str) {
        self.fallback_after_429.with_label_values(&[model]).inc();
    }

    /// A broken stream was resumed (`resumed`) or ended with an error (`failed`), or a moved
    /// request was followed to its new engine (`migrated`).
    pub fn on_continuation(&self, model: &str, outcome: &str) {
        self.continuations
            .with_label_values(&[model, outcome])
            .inc();
    }

    /// A mirrored copy ended with `outcome`.
    pub fn on_mirror(&self, model: &str, outcome: &str) {
        self.mirrors.with_label_values(&[model, outcome]).inc();
    }

    /// The route config was reloaded (`ok`) or refused.
    pub fn on_route_reload(&self, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.route_reloads.with_label_values(&[result]).inc();
    }

    /// The histogram of gaps (ms) between streamed tokens of `model`, looked up once per
    /// answer rather than once per token.
    pub fn token_gaps(&self, model: &str) -> prometheus::Histogram {
        self.with_series(model, |s| s.itl.clone())
    }

    /// An answer with `tokens` generated tokens, the first after `ttft_ms`, the rest over
    /// `decode_ms`.
    pub fn on_tokens(&self, model: &str, tokens: u64, ttft_ms: f64, decode_ms: f64) {
        self.with_series(model, |s| {
            s.output_tokens_total.inc_by(tokens);
            s.output_tokens.observe(tokens as f64);
            s.ttft.observe(ttft_ms);
            if tokens > 1 {
                s.tpot.observe(decode_ms / (tokens - 1) as f64);
            }
        });
    }

    /// A request ended with `status` after `seconds`.
    pub fn on_finished(&self, model: &str, status: u16, seconds: f64) {
        self.with_series(model, |s| {
            if status == 200 {
                s.succeeded.inc();
            } else {
                self.requests
                    .with_label_values(&[model, itoa::Buffer::new().format(status)])
                    .inc();
            }
            s.e2e.observe(seconds);
        });
    }

    /// Admission refused a request for `reason`.
    pub fn on_rejected(&self, reason: &str) {
        self.rejected.with_label_values(&[reason]).inc();
    }

    /// The breakers that are not closed now.
    pub fn set_breakers(&self, states: &[(String, crate::shared::BreakerState)]) {
        self.breakers.reset();
        for (instance, state) in states {
            self.breakers
                .with_label_values(&[instance.as_str()])
                .set(*state as i64);
        }
    }

    /// Requests waiting for admission now.
    pub fn set_pending(&self, waiting: usize) {
        self.pending.set(waiting as i64);
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        self.uptime.set(self.started.elapsed().as_secs_f64());
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            return format!("# encoding failed: {e}\n");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}
