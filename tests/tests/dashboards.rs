//! The Grafana dashboards in `dashboards/` against what switchyard really exports: every metric
//! family a running `switchyard serve` exports (gateway, scheduler, process, and the engines in
//! each metrics dialect in turn) appears in some panel query, and every metric a query names is
//! exported (or is one of the families that appear only once their event happens); plus the
//! structure Grafana needs to import them as they are.

use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use switchyard_tests::{metrics_text, Process};

/// Families registered with labels and exported only once their event happens, and what it is.
const EVENT_FAMILIES: &[(&str, &str)] = &[
    (
        "request_retry_total",
        "an attempt is retried on another instance",
    ),
    ("request_rejected_total", "admission refuses a request"),
    (
        "request_fallback_total",
        "a route falls back to an external endpoint",
    ),
    (
        "request_fallback_retry_success_total",
        "a fallback succeeds after a 429",
    ),
    (
        "request_stream_continuation_total",
        "a broken stream is resumed or a moved one followed",
    ),
    ("gateway_circuit_breaker_state", "a breaker opens"),
    ("gateway_mirror_requests_total", "a route mirrors a request"),
    (
        "gateway_route_config_reloads_total",
        "a --route-config file is read again",
    ),
    (
        "scheduler_scheduling_failed_total",
        "a request cannot be placed",
    ),
    (
        "scheduler_scrape_errors_total",
        "a scraped engine's page has a family that cannot be read",
    ),
    (
        "scheduler_kv_event_resyncs_total",
        "a vLLM/SGLang instance's KV events are followed",
    ),
    ("scheduler_rescheduling_total", "a request is moved"),
    (
        "scheduler_session_placements_total",
        "a request names a session",
    ),
    ("scheduler_rescheduling_failed_total", "a move fails"),
    (
        "scheduler_kv_transfer_bytes_total",
        "KV moves between engines",
    ),
    (
        "scheduler_pd_handoff_total",
        "a prefill/decode hand-off ends",
    ),
    ("vllm:kv_transfer_bytes_total", "an engine moves KV"),
    ("fastdeploy:kv_transfer_bytes_total", "an engine moves KV"),
    ("kv_transfer_bytes_total", "an engine moves KV"),
];

