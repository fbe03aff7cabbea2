//! What each request of a run got, one JSON object a line (`requests.jsonl` beside
//! `result.json`), as vLLM's benchmark saves with `--save-detailed`: the percentiles say how
//! bad a tail is, these lines say which requests are in it (their prompt and answer lengths,
//! their longest gap, the instance that took them and, in `sim`, the one they finished on).

use crate::report::RunResult;
use crate::stats::{Outcome, Slo};
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// One request of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRecord<'a> {
    /// The run's label (the workload for `bench`, the policy for `sim`).
    pub label: &'a str,
    /// The run's offered rate, requests per second.
    pub rate: f64,
    /// The request's place in the workload (arrival order), from 0.
    pub request: usize,
    /// Seconds from the run's start to its send.
    pub sent_s: f64,
    /// Prompt tokens, as the server counted them (0 if it did not say).
    pub prompt_tokens: u32,
    /// Generated tokens.
    pub output_tokens: u32,
    /// Seconds to the first generated text.
    pub ttft_s: Option<f64>,
    /// Seconds per output token after the first (none for answers of one token).
    pub tpot_s: Option<f64>,
    /// Seconds from send to the end of the answer.
    pub e2e_s: f64,
    /// The longest gap between two chunks of its answer, seconds.
    pub max_itl_s: Option<f64>,
    /// Whether it met the run's SLOs (true when none were given and it did not fail).
    pub slo_met: bool,
    /// Why it failed, if it did.
    pub error: Option<&'a str>,
    /// The instance that took it, if known.
    pub instance: Option<&'a str>,
    /// The instance it finished on, where known (`sim`): another one when it was handed off or
    /// moved.
    pub finished_on: Option<&'a str>,
}

impl<'a> RequestRecord<'a> {
    /// The record of outcome `o`, the `request`-th of `run`, judged by `slo`.
    pub fn of(run: &'a RunResult, request: usize, o: &'a Outcome, slo: Slo) -> Self {
        RequestRecord {
            label: &run.label,
            rate: run.rate,
            request,
            sent_s: o.sent,
            prompt_tokens: o.prompt_tokens,
            output_tokens: o.output_tokens,
            ttft_s: o.ttft,
            tpot_s: o.tpot(),
            e2e_s: o.e2e,
            max_itl_s: o.itls.iter().copied().reduce(f64::max),
            slo_met: slo.met(o),
            error: o.error.as_deref(),
            instance: o.instance.as_deref(),
            finished_on: o.finished_on.as_deref(),
        }
    }
}

/// Writes every request of every run in `results` to `path`, one JSON object a line.
pub fn write(path: &Path, results: &[RunResult], slo: Slo) -> anyhow::Result<()> {
    let file = std::fs::File::create(path)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for run in results {
        for (i, o) in run.outcomes.iter().enumerate() {
            serde_json::to_writer(&mut out, &RequestRecord::of(run, i, o, slo))?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summarize;

    #[test]
    fn each_request_becomes_one_line_with_its_times_and_whether_it_met_the_slos() {
        let outcomes = vec![
            Outcome {
                ttft: Some(0.1),
                itls: vec![0.02, 0.09, 0.01],
                e2e: 0.22,
                sent: 2.5,
                prompt_tokens: 900,
                output_tokens: 4,
                error: None,
                instance: Some("http://10.0.0.7:8000".into()),
                finished_on: Some("http://10.0.0.8:8000".into()),
            },
            Outcome {
                ttft: Some(0.05),
                itls: vec![],
                e2e: 0.05,
                prompt_tokens: 10,
                output_tokens: 1,
                ..Outcome::default()
            },
            Outcome {
                error: Some("http_429".into()),
                ..Outcome::default()
            },
        ];
        let slo = Slo {
            ttft_ms: Some(1000.0),
            tpot_ms: Some(30.0),
        };
        let run = RunResult {
            label: "predictive".into(),
            rate: 4.0,
            summary: summarize(&outcomes, 1.0, slo),
            prefix_cache_hit_rate: None,
            unlimited_prefix_cache_hit_rate: None,
            moves: None,
            outcomes,
        };
        let path = std::env::temp_dir().join(format!("requests-{}.jsonl", std::process::id()));
        write(&path, std::slice::from_ref(&run), slo).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        let first = &lines[0];
        assert_eq!(first["label"], "predictive");
        assert_eq!(first["rate"], 4.0);
        assert_eq!(first["request"], 0);
        assert_eq!(first["sent_s"], 2.5);
        assert_eq!(first["prompt_tokens"], 900);
        assert_eq!(first["max_itl_s"], 0.09);
        // (0.22 - 0.1) / 3 = 40 ms a token, over the 30 ms objective.
        assert!((first["tpot_s"].as_f64().unwrap() - 0.04).abs() < 1e-9);
        assert_eq!(first["slo_met"], false);
        assert_eq!(first["instance"], "http://10.0.0.7:8000");
        assert_eq!(first["finished_on"], "http://10.0.0.8:8000");
        // One token: no TPOT, no gap, and inside the TTFT objective.
        assert_eq!(lines[1]["tpot_s"], serde_json::Value::Null);
        assert_eq!(lines[1]["max_itl_s"], serde_json::Value::Null);
        assert_eq!(lines[1]["slo_met"], true);
        assert_eq!(lines[2]["request"], 2);
        assert_eq!(lines[2]["error"], "http_429");
        assert_eq!(lines[2]["slo_met"], false);
    }
}
