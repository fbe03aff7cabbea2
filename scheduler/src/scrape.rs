//! Engine state from a Prometheus `/metrics` page, for engines without a state stream (vLLM,
//! SGLang, FastDeploy, MindIE). What those metrics tell is filled in: request counts and KV
//! usage, and, between two scrapes, a decode step sample: the mean inter-token latency over the
//! interval at the running batch size. Prefill queues stay empty. `# TYPE` lines are optional in
//! the text format; families without one are read as untyped. A page is read family by family
//! ([`parse_families`]): a family the parser cannot take (MindIE's TTFT histogram without
//! `_sum`, a family cut off mid-page) is skipped and reported, and the rest of the page counts.

use crate::cms::EngineKind;
use openmetrics_parser::prometheus::parse_prometheus;
use openmetrics_parser::{MetricsExposition, PrometheusType, PrometheusValue};
use std::borrow::Cow;
use std::collections::HashSet;
use switchyard_protocol::engine_state::{EngineStatus, StepSample};

type Exposition = MetricsExposition<PrometheusType, PrometheusValue>;

/// Suffixes of the samples of a histogram or summary family after its name.
const SAMPLE_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

/// The family names a page declares with `# TYPE` lines.
fn declared_names(text: &str) -> HashSet<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_whitespace().next())
        .collect()
}

/// The metric name of a sample line.
fn sample_name(line: &str) -> &str {
    line.split(|c: char| c == '{' || c.is_whitespace())
        .next()
        .unwrap_or_default()
}

/// The declared family a sample named `name` belongs to: the name itself, or a histogram's or
/// summary's base name less the sample's suffix.
fn declared_family<'a>(name: &'a str, declared: &HashSet<&str>) -> Option<&'a str> {
    if declared.contains(name) {
        return Some(name);
    }
    SAMPLE_SUFFIXES
        .iter()
        .find_map(|s| name.strip_suffix(s).filter(|base| declared.contains(base)))
}

/// `text` with a `# TYPE NAME untyped` line before the first sample of each family that has no
/// `# TYPE` line: the parser starts a family only at a `# TYPE` line, and exporters may leave
/// them out.
fn with_type_lines(text: &str) -> Cow<'_, str> {
    let mut declared = declared_names(text);
    let mut out = String::new();
    let mut added = false;
    for line in text.lines() {
        let sample = !line.starts_with('#') && !line.trim().is_empty();
        let name = sample_name(line);
        if sample && declared_family(name, &declared).is_none() {
            out.push_str("# TYPE ");
            out.push_str(name);
            out.push_str(" untyped\n");
            declared.insert(name);
            added = true;
        }
        out.push_str(line);
        out.push('\n');
    }
    if added {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

/// A family of a page that could not be read, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedFamily {
    /// The family's name.
    pub family: String,
    /// What the parser said.
    pub error: String,
}

/// The family a line of a page belongs to: the name a `# HELP` or `# TYPE` line declares, or a
/// sample's declared family (every sample has one once [`with_type_lines`] ran).
fn family_of<'a>(line: &'a str, declared: &HashSet<&str>) -> Option<&'a str> {
    if let Some(rest) = line
        .strip_prefix("# TYPE ")
        .or_else(|| line.strip_prefix("# HELP "))
    {
        return rest.split_whitespace().next();
    }
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let name = sample_name(line);
    Some(declared_family(name, declared).unwrap_or(name))
}

/// Parses a page family by family, as Prometheus' own scraper tolerates pages: a family that
/// cannot be read (a histogram without `_sum`, a cut-off family) is skipped and reported, never
/// the whole page; a page without a final newline is read as if it had one.
pub fn parse_families(text: &str) -> (Exposition, Vec<SkippedFamily>) {
    let text = with_type_lines(text);
    let declared = declared_names(&text);
    let mut blocks: Vec<(&str, String)> = Vec::new();
    for line in text.lines() {
        let Some(family) = family_of(line, &declared) else {
            continue;
        };
        match blocks.last_mut() {
            Some((name, block)) if *name == family => {
                block.push_str(line);
                block.push('\n');
            }
            _ => blocks.push((family, format!("{line}\n"))),
        }
    }
    let mut exp = Exposition {
        families: Default::default(),
    };
    let mut skipped = Vec::new();
    for (family, block) in blocks {
        match parse_prometheus(&block) {
            Ok(parsed) => exp.families.extend(parsed.families),
            Err(e) => skipped.push(SkippedFamily {
                family: family.to_string(),
                error: format!("{e:?}"),
            }),
        }
    }
    (exp, skipped)
}