fn dashboards() -> Vec<(String, Value)> {
    let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dashboards");
    let mut found: Vec<(String, Value)> = std::fs::read_dir(&folder)
        .expect("dashboards/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()));
            (p.file_stem().unwrap().to_string_lossy().to_string(), json)
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

fn panels(dashboard: &Value) -> impl Iterator<Item = &Value> {
    dashboard["panels"].as_array().expect("panels").iter()
}

fn exprs(dashboard: &Value) -> Vec<String> {
    panels(dashboard)
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .map(|t| t["expr"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Metric names a PromQL expression selects (identifiers followed by a `{` selector).
fn selected_metrics(expr: &str) -> Vec<String> {
    let bytes = expr.as_bytes();
    let mut names = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || b"_:".contains(&bytes[i]))
            {
                i += 1;
            }
            let before_quote = start > 0 && bytes[start - 1] == b'"';
            if !before_quote && bytes.get(i) == Some(&b'{') {
                names.push(expr[start..i].to_string());
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Metric families (name and type) in a Prometheus text exposition.
fn families(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            Some((parts.next()?.to_string(), parts.next()?.to_string()))
        })
        .collect()
}

/// The family a selected series belongs to (`x_bucket` of histogram `x` is `x`).
fn family_of(name: &str, exported: &HashMap<String, String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if exported.get(base).is_some_and(|t| t == "histogram") {
                return base.to_string();
            }
        }
    }
    name.to_string()
}

#[test]
fn every_dashboard_imports_as_is() {
    let all = dashboards();
    assert_eq!(
        all.len(),
        7,
        "request, component, CMS, LRS and three engine dialects"
    );
    let mut uids = BTreeSet::new();
    for (file, d) in &all {
        assert_eq!(
            d["uid"].as_str(),
            Some(file.as_str()),
            "{file}: uid = file name"
        );
        assert!(uids.insert(file.clone()));
        assert_eq!(d["__inputs"][0]["name"], "DS_PROMETHEUS", "{file}");
        assert_eq!(d["__inputs"][0]["pluginId"], "prometheus", "{file}");
        let variables: Vec<&str> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        for needed in ["namespace", "job", "instance"] {
            assert!(variables.contains(&needed), "{file}: no ${needed}");
        }
        let mut ids = BTreeSet::new();
        let mut boxes: Vec<(i64, i64, i64, i64, String)> = Vec::new();
        for p in panels(d) {
            let title = p["title"].as_str().unwrap_or_default().to_string();
            assert!(
                ids.insert(p["id"].as_i64().unwrap()),
                "{file}: id of {title}"
            );
            let g = &p["gridPos"];
            let (x, y, w, h) = (
                g["x"].as_i64().unwrap(),
                g["y"].as_i64().unwrap(),
                g["w"].as_i64().unwrap(),
                g["h"].as_i64().unwrap(),
            );
            assert!(
                x >= 0 && y >= 0 && w > 0 && h > 0 && x + w <= 24,
                "{file}: {title}"
            );
            for (bx, by, bw, bh, other) in &boxes {
                let apart = x + w <= *bx || *bx + bw <= x || y + h <= *by || *by + bh <= y;
                assert!(apart, "{file}: {title} overlaps {other}");
            }
            boxes.push((x, y, w, h, title.clone()));
            if p["type"] == "row" {
                continue;
            }
            assert_eq!(
                p["datasource"]["uid"], "${DS_PROMETHEUS}",
                "{file}: {title}"
            );
            let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
            assert!(!unit.is_empty(), "{file}: {title} has no unit");
            let targets = p["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{file}: {title}");
            let mut refs = BTreeSet::new();
            for t in targets {
                let expr = t["expr"].as_str().unwrap_or_default();
                assert!(!expr.is_empty(), "{file}: {title}");
                assert!(refs.insert(t["refId"].as_str().unwrap().to_string()));
                assert!(
                    !t["legendFormat"].as_str().unwrap_or_default().is_empty(),
                    "{file}: {title}: unnamed series"
                );
                for name in selected_metrics(expr) {
                    let selector = expr.split(&format!("{name}{{")).nth(1).unwrap_or_default();
                    assert!(
                        selector.starts_with(
                            "namespace=~\"$namespace\", job=~\"$job\", instance=~\"$instance\""
                        ),
                        "{file}: {title}: {name} ignores the template variables"
                    );
                }
                if expr.starts_with("histogram_quantile(") {
                    assert!(expr.contains("_bucket{") && expr.contains("[$__rate_interval]"));
                }
            }
        }
    }
}

/// A `serve` of simulated engines exporting `dialect`, after `requests` short completions (half
/// of them streamed) have gone through it.
async fn loaded_serve(dialect: &str, engines: u16, requests: usize) -> Process {
    let serve = Process::serve(
        engines,
        &[
            "--backend",
            "sim",
            "--sim-time-scale",
            "1000",
            "--metrics-dialect",
            dialect,
        ],
    )
    .await;
    let client = reqwest::Client::new();
    for i in 0..requests {
        let body = serde_json::json!({
            "prompt": format!("request {i} for the dashboards"),
            "max_tokens": 4,
            "stream": i % 2 == 0,
        });
        let answer = client
            .post(format!("{}/v1/completions", serve.url(0)))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        answer.bytes().await.unwrap();
    }
    serve
}

#[tokio::test(flavor = "multi_thread")]
async fn dashboards_cover_every_exported_metric_and_name_nothing_else() {
    let client = reqwest::Client::new();
    let mut exported: HashMap<String, String> = HashMap::new();
    let mut per_dialect: Vec<(String, BTreeSet<String>)> = Vec::new();
    for dialect in ["vllm", "fastdeploy", "mindie"] {
        let serve = loaded_serve(dialect, 2, 8).await;
        let mut names = BTreeSet::new();
        let mut texts = vec![metrics_text(&client, &serve.url(0)).await];
        for e in 0..2 {
            texts.push(metrics_text(&client, &serve.engine_url(e)).await);
        }
        for text in texts {
            for (name, kind) in families(&text) {
                names.insert(name.clone());
                exported.insert(name, kind);
            }
        }
        per_dialect.push((dialect.to_string(), names));
    }

    let mut queried: BTreeSet<String> = BTreeSet::new();
    for (_, d) in dashboards() {
        for expr in exprs(&d) {
            for name in selected_metrics(&expr) {
                queried.insert(family_of(&name, &exported));
            }
        }
    }
    for (dialect, names) in &per_dialect {
        let missing: Vec<&String> = names.iter().filter(|n| !queried.contains(*n)).collect();
        assert!(
            missing.is_empty(),
            "exported with --metrics-dialect {dialect} but on no dashboard: {missing:?}"
        );
    }
    let event_only: BTreeSet<&str> = EVENT_FAMILIES.iter().map(|(n, _)| *n).collect();
    let unknown: Vec<&String> = queried
        .iter()
        .filter(|n| !exported.contains_key(*n) && !event_only.contains(n.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "dashboards query metrics nothing exports: {unknown:?}"
    );
    let sources = [
        "../gateway/src/metrics.rs",
        "../scheduler/src/service/metrics.rs",
        "../scheduler/src/service/migrations.rs",
        "../engine/src/metrics/vllm.rs",
        "../engine/src/metrics/fastdeploy.rs",
        "../engine/src/metrics/mindie.rs",
    ]
    .map(|f| std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(f)).unwrap())
    .join("\n");
    for (name, event) in EVENT_FAMILIES {
        assert!(
            sources.contains(&format!("\"{name}\"")),
            "{name} (exported once {event}) is not defined by the gateway, the scheduler or the engines"
        );
        assert!(queried.contains(*name), "{name} is on no dashboard");
    }
}

#[test]
fn dashboards_are_what_the_generator_writes() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dashboards/generate.py");
    let run = std::process::Command::new("python3")
        .arg(&script)
        .arg("--check")
        .output()
        .expect("python3 runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// Every panel query evaluated by a real Prometheus (Debian's `prometheus`) scraping a loaded
/// `switchyard serve` with the config in deploy/local: each returns data, except the families
/// that need an event this run does not cause and the prefill and decode sections of a cluster
/// that has only neutral instances; then the same for a disaggregated `serve`
/// (`--prefill-engines 1 --decode-engines 1`), whose prefill and decode sections fill, except the
/// scheduler's placements of decode instances (a decode instance is named, not placed by a
/// policy) and the neutral ones.
#[tokio::test(flavor = "multi_thread")]
async fn every_panel_query_returns_data_from_a_real_prometheus() {
    let present = std::process::Command::new("prometheus")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        assert!(
            std::env::var_os("SWITCHYARD_REQUIRE_PROMETHEUS").is_none(),
            "SWITCHYARD_REQUIRE_PROMETHEUS is set but prometheus is not on PATH"
        );
        eprintln!("skipped: no prometheus on PATH (apt install prometheus)");
        return;
    }
    let neutral = ["--backend", "sim", "--sim-time-scale", "50"];
    let dialects = ["--metrics-dialect", "vllm,fastdeploy,mindie"];
    let colocated = [&neutral[..], &dialects[..]].concat();
    panel_queries_have_data(&colocated, |expr| {
        expr.contains("infer_type=\"prefill\"") || expr.contains("infer_type=\"decode\"")
    })
    .await;
    let pd = [
        &colocated[..],
        &["--prefill-engines", "1", "--decode-engines", "1"],
    ]
    .concat();
    panel_queries_have_data(&pd, |expr| {
        let placed_decode =
            expr.contains("selected_instance") && expr.contains("infer_type=\"decode\"");
        placed_decode || expr.contains("infer_type=\"neutral\"")
    })
    .await;
}

/// Runs `serve` with `args` under load, scraped by a real Prometheus, and checks that every
/// panel query returns data, except those `excused` (and those that need an event this run does
/// not cause).
async fn panel_queries_have_data(args: &[&str], excused_here: impl Fn(&str) -> bool) {
    let serve = Process::serve(2, args).await;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let config = std::fs::read_to_string(root.join("deploy/local/prometheus.yml"))
        .unwrap()
        .replace("scrape_interval: 5s", "scrape_interval: 1s")
        .replace("localhost:8000", &serve.url(0)[7..])
        .replace("localhost:8100", &serve.engine_url(0)[7..])
        .replace("localhost:8101", &serve.engine_url(1)[7..]);
    let dir = std::env::temp_dir().join(format!("switchyard-prometheus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let port = switchyard_tests::free_ports(1);
    let mut prometheus = std::process::Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("prometheus starts");

    let client = reqwest::Client::new();
    let load: Vec<_> = (0..40)
        .map(|i| {
            let (client, base) = (client.clone(), serve.url(0));
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(150 * i)).await;
                let (path, body) = if i % 3 == 0 {
                    (
                        "chat/completions",
                        serde_json::json!({"messages": [{"role": "user", "content": format!("hello {i}")}],
                                           "max_tokens": 8, "stream": i % 2 == 0}),
                    )
                } else {
                    (
                        "completions",
                        serde_json::json!({"prompt": format!("shared prefix for the dashboards {}", i % 4),
                                           "max_tokens": 8, "stream": i % 2 == 0}),
                    )
                };
                let r = client
                    .post(format!("{base}/v1/{path}"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                r.bytes().await.unwrap();
            })
        })
        .collect();
    for task in load {
        task.await.unwrap();
    }
    let api = format!("http://127.0.0.1:{port}/api/v1/query");
    let query = |expr: String| {
        let (client, api) = (client.clone(), api.clone());
        async move {
            let answer: Value = client
                .get(&api)
                .query(&[("query", expr.as_str())])
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            assert_eq!(answer["status"], "success", "{expr}: {answer}");
            Some(answer["data"]["result"].as_array().map_or(0, Vec::len))
        }
    };
    // Wait until every target has been scraped a few times since the load.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let up = query("sum(up)".to_string()).await.unwrap_or(0);
        let scraped = query("count(count_over_time(up[10s]) >= 4)".to_string())
            .await
            .unwrap_or(0);
        if up > 0 && scraped > 0 {
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "prometheus never scraped"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }

    let event_only: BTreeSet<&str> = EVENT_FAMILIES.iter().map(|(n, _)| *n).collect();
    let (mut with_data, mut excused, mut empty) = (0, 0, Vec::new());
    for (file, d) in dashboards() {
        let variables = d["templating"]["list"].as_array().unwrap().clone();
        let mut exprs = exprs(&d);
        exprs.extend(
            variables
                .iter()
                .filter_map(|v| v["definition"].as_str())
                .filter_map(|q| q.strip_prefix("label_values("))
                .map(|q| format!("count({})", q.rsplit_once(',').unwrap().0)),
        );
        for expr in exprs {
            let filled = expr
                .replace("$__rate_interval", "1m")
                .replace("\"$namespace\"", "\".*\"")
                .replace("\"$job\"", "\".*\"")
                .replace("\"$instance\"", "\".*\"")
                .replace("\"$instance_id\"", "\".*\"")
                .replace("\"$model\"", "\".*\"");
            let results = query(filled.clone()).await.expect("prometheus answers");
            let needs_event = selected_metrics(&expr)
                .iter()
                .any(|m| event_only.contains(m.as_str()));
            if results > 0 {
                with_data += 1;
            } else if needs_event || excused_here(&expr) {
                excused += 1;
            } else {
                empty.push(format!("{file}: {filled}"));
            }
        }
    }
    let _ = prometheus.kill();
    let _ = prometheus.wait();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{with_data} queries returned data; {excused} need an event or another pool");
    assert!(
        empty.is_empty(),
        "queries without data:\n{}",
        empty.join("\n")
    );
}

/// One family as a `/metrics` page shows it: type, help and label names.
#[derive(Default)]
struct Family {
    kind: String,
    help: String,
    labels: BTreeSet<String>,
}

/// Every family on a Prometheus text page.
fn described_families(text: &str) -> std::collections::BTreeMap<String, Family> {
    let mut out: std::collections::BTreeMap<String, Family> = Default::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry(name.to_string()).or_default().help = help.to_string();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry(name.to_string()).or_default().kind = kind.to_string();
        }
    }
    let kinds: HashMap<String, String> = out
        .iter()
        .map(|(n, f)| (n.clone(), f.kind.clone()))
        .collect();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let family = family_of(&line[..name_end], &kinds);
        let Some(labels) = line[name_end..]
            .strip_prefix('{')
            .and_then(|l| l.split_once('}'))
        else {
            continue;
        };
        let names = labels
            .0
            .split("\",")
            .filter_map(|pair| pair.split_once('=').map(|(k, _)| k.trim().to_string()))
            .filter(|k| k != "le" && k != "quantile");
        if let Some(f) = out.get_mut(&family) {
            f.labels.extend(names);
        }
    }
    out
}

