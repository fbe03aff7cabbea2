//! The scheduler's Prometheus families, in Llumnix's names.

use crate::cms::InstanceMeta;
use crate::predictor::PredictionErrors;
use crate::scheduler::{InstanceView, Placement, ScheduleError};
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    Opts, Registry, TextEncoder,
};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use switchyard_protocol::schedule::InferStage;

/// Stage-duration buckets (milliseconds).
const STAGE_MS: &[f64] = &[0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0];
/// Ratio buckets.
const RATIO: &[f64] = &[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];
/// Batch-size buckets.
const BATCH: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];
/// Token-count buckets.
const COUNT: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0,
    65536.0, 131072.0,
];
/// TTFT buckets (milliseconds).
const TTFT_MS: &[f64] = &[
    10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0, 30000.0,
    60000.0,
];
/// Per-token buckets (milliseconds).
const TOKEN_MS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0,
];

/// Prediction-error buckets: (predicted - actual) / actual, -1 to +1 in steps of 0.1, then
/// -5, -2, +2 and +5.
const ERROR_RATIO: &[f64] = &[
    -5.0, -2.0, -1.0, -0.9, -0.8, -0.7, -0.6, -0.5, -0.4, -0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3,
    0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 2.0, 5.0,
];

/// The `selected_instance_*` series of one stage.
struct SelectedSeries {
    kv_usage: Histogram,
    decode_batch: Histogram,
    prefills: Histogram,
    decodes: Histogram,
    ttft: Histogram,
    tpot: Histogram,
}

/// How a gauge reads its value from an instance's view.
type Reading = fn(&InstanceView) -> f64;

/// Every family the scheduler exports.
pub struct SchedulerMetrics {
    registry: Registry,
    scheduling: IntCounter,
    failed: IntCounterVec,
    sessions: IntCounterVec,
    tracked: IntGauge,
    reclaimed: IntCounter,
    stored_responses: IntGauge,
    forgotten_responses: IntCounter,
    scrape_errors: IntCounterVec,
    kv_event_resyncs: IntCounterVec,
    duration: Histogram,
    query_prefix: Histogram,
    calc_prefix: Histogram,
    refresh_metadata: Histogram,
    refresh_status: Histogram,
    prediction_error: [Histogram; 2],
    kv_usage: HistogramVec,
    decode_batch: HistogramVec,
    prefills: HistogramVec,
    decodes: HistogramVec,
    ttft: HistogramVec,
    tpot: HistogramVec,
    /// The six families above, resolved for each stage the first time it is placed.
    selected: [OnceLock<SelectedSeries>; 3],
    cms: Vec<(GaugeVec, Reading)>,
    lrs: Vec<(GaugeVec, Reading)>,
    /// The `infer_type` each instance's gauges were last set under (under adaptive PD it
    /// follows the instance's leaning), so that a change drops the series of the old one.
    roles: Mutex<HashMap<String, InferStage>>,
}

fn histogram(
    reg: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
) -> prometheus::Result<Histogram> {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))?;
    reg.register(Box::new(h.clone()))?;
    Ok(h)
}

fn by_stage(
    reg: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
) -> prometheus::Result<HistogramVec> {
    let h = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        &["infer_type"],
    )?;
    reg.register(Box::new(h.clone()))?;
    Ok(h)
}

fn gauge(reg: &Registry, name: &str, labels: &[&str]) -> prometheus::Result<GaugeVec> {
    let g = GaugeVec::new(Opts::new(name, name.replace('_', " ")), labels)?;
    reg.register(Box::new(g.clone()))?;
    Ok(g)
}

