//! A bench's results: JSON for machines, a markdown table for BENCHMARKS.md, SVG plots (latency
//! CDFs per rate; TTFT and goodput against the request rate).

use crate::cluster::MigrationTally;
use crate::stats::{Outcome, Slo, Summary};
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;
use serde::Serialize;
use std::path::Path;

/// One measured point of a sweep.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// What was measured (the workload for `bench`, the policy for `sim`).
    pub label: String,
    /// Offered requests per second (the workload's mean rate).
    pub rate: f64,
    /// Summary of the run.
    pub summary: Summary,
    /// Share of prompt tokens the engines served from their prefix caches during the run, if
    /// their metrics were given.
    pub prefix_cache_hit_rate: Option<f64>,
    /// What one prefix cache of unlimited size, shared by every instance, would have hit (known
    /// to `sim`, which sees every prompt).
    pub unlimited_prefix_cache_hit_rate: Option<f64>,
    /// What the simulator's live migrations and prefill/decode hand-offs came to: moves made
    /// by reason, moves given up by why, KV tokens copied, rescheduling rounds (`sim` runs
    /// that reschedule or hand off; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moves: Option<MigrationTally>,
    /// Per-request times, for the CDFs (ms TTFT, s end-to-end), not serialized.
    #[serde(skip)]
    pub outcomes: Vec<Outcome>,
}

/// The markdown table of a sweep.
pub fn markdown(label: &str, results: &[RunResult]) -> String {
    let mut out = format!(
        "| {label} | rate (req/s) | done / sent | errors | req/s | out tok/s | goodput | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | ITL p99 (ms) | E2E p50 / p99 (s) | prefix hit |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for r in results {
        let s = &r.summary;
        let errors: Vec<String> = s.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "| {} | {:.2} | {} / {} | {} | {:.2} | {:.0} | {:.2} | {:.0} / {:.0} | {:.1} / {:.1} | {:.1} | {:.2} / {:.2} | {} |\n",
            r.label,
            r.rate,
            s.completed,
            s.requests,
            if errors.is_empty() { "-".to_string() } else { errors.join(", ") },
            s.request_throughput,
            s.output_token_throughput,
            s.goodput,
            s.ttft_ms.p50,
            s.ttft_ms.p99,
            s.tpot_ms.p50,
            s.tpot_ms.p99,
            s.itl_ms.p99,
            s.e2e_s.p50,
            s.e2e_s.p99,
            r.prefix_cache_hit_rate
                .map_or("-".to_string(), |h| format!("{:.1}%", h * 100.0)),
        ));
    }
    out
}

fn cdf(values: &mut [f64]) -> Vec<(f64, f64)> {
    values.sort_by(f64::total_cmp);
    let n = values.len() as f64;
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| (v, (i + 1) as f64 / n))
        .collect()
}

fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("plot: {e}")
}

/// Named series of (x, y) points.
type Lines = Vec<(String, Vec<(f64, f64)>)>;

/// How one axis is drawn: its label (with the unit) and whether it is logarithmic (latencies,
/// whose 300 ms and 3 s differ as much as what matters to a user).
#[derive(Clone, Copy)]
struct Axis<'a> {
    label: &'a str,
    log: bool,
}

/// The range an axis shows: fitted to `values` with a margin (on a log axis, to their positive
/// part), so data at 40-80 is not drawn in the top corner of a 0-80 frame.
fn fitted(values: impl Iterator<Item = f64>, log: bool) -> std::ops::Range<f64> {
    let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        low = low.min(v);
        high = high.max(v);
    }
    if low > high {
        return if log { 1.0..10.0 } else { 0.0..1.0 };
    }
    if log {
        return low / 1.25..high * 1.25;
    }
    let pad = ((high - low) * 0.05).max(high.abs() * 1e-3).max(1e-9);
    (low - pad)..(high + pad)
}