/// The sum of a gauge's (or counter's) samples, if the family exists.
fn value(exp: &Exposition, name: &str) -> Option<f64> {
    let family = exp.families.get(name)?;
    let mut total = None;
    for sample in family.iter_samples() {
        let v = match &sample.value {
            PrometheusValue::Gauge(n) | PrometheusValue::Unknown(n) => n.as_f64(),
            PrometheusValue::Counter(c) => c.value.as_f64(),
            _ => continue,
        };
        *total.get_or_insert(0.0) += v;
    }
    total
}

/// The summed `(sum, count)` of a histogram family, if it exists.
fn histogram_totals(exp: &Exposition, name: &str) -> Option<(f64, f64)> {
    let family = exp.families.get(name)?;
    let mut totals = None;
    for sample in family.iter_samples() {
        if let PrometheusValue::Histogram(h) = &sample.value {
            let (sum, count) = totals.get_or_insert((0.0, 0.0));
            *sum += h.sum.as_ref().map_or(0.0, |s| s.as_f64());
            *count += h.count.unwrap_or(0) as f64;
        }
    }
    totals
}

/// The inter-token latency histogram of each engine kind.
fn itl_histogram(kind: EngineKind) -> &'static [&'static str] {
    match kind {
        EngineKind::Vllm => &[
            "vllm:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds",
        ],
        EngineKind::Sglang => &[
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
        ],
        EngineKind::FastDeploy => &["fastdeploy:time_per_output_token_seconds"],
        EngineKind::MindIe => &["time_per_output_token_seconds"],
        EngineKind::Switchyard => &[],
    }
}

/// What a scrape source remembers between scrapes to turn counters into step samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScrapeMemory {
    itl: Option<(f64, f64)>,
    /// The families the latest scrape could not read.
    pub skipped: Vec<SkippedFamily>,
}

/// A label of the first sample of a family (info metrics).
fn label(exp: &Exposition, name: &str, key: &str) -> Option<String> {
    let family = exp.families.get(name)?;
    let sample = family.iter_samples().next()?;
    let labels = sample.get_labelset().ok()?;
    labels.get_label_value(key).map(String::from)
}

