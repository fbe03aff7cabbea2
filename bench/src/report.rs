//! A bench's results: JSON for machines, a markdown table for BENCHMARKS.md, SVG plots (latency
//! CDFs per rate; TTFT and goodput against the request rate).

use crate::stats::{Outcome, Summary};
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

/// One SVG line chart: `axes` names x and y, `top` is the largest y shown.
fn line_chart(
    path: &Path,
    title: &str,
    axes: (&str, &str),
    top: f64,
    lines: Lines,
) -> anyhow::Result<()> {
    let right = lines
        .iter()
        .flat_map(|(_, l)| l.iter().map(|p| p.0))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.05;
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..right, 0.0..top)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc(axes.0)
        .y_desc(axes.1)
        .draw()
        .map_err(plot_err)?;
    for (i, (name, points)) in lines.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(plot_err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

/// Writes `ttft_cdf.svg`, `e2e_cdf.svg` and, for sweeps, `ttft_vs_rate.svg` and
/// `goodput_vs_rate.svg` to `dir`.
pub fn plots(dir: &Path, results: &[RunResult]) -> anyhow::Result<()> {
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
    let ttft = cdfs(&|o| o.ttft.map(|t| t * 1e3));
    line_chart(
        &dir.join("ttft_cdf.svg"),
        "Time to first token (CDF)",
        ("ms", "share of requests"),
        1.0,
        ttft,
    )?;
    let e2e = cdfs(&|o| Some(o.e2e));
    line_chart(
        &dir.join("e2e_cdf.svg"),
        "End-to-end latency (CDF)",
        ("s", "share of requests"),
        1.0,
        e2e,
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
    let top = |lines: &Lines| {
        lines
            .iter()
            .flat_map(|(_, l)| l.iter().map(|p| p.1))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.1
    };
    let mut ttft = by_label("p50", &|s| s.ttft_ms.p50);
    ttft.extend(by_label("p99", &|s| s.ttft_ms.p99));
    let rate_axis = "offered requests per second";
    line_chart(
        &dir.join("ttft_vs_rate.svg"),
        "TTFT against request rate",
        (rate_axis, "ms"),
        top(&ttft),
        ttft,
    )?;
    let mut goodput = by_label("goodput", &|s| s.goodput);
    goodput.extend(by_label("throughput", &|s| s.request_throughput));
    line_chart(
        &dir.join("goodput_vs_rate.svg"),
        "Goodput against request rate",
        (rate_axis, "req/s (goodput: within the SLOs)"),
        top(&goodput),
        goodput,
    )
}

/// Prints the sweep's table and, with `out`, writes result.json (`header` plus every run's
/// summary), result.md and the plots there.
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
    plots(dir, results)?;
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