/// Which panels show each family: `dashboard / panel`, from the committed dashboards.
fn panels_by_family(kinds: &HashMap<String, String>) -> HashMap<String, BTreeSet<String>> {
    let mut out: HashMap<String, BTreeSet<String>> = HashMap::new();
    for (_, d) in dashboards() {
        let dashboard = d["title"]
            .as_str()
            .unwrap_or_default()
            .trim_start_matches("switchyard / ");
        for panel in panels(&d) {
            let title = panel["title"].as_str().unwrap_or_default();
            for target in panel["targets"].as_array().into_iter().flatten() {
                for name in selected_metrics(target["expr"].as_str().unwrap_or_default()) {
                    out.entry(family_of(&name, kinds))
                        .or_default()
                        .insert(format!("{dashboard}: {title}"));
                }
            }
        }
    }
    out
}

/// docs/metrics.md as it should read: every family a `serve` exports (gateway, scheduler and
/// process on its own page, each engine dialect on the engines'), then those that appear once
/// their event happens, each with the dashboard panels that show it.
async fn metrics_reference() -> String {
    let client = reqwest::Client::new();
    let mut pages: Vec<(String, String)> = Vec::new();
    for dialect in ["vllm", "fastdeploy", "mindie"] {
        let serve = loaded_serve(dialect, 1, 4).await;
        if dialect == "vllm" {
            pages.push((
                "Gateway, scheduler and process (`serve`'s `/metrics`; a separate gateway or scheduler exports its own part)".into(),
                metrics_text(&client, &serve.url(0)).await,
            ));
        }
        let engine = metrics_text(&client, &serve.engine_url(0)).await;
        // The process families are the same on every page: listed once, with the gateway's.
        let engine: String = engine
            .lines()
            .filter(|l| !l.contains("process_"))
            .collect::<Vec<_>>()
            .join("\n");
        pages.push((format!("Engines, `--metrics-dialect {dialect}`"), engine));
    }
    let event_only: BTreeSet<&str> = EVENT_FAMILIES.iter().map(|(n, _)| *n).collect();
    let mut kinds: HashMap<String, String> = HashMap::new();
    for (_, text) in &pages {
        kinds.extend(families(text));
    }
    let panels = panels_by_family(&kinds);
    let shown = |family: &str| {
        panels
            .get(family)
            .map(|p| p.iter().cloned().collect::<Vec<_>>().join("; "))
            .unwrap_or_else(|| "-".into())
    };
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from(
        "# Metrics reference\n\n\
         Every metric family switchyard exports, with the dashboard panels (`dashboards/`) that show\n\
         it. Written from what a running `switchyard serve` exports by `tests/tests/dashboards.rs`,\n\
         which fails when this page is stale; `SWITCHYARD_BLESS=1 cargo test -p switchyard-tests\n\
         --test dashboards metrics_reference` writes it again. Names, labels and buckets follow\n\
         Llumnix (gateway, scheduler) and vLLM, FastDeploy and MindIE (engines).\n",
    );
    for (title, text) in &pages {
        out.push_str(&format!(
            "\n## {title}\n\n| family | type | labels | what | panels |\n|---|---|---|---|---|\n"
        ));
        for (name, f) in described_families(text) {
            if event_only.contains(name.as_str()) {
                continue;
            }
            let labels: Vec<&str> = f.labels.iter().map(String::as_str).collect();
            out.push_str(&format!(
                "| `{name}` | {} | {} | {} | {} |\n",
                f.kind,
                labels.join(", "),
                cell(&f.help),
                cell(&shown(&name))
            ));
        }
    }
    out.push_str(
        "\n## Exported once their event happens\n\n| family | when | panels |\n|---|---|---|\n",
    );
    for (name, event) in EVENT_FAMILIES {
        out.push_str(&format!(
            "| `{name}` | once {event} | {} |\n",
            cell(&shown(name))
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_metrics_reference_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md");
    let expected = metrics_reference().await;
    if std::env::var_os("SWITCHYARD_BLESS").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == expected,
        "docs/metrics.md is stale: SWITCHYARD_BLESS=1 cargo test -p switchyard-tests --test dashboards metrics_reference"
    );
}