/// Reads an engine's status from its metrics text; `block_size` is used where the engine does
/// not say its own. `memory` carries the previous scrape's inter-token latency totals: when
/// tokens were generated since, the status gets one decode step sample.
pub fn status_from_metrics(
    kind: EngineKind,
    text: &str,
    block_size: u32,
    memory: &mut ScrapeMemory,
) -> Result<EngineStatus, String> {
    let (exp, skipped) = parse_families(text);
    memory.skipped = skipped;
    let need = |name: &str| value(&exp, name).ok_or_else(|| format!("{name} is missing"));
    let mut status = EngineStatus {
        block_size,
        ..Default::default()
    };
    // (running, waiting, swapped, usage 0-1, total KV tokens if known)
    let (running, waiting, swapped, usage, total) = match kind {
        EngineKind::Vllm => {
            let bs = label(&exp, "vllm:cache_config_info", "block_size")
                .and_then(|b| b.parse::<u32>().ok());
            let blocks = label(&exp, "vllm:cache_config_info", "num_gpu_blocks")
                .and_then(|b| b.parse::<u64>().ok());
            if let Some(bs) = bs {
                status.block_size = bs;
            }
            let usage = value(&exp, "vllm:kv_cache_usage_perc")
                .or_else(|| value(&exp, "vllm:gpu_cache_usage_perc"))
                .ok_or("vllm:kv_cache_usage_perc is missing")?;
            (
                need("vllm:num_requests_running")?,
                need("vllm:num_requests_waiting")?,
                0.0,
                usage,
                blocks.map(|b| b * status.block_size as u64),
            )
        }
        EngineKind::Sglang => {
            let used = value(&exp, "sglang:num_used_tokens");
            let usage = need("sglang:token_usage")?;
            let total = value(&exp, "sglang:max_total_num_tokens")
                .or_else(|| used.filter(|_| usage > 0.0).map(|u| u / usage))
                .map(|t| t.round() as u64);
            (
                need("sglang:num_running_reqs")?,
                need("sglang:num_queue_reqs")?,
                0.0,
                usage,
                total,
            )
        }
        EngineKind::FastDeploy => (
            need("fastdeploy:num_requests_running")?,
            need("fastdeploy:num_requests_waiting")?,
            0.0,
            need("fastdeploy:gpu_cache_usage_perc")?,
            value(&exp, "fastdeploy:max_gpu_block_num").map(|b| b as u64 * block_size as u64),
        ),
        EngineKind::MindIe => (
            need("num_requests_running")?,
            need("num_requests_waiting")?,
            value(&exp, "num_requests_swapped").unwrap_or(0.0),
            need("npu_cache_usage_perc")?,
            None,
        ),
        EngineKind::Switchyard => return Err("switchyard engines publish a state stream".into()),
    };
    let usage = usage.clamp(0.0, 1.0);
    status.num_running = running as u32;
    status.num_decoding = running as u32;
    status.num_waiting = waiting as u32;
    status.num_swapped = swapped as u32;
    status.kv_usage = Some(usage);
    // Where the page says no capacity, it stays unknown (0): no invented number of tokens.
    status.total_kv_tokens = total.unwrap_or(0);
    status.used_kv_tokens = (usage * status.total_kv_tokens as f64).round() as u64;
    let itl = itl_histogram(kind)
        .iter()
        .find_map(|name| histogram_totals(&exp, name));
    if let (Some((sum, count)), Some((prev_sum, prev_count))) = (itl, memory.itl) {
        let (d_sum, d_count) = (sum - prev_sum, count - prev_count);
        if d_count > 0.0 && d_sum > 0.0 && running > 0.0 {
            status.steps.push(StepSample {
                prefill_tokens: 0,
                decode_batch: running as u32,
                context_tokens: status.used_kv_tokens,
                prefill_attention: 0,
                step_seconds: d_sum / d_count,
            });
        }
    }
    memory.itl = itl;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_families_are_named() {
        let mut memory = ScrapeMemory::default();
        let err = status_from_metrics(EngineKind::Vllm, "# TYPE x gauge\nx 1\n", 16, &mut memory)
            .unwrap_err();
        assert!(err.contains("vllm:"), "{err}");
        assert!(status_from_metrics(EngineKind::MindIe, "not metrics {", 16, &mut memory).is_err());
    }

    #[test]
    fn families_without_type_lines_are_read_as_untyped() {
        let text = "vllm:num_requests_running{model_name=\"m\"} 3\n\
                    vllm:num_requests_waiting{model_name=\"m\"} 2\n\
                    # HELP vllm:kv_cache_usage_perc KV usage.\n\
                    vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n\
                    # TYPE vllm:request_success_total counter\n\
                    vllm:request_success_total{model_name=\"m\"} 7\n";
        let status =
            status_from_metrics(EngineKind::Vllm, text, 16, &mut ScrapeMemory::default()).unwrap();
        assert_eq!((status.num_running, status.num_waiting), (3, 2));
        assert_eq!(status.kv_usage, Some(0.25));
        assert_eq!(
            status.total_kv_tokens, 0,
            "no cache_config_info: capacity unknown"
        );
        let typed = "# TYPE x gauge\nx 1\n";
        assert!(matches!(with_type_lines(typed), Cow::Borrowed(_)));
    }
}