/// A tick label: on a log axis only at 1, 2 and 5 times a power of ten (plotters puts a tick at
/// every integer multiple, whose labels run into each other near the next power).
fn tick(log: bool) -> impl Fn(&f64) -> String {
    move |v: &f64| {
        let shown = if *v >= 100.0 || *v == v.round() {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_string()
        };
        if !log || *v <= 0.0 {
            return shown;
        }
        let mantissa = v / 10f64.powf(v.log10().floor());
        let round = [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-6);
        if round {
            shown
        } else {
            String::new()
        }
    }
}

/// A horizontal line at `y` drawn across a chart, labelled (an SLO).
struct Threshold<'a> {
    y: f64,
    label: &'a str,
}

/// One SVG line chart with its legend in a column of its own, right of the plot, so that no
/// line is hidden; `threshold`, if any, is drawn as a dashed line across.
fn line_chart(
    path: &Path,
    title: &str,
    axes: (Axis<'_>, Axis<'_>),
    lines: Lines,
    threshold: Option<Threshold<'_>>,
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (plot_area, legend_area) = root.split_horizontally(760);
    let xs = fitted(
        lines.iter().flat_map(|(_, l)| l.iter().map(|p| p.0)),
        axes.0.log,
    );
    let ys = fitted(
        lines
            .iter()
            .flat_map(|(_, l)| l.iter().map(|p| p.1))
            .chain(threshold.as_ref().map(|t| t.y)),
        axes.1.log,
    );
    let mut builder = ChartBuilder::on(&plot_area);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    let colors: Vec<RGBAColor> = (0..lines.len())
        .map(|i| Palette99::pick(i).to_rgba())
        .collect();
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            let (x_tick, y_tick) = (tick(axes.0.log), tick(axes.1.log));
            chart
                .configure_mesh()
                .x_desc(axes.0.label)
                .y_desc(axes.1.label)
                .x_labels(if axes.0.log { 30 } else { 12 })
                .y_labels(if axes.1.log { 30 } else { 12 })
                .x_label_formatter(&x_tick)
                .y_label_formatter(&y_tick)
                .light_line_style(WHITE)
                .draw()
                .map_err(plot_err)?;
            for ((_, points), color) in lines.iter().zip(&colors) {
                chart
                    .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                    .map_err(plot_err)?;
            }
            if let Some(t) = &threshold {
                let dashes = DashedLineSeries::new(
                    vec![(xs.start, t.y), (xs.end, t.y)],
                    8,
                    5,
                    BLACK.stroke_width(1),
                );
                chart.draw_series(dashes).map_err(plot_err)?;
            }
        }};
    }
    // plotters types a log axis differently from a linear one, hence one arm per combination.
    match (axes.0.log, axes.1.log) {
        (false, false) => draw!(builder
            .build_cartesian_2d(xs.clone(), ys.clone())
            .map_err(plot_err)?),
        (false, true) => draw!(builder
            .build_cartesian_2d(xs.clone(), ys.clone().log_scale())
            .map_err(plot_err)?),
        (true, false) => draw!(builder
            .build_cartesian_2d(xs.clone().log_scale(), ys.clone())
            .map_err(plot_err)?),
        (true, true) => draw!(builder
            .build_cartesian_2d(xs.clone().log_scale(), ys.clone().log_scale())
            .map_err(plot_err)?),
    }
    let mut entries: Vec<(String, ShapeStyle)> = lines
        .iter()
        .zip(&colors)
        .map(|((name, _), color)| (name.clone(), color.stroke_width(2)))
        .collect();
    if let Some(t) = &threshold {
        entries.push((t.label.to_string(), BLACK.stroke_width(1)));
    }
    for (i, (name, style)) in entries.into_iter().enumerate() {
        let y = 50 + 22 * i as i32;
        legend_area
            .draw(&PathElement::new(vec![(8, y), (32, y)], style))
            .map_err(plot_err)?;
        legend_area
            .draw(&Text::new(name, (40, y - 7), ("sans-serif", 14)))
            .map_err(plot_err)?;
    }
    root.present().map_err(plot_err)
}

