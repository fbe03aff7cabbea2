//! `switchyard bench` against a running `switchyard serve` (simulated engines): every request of
//! a small generated workload completes, and the results, the line of every request, the table
//! and the plots are written.

use switchyard_tests::{binary, Process};

#[tokio::test(flavor = "multi_thread")]
async fn bench_drives_serve_and_writes_its_results() {
    let serve = Process::serve(2, &["--backend", "sim", "--sim-time-scale", "20"]).await;
    let out = std::env::temp_dir().join(format!("switchyard-bench-{}", std::process::id()));
    let engines = format!("{},{}", serve.engine_url(0), serve.engine_url(1));
    let run = std::process::Command::new(binary())
        .args([
            "bench",
            "--url",
            &serve.url(0),
            "--workload",
            "multi-turn",
            "--conversations",
            "4",
            "--turns",
            "3",
            "--question-len",
            "20",
            "--output-len",
            "6",
            "--rate",
            "20,40",
            "--slo-ttft",
            "5000",
            "--engine-metrics",
            &engines,
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("bench runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let table = String::from_utf8_lossy(&run.stdout);
    assert!(table.contains("| 12 / 12 |"), "{table}");
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let results = result["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        let s = &r["summary"];
        assert_eq!(s["completed"], 12, "{s}");
        assert_eq!(s["errors"], serde_json::json!({}));
        assert!(s["ttft_ms"]["p50"].as_f64().unwrap() > 0.0);
        assert_eq!(s["output_tokens"]["p50"], 6.0);
        // Later turns extend earlier ones, so the engines reuse cached prefixes.
        assert!(r["prefix_cache_hit_rate"].as_f64().unwrap() > 0.0, "{r}");
    }
    // A line for every request of both runs, in arrival order within each.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(out.join("requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 24);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["request"], i % 12, "{line}");
        assert_eq!(line["output_tokens"], 6, "{line}");
        assert!(line["ttft_s"].as_f64().unwrap() > 0.0, "{line}");
        assert_eq!(line["error"], serde_json::Value::Null, "{line}");
        // The gateway names the engine that took it.
        let instance = line["instance"].as_str().unwrap();
        assert!(engines.split(',').any(|e| e == instance), "{line}");
    }
    assert_eq!(lines[12]["rate"], 40.0);
    // Sent in arrival order (open loop), from the run's start.
    for run in lines.chunks(12) {
        let sent: Vec<f64> = run.iter().map(|l| l["sent_s"].as_f64().unwrap()).collect();
        assert!(
            sent[0] >= 0.0 && sent.windows(2).all(|w| w[0] <= w[1]),
            "{sent:?}"
        );
    }
    for plot in [
        "ttft_cdf.svg",
        "e2e_cdf.svg",
        "ttft_vs_rate.svg",
        "goodput_vs_rate.svg",
    ] {
        let svg = std::fs::read_to_string(out.join(plot)).unwrap();
        assert!(svg.starts_with("<svg"), "{plot}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}