impl SchedulerMetrics {
    /// Registers every family; `process_metrics` adds the process collector (left out when
    /// another part of the same process exports it).
    pub fn new(process_metrics: bool) -> prometheus::Result<Self> {
        let reg = Registry::new();
        #[cfg(target_os = "linux")]
        if process_metrics {
            reg.register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))?;
        }
        let scheduling =
            IntCounter::new("scheduler_scheduling_total", "Scheduling decisions made.")?;
        reg.register(Box::new(scheduling.clone()))?;
        let tracked = IntGauge::new(
            "scheduler_tracked_requests",
            "Requests placed and not yet released by their gateway.",
        )?;
        reg.register(Box::new(tracked.clone()))?;
        let stored_responses = IntGauge::new(
            "scheduler_stored_responses",
            "Stored responses (/v1/responses on vLLM or SGLang) whose instance the scheduler remembers.",
        )?;
        reg.register(Box::new(stored_responses.clone()))?;
        let forgotten_responses = IntCounter::new(
            "scheduler_stored_responses_forgotten_total",
            "Stored responses whose instance was forgotten to stay within --remembered-responses.",
        )?;
        reg.register(Box::new(forgotten_responses.clone()))?;
        let reclaimed = IntCounter::new(
            "scheduler_reclaimed_requests_total",
            "Placed requests released because their gateway went silent.",
        )?;
        reg.register(Box::new(reclaimed.clone()))?;
        let scrape_errors = IntCounterVec::new(
            Opts::new(
                "scheduler_scrape_errors_total",
                "Metric families of scraped engines' /metrics pages that could not be read and were skipped (the rest of the page counts), by instance and family.",
            ),
            &["instance", "family"],
        )?;
        reg.register(Box::new(scrape_errors.clone()))?;
        let kv_event_resyncs = IntCounterVec::new(
            Opts::new(
                "scheduler_kv_event_resyncs_total",
                "Times a vLLM/SGLang instance's KV events had to be caught up, by instance and reason: replayed (a gap filled from the publisher's replay socket), gap (a gap that could not be filled: its exact index entries cleared), publisher_restarted, subscribed.",
            ),
            &["instance", "reason"],
        )?;
        reg.register(Box::new(kv_event_resyncs.clone()))?;
        let failed = IntCounterVec::new(
            Opts::new(
                "scheduler_scheduling_failed_total",
                "Scheduling requests that found no instance.",
            ),
            &["error_type"],
        )?;
        let sessions = IntCounterVec::new(
            Opts::new(
                "scheduler_session_placements_total",
                "Placements of requests naming a session: on its instance (kept), elsewhere as it was over its load bound or gone (moved), or as any request (new).",
            ),
            &["outcome"],
        )?;
        reg.register(Box::new(sessions.clone()))?;
        reg.register(Box::new(failed.clone()))?;
        let cms_readings: Vec<(&str, Reading)> = vec![
            ("instance_cms_waiting_requests", |v| {
                v.status.as_ref().map_or(0.0, |s| s.num_waiting as f64)
            }),
            ("instance_cms_loading_requests", |v| {
                v.status.as_ref().map_or(0.0, |s| s.num_loading as f64)
            }),
            ("instance_cms_tokens_loading_requests", |v| {
                v.status
                    .as_ref()
                    .map_or(0.0, |s| s.loading_kv_tokens as f64)
            }),
            ("instance_cms_running_requests", |v| {
                v.status.as_ref().map_or(0.0, |s| s.num_running as f64)
            }),
            ("instance_cms_used_gpu_tokens", |v| {
                v.status.as_ref().map_or(0.0, |s| s.used_kv_tokens as f64)
            }),
            ("instance_cms_uncomputed_tokens_all_waiting_prefills", |v| {
                v.status
                    .as_ref()
                    .map_or(0.0, |s| s.waiting_prefill_tokens as f64)
            }),
            (
                "instance_cms_uncomputed_tokens_scheduler_running_prefills",
                |v| {
                    v.status
                        .as_ref()
                        .map_or(0.0, |s| s.running_prefill_tokens as f64)
                },
            ),
            ("instance_cms_scheduler_running_to_decode_tokens", |v| {
                v.status.as_ref().map_or(0.0, |s| s.decode_tokens as f64)
            }),
            ("instance_cms_scheduler_running_to_decode_requests", |v| {
                v.status.as_ref().map_or(0.0, |s| s.num_decoding as f64)
            }),
            // Requests waiting to decode here are the ones whose KV is still arriving (a
            // prefill/decode hand-off or a migration): switchyard admits a request to decode as
            // soon as its KV is in.
            ("instance_cms_scheduler_waiting_to_decode_requests", |v| {
                v.status.as_ref().map_or(0.0, |s| s.num_loading as f64)
            }),
            ("instance_cms_scheduler_waiting_to_decode_tokens", |v| {
                v.status
                    .as_ref()
                    .map_or(0.0, |s| s.loading_kv_tokens as f64)
            }),
            // Requests leaving for another instance to decode there: prefill/decode hand-offs
            // (and migrations) under way.
            (
                "instance_cms_hybrid_scheduler_waiting_to_decode_requests",
                |v| v.status.as_ref().map_or(0.0, |s| s.num_handing_over as f64),
            ),
            (
                "instance_cms_hybrid_scheduler_waiting_to_decode_tokens",
                |v| {
                    v.status
                        .as_ref()
                        .map_or(0.0, |s| s.handing_over_kv_tokens as f64)
                },
            ),
            // Of the tokens leaving for a decode instance, those whose KV is not there yet: what
            // that instance still has to take into blocks of its own.
            (
                "instance_cms_unallocated_tokens_hybrid_scheduler_waiting_decodes",
                |v| {
                    v.status
                        .as_ref()
                        .map_or(0.0, |s| s.handing_over_unsent_tokens as f64)
                },
            ),
            (
                "instance_cms_unallocated_tokens_scheduler_running_prefills",
                |v| {
                    v.status
                        .as_ref()
                        .map_or(0.0, |s| s.running_prefill_unallocated_tokens as f64)
                },
            ),
            ("instance_cms_inflight_dispatch_requests", |v| {
                v.in_flight.requests as f64
            }),
            ("instance_cms_inflight_dispatch_prefill_requests", |v| {
                v.in_flight.requests as f64
            }),
            ("instance_cms_inflight_dispatch_decode_requests", |_| 0.0),
            (
                "instance_cms_uncomputed_tokens_inflight_dispatch_prefill_requests",
                |v| v.in_flight.uncached_tokens as f64,
            ),
            (
                "instance_cms_tokens_inflight_dispatch_decode_requests",
                |_| 0.0,
            ),
            ("instance_cms_kv_cache_usage_ratio_projected", |v| {
                v.metrics.kv_usage_projected
            }),
            ("instance_cms_decode_batch_size", |v| v.metrics.decode_batch),
            ("instance_cms_all_prefills_tokens_num", |v| {
                v.metrics.all_prefill_tokens
            }),
            ("instance_cms_all_decodes_tokens_num", |v| {
                v.metrics.decode_tokens
            }),
        ];
        let lrs_readings: Vec<(&str, Reading)> = vec![
            ("instance_lrs_total_requests", |v| {
                v.in_flight.requests as f64
            }),
            ("instance_lrs_waiting_requests", |v| {
                v.in_flight.requests as f64
            }),
            ("instance_lrs_running_requests", |_| 0.0),
            ("instance_lrs_total_tokens", |v| {
                v.in_flight.prompt_tokens as f64
            }),
            ("instance_lrs_waiting_tokens", |v| {
                v.in_flight.prompt_tokens as f64
            }),
            ("instance_lrs_running_tokens", |_| 0.0),
        ];
        let cms = cms_readings
            .into_iter()
            .map(|(name, read)| Ok((gauge(&reg, name, &["instance_id", "infer_type"])?, read)))
            .collect::<prometheus::Result<Vec<_>>>()?;
        let lrs = lrs_readings
            .into_iter()
            .map(|(name, read)| {
                Ok((
                    gauge(&reg, name, &["model", "instance_id", "infer_type"])?,
                    read,
                ))
            })
            .collect::<prometheus::Result<Vec<_>>>()?;
        let prediction_error = HistogramVec::new(
            HistogramOpts::new(
                "scheduler_prediction_error_ratio",
                "How far the chosen instance's predicted TTFT and TPOT were from what the client \
                 saw: (predicted - actual) / actual.",
            )
            .buckets(ERROR_RATIO.to_vec()),
            &["kind"],
        )?;
        reg.register(Box::new(prediction_error.clone()))?;
        Ok(SchedulerMetrics {
            duration: histogram(
                &reg,
                "request_full_mode_schedule_duration_milliseconds",
                "Time to place one request.",
                STAGE_MS,
            )?,
            query_prefix: histogram(
                &reg,
                "request_query_prefix_cache_hit_duration_milliseconds",
                "Time to look a request's block hashes up in the prefix index.",
                STAGE_MS,
            )?,
            calc_prefix: histogram(
                &reg,
                "request_calc_prefix_cache_hit_duration_milliseconds",
                "Time to turn the prefix index's answer into each instance's cached blocks.",
                STAGE_MS,
            )?,
            refresh_metadata: histogram(
                &reg,
                "scheduler_cms_refresh_metadata_duration_milliseconds",
                "Time to add or update an instance's description in the CMS.",
                STAGE_MS,
            )?,
            refresh_status: histogram(
                &reg,
                "scheduler_cms_refresh_status_duration_milliseconds",
                "Time to take in an instance's status (CMS, LRS reconciliation, predictor).",
                STAGE_MS,
            )?,
            prediction_error: ["ttft", "tpot"].map(|k| prediction_error.with_label_values(&[k])),
            kv_usage: by_stage(
                &reg,
                "selected_instance_kv_cache_usage_ratio_projected",
                "Projected KV usage of the chosen instance.",
                RATIO,
            )?,
            decode_batch: by_stage(
                &reg,
                "selected_instance_decode_batch_size",
                "Decode batch of the chosen instance.",
                BATCH,
            )?,
            prefills: by_stage(
                &reg,
                "selected_instance_all_prefills_tokens_num",
                "Queued prefill tokens of the chosen instance.",
                COUNT,
            )?,
            decodes: by_stage(
                &reg,
                "selected_instance_all_decodes_tokens_num",
                "Decode context tokens of the chosen instance.",
                COUNT,
            )?,
            ttft: by_stage(
                &reg,
                "selected_instance_predicted_ttft",
                "Predicted TTFT on the chosen instance, ms.",
                TTFT_MS,
            )?,
            tpot: by_stage(
                &reg,
                "selected_instance_predicted_tpot",
                "Predicted TPOT on the chosen instance, ms.",
                TOKEN_MS,
            )?,
            selected: Default::default(),
            scheduling,
            failed,
            sessions,
            tracked,
            reclaimed,
            stored_responses,
            forgotten_responses,
            scrape_errors,
            kv_event_resyncs,
            cms,
            lrs,
            roles: Mutex::default(),
            registry: reg,
        })
    }

    /// The `selected_instance_*` series of `stage`.
    fn selected(&self, stage: InferStage) -> &SelectedSeries {
        self.selected[stage as usize].get_or_init(|| {
            let s = [stage.as_str()];
            SelectedSeries {
                kv_usage: self.kv_usage.with_label_values(&s),
                decode_batch: self.decode_batch.with_label_values(&s),
                prefills: self.prefills.with_label_values(&s),
                decodes: self.decodes.with_label_values(&s),
                ttft: self.ttft.with_label_values(&s),
                tpot: self.tpot.with_label_values(&s),
            }
        })
    }

    /// Records one scheduling decision.
    pub fn on_schedule(
        &self,
        stage: InferStage,
        result: &Result<Placement, ScheduleError>,
        elapsed_ms: f64,
    ) {
        self.duration.observe(elapsed_ms);
        match result {
            Ok(p) => {
                self.scheduling.inc();
                if let Some(outcome) = p.session {
                    self.sessions.with_label_values(&[outcome.label()]).inc();
                }
                let series = self.selected(stage);
                series.kv_usage.observe(p.metrics.kv_usage_projected);
                series.decode_batch.observe(p.metrics.decode_batch);
                series.prefills.observe(p.metrics.all_prefill_tokens);
                series.decodes.observe(p.metrics.decode_tokens);
                series.ttft.observe(p.metrics.predicted_ttft * 1000.0);
                series.tpot.observe(p.metrics.predicted_tpot * 1000.0);
            }
            Err(e) => self.failed.with_label_values(&[e.label()]).inc(),
        }
    }

    /// Records the time of a decision's prefix lookup and of computing each instance's hits.
    pub fn on_prefix_stages(&self, query_ms: f64, calc_ms: f64) {
        self.query_prefix.observe(query_ms);
        self.calc_prefix.observe(calc_ms);
    }

    /// Records the time to refresh an instance's description.
    pub fn on_refresh_metadata(&self, elapsed_ms: f64) {
        self.refresh_metadata.observe(elapsed_ms);
    }

    /// Records the time to take in an instance's status.
    pub fn on_refresh_status(&self, elapsed_ms: f64) {
        self.refresh_status.observe(elapsed_ms);
    }

    /// Records how far a finished request's predictions were from what its client saw.
    pub fn on_prediction_errors(&self, errors: &PredictionErrors) {
        for (histogram, error) in self.prediction_error.iter().zip([errors.ttft, errors.tpot]) {
            if let Some(e) = error {
                histogram.observe(e);
            }
        }
    }

    /// Counts the families of instance `id`'s latest page that could not be read.
    pub fn on_scrape_skipped(&self, id: &str, families: &[crate::scrape::SkippedFamily]) {
        for skipped in families {
            self.scrape_errors
                .with_label_values(&[id, skipped.family.as_str()])
                .inc();
        }
    }

    /// Counts a catch-up of instance `id`'s KV events for `reason`.
    pub fn on_kv_event_resync(&self, id: &str, reason: &str) {
        self.kv_event_resyncs.with_label_values(&[id, reason]).inc();
    }

    /// Sets how many stored responses' instances are remembered, and counts `forgotten` ones.
    pub fn on_stored_responses(&self, remembered: usize, forgotten: usize) {
        self.stored_responses.set(remembered as i64);
        self.forgotten_responses.inc_by(forgotten as u64);
    }

    /// Sets how many placed requests are tracked, and counts those reclaimed from silent gateways.
    pub fn on_tracking(&self, tracked: usize, reclaimed: usize) {
        self.tracked.set(tracked as i64);
        self.reclaimed.inc_by(reclaimed as u64);
    }

    /// Sets an instance's CMS and LRS gauges to its state now, under the role it plays now.
    pub fn on_instance(&self, view: &InstanceView) {
        // Every status refresh comes here: the instance's name is copied only the first time.
        let was = {
            let mut roles = self.roles.lock().unwrap_or_else(|p| p.into_inner());
            match roles.get_mut(&view.meta.id) {
                Some(role) => Some(std::mem::replace(role, view.role)),
                None => roles.insert(view.meta.id.clone(), view.role),
            }
        };
        if let Some(was) = was.filter(|&was| was != view.role) {
            self.remove_gauges(&view.meta, was);
        }
        let role = view.role.as_str();
        for (gauge, read) in &self.cms {
            gauge
                .with_label_values(&[view.meta.id.as_str(), role])
                .set(read(view));
        }
        for (gauge, read) in &self.lrs {
            gauge
                .with_label_values(&[view.meta.model.as_str(), view.meta.id.as_str(), role])
                .set(read(view));
        }
    }

    /// Drops a removed instance's gauges.
    pub fn forget_instance(&self, meta: &InstanceMeta) {
        let last = self
            .roles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&meta.id);
        self.remove_gauges(meta, last.unwrap_or(meta.role));
    }

    /// Drops an instance's gauges set under `role`.
    fn remove_gauges(&self, meta: &InstanceMeta, role: InferStage) {
        let (id, role, model) = (meta.id.as_str(), role.as_str(), meta.model.as_str());
        // A gauge never set for this instance has nothing to remove.
        for (gauge, _) in &self.cms {
            let _ = gauge.remove_label_values(&[id, role]);
        }
        for (gauge, _) in &self.lrs {
            let _ = gauge.remove_label_values(&[model, id, role]);
        }
    }

    /// The registry, for families other parts register beside these.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            return format!("# encoding failed: {e}\n");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cms::EngineKind;
    use crate::scheduler::{Scheduler, SchedulerConfig};
    use switchyard_protocol::engine_state::EngineStatus;

    #[test]
    fn an_instance_whose_role_changes_keeps_only_the_series_of_its_role_now() {
        let metrics = SchedulerMetrics::new(false).expect("registers");
        let mut s = Scheduler::new(SchedulerConfig::default(), 1);
        let meta = InstanceMeta {
            id: "i0".into(),
            endpoint: "http://i0".into(),
            model: "m".into(),
            role: InferStage::Neutral,
            kind: EngineKind::Switchyard,
        };
        s.add_instance(meta.clone());
        s.on_status("i0", EngineStatus::default(), 0.0);
        let mut view = s.instances_view(0.0).remove(0);
        let count = |text: &str, role: &str| {
            text.lines()
                .filter(|l| l.contains(&format!("infer_type=\"{role}\"")))
                .count()
        };
        metrics.on_instance(&view);
        assert!(count(&metrics.render(), "neutral") > 0);
        // It leans prefill now (adaptive PD): its gauges move to that label.
        view.role = InferStage::Prefill;
        metrics.on_instance(&view);
        let text = metrics.render();
        assert_eq!(count(&text, "neutral"), 0, "{text}");
        assert!(count(&text, "prefill") > 0);
        // Removed: nothing of it is left.
        metrics.forget_instance(&meta);
        let text = metrics.render();
        assert_eq!(
            count(&text, "prefill") + count(&text, "neutral"),
            0,
            "{text}"
        );
    }
}