/// Writes `ttft_cdf.svg`, `e2e_cdf.svg` and, for sweeps, `ttft_vs_rate.svg` and
/// `goodput_vs_rate.svg` to `dir`; latencies on log axes, the TTFT objective of `slo` drawn
/// where there is one.
pub fn plots(dir: &Path, results: &[RunResult], slo: Slo) -> anyhow::Result<()> {
    let cdfs = |pick: &dyn Fn(&Outcome) -> Option<f64>| -> Lines {
        results
            .iter()
            .map(|r| {
                let mut v: Vec<f64> = r
                    .outcomes
                    .iter()
                    .filter(|o| o.error.is_none())
                    .filter_map(pick)
                    .collect();
                (format!("{} {:.2} req/s", r.label, r.rate), cdf(&mut v))
            })
            .collect()
    };
    let latency = |label| Axis { label, log: true };
    let share = Axis {
        label: "share of requests",
        log: false,
    };
    line_chart(
        &dir.join("ttft_cdf.svg"),
        "Time to first token (CDF)",
        (latency("time to first token (ms, log scale)"), share),
        cdfs(&|o| o.ttft.map(|t| t * 1e3)),
        None,
    )?;
    line_chart(
        &dir.join("e2e_cdf.svg"),
        "End-to-end latency (CDF)",
        (latency("end-to-end latency (s, log scale)"), share),
        cdfs(&|o| Some(o.e2e)),
        None,
    )?;
    if results.len() < 2 {
        return Ok(());
    }
    let mut labels: Vec<&str> = results.iter().map(|r| r.label.as_str()).collect();
    labels.dedup();
    let by_label = |name: &str, value: &dyn Fn(&Summary) -> f64| -> Lines {
        labels
            .iter()
            .map(|label| {
                let points = results
                    .iter()
                    .filter(|r| r.label == *label)
                    .map(|r| (r.rate, value(&r.summary)))
                    .filter(|(_, v)| v.is_finite())
                    .collect();
                (format!("{label} {name}"), points)
            })
            .collect()
    };
    let mut ttft = by_label("p50", &|s| s.ttft_ms.p50);
    ttft.extend(by_label("p99", &|s| s.ttft_ms.p99));
    let rate = Axis {
        label: "offered request rate (req/s)",
        log: false,
    };
    line_chart(
        &dir.join("ttft_vs_rate.svg"),
        "TTFT against request rate",
        (rate, latency("time to first token (ms, log scale)")),
        ttft,
        slo.ttft_ms.map(|y| Threshold {
            y,
            label: "TTFT objective",
        }),
    )?;
    let mut goodput = by_label("goodput", &|s| s.goodput);
    goodput.extend(by_label("throughput", &|s| s.request_throughput));
    line_chart(
        &dir.join("goodput_vs_rate.svg"),
        "Goodput against request rate",
        (
            rate,
            Axis {
                label: "requests per second (goodput: within the SLOs)",
                log: false,
            },
        ),
        goodput,
        None,
    )
}

/// Prints the sweep's table and, with `out`, writes result.json (`header` plus every run's
/// summary), requests.jsonl (every request of every run, see [`crate::per_request`]),
/// result.md and the plots there.
pub fn write_results(
    out: Option<&Path>,
    label: &str,
    mut header: serde_json::Value,
    results: &[RunResult],
) -> anyhow::Result<()> {
    let table = markdown(label, results);
    println!("{table}");
    let Some(dir) = out else {
        return Ok(());
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    header["results"] = serde_json::to_value(results)?;
    std::fs::write(
        dir.join("result.json"),
        serde_json::to_string_pretty(&header)?,
    )?;
    std::fs::write(dir.join("result.md"), &table)?;
    // The header says the objectives the runs were judged by (`slo`), when there are any.
    let slo = Slo {
        ttft_ms: header["slo"]["ttft_ms"].as_f64(),
        tpot_ms: header["slo"]["tpot_ms"].as_f64(),
    };
    crate::per_request::write(&dir.join("requests.jsonl"), results, slo)?;
    plots(dir, results, slo)?;
    eprintln!("results written to {}", dir.display());
    Ok(())
}

/// A progress bar over `len` requests, labelled `message`.
pub fn progress_bar(len: usize, message: String) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} answered")
            .expect("a valid template"),
    );
    bar.set_message(message);
    bar
}
