//! What the gateway adds over calling an engine directly, beside nginx proxying the same engine:
//! latency of short and 2k-token requests, CPU per relayed stream chunk, and requests per
//! second. Every process runs in release on this machine; the targets take turns in rounds so
//! drift on a shared machine hits them alike. Latency is timed from this process's own client
//! (reqwest) and, for the short request, from `wrk` on one connection, which takes almost no CPU
//! from the two cores the targets share.
//!
//! Where the kernel places the client, the proxy and the engine on the cores moves a proxy's
//! added latency by tens of microseconds (a wake-up on an idle core of this VM costs 20-40 us),
//! so the short request is timed again with every thread pinned: the client on the first core,
//! the engine, nginx and the gateway on the second. What a proxy adds there is the work on its
//! path, not where it happened to be woken.
//!
//! `cargo bench -p switchyard-tests --bench gateway_overhead` (needs `nginx`, `wrk` and
//! `taskset` on the PATH)

use futures::StreamExt;
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::Instant;
use switchyard_tests::{free_ports, until_completing, wait_healthy, Process};

const MODEL: &str = "qwen3-0.6b";

/// nginx proxying `upstream` on a free port, with keep-alive to the upstream and no buffering.
struct Nginx {
    child: Child,
    url: String,
    dir: std::path::PathBuf,
}

impl Nginx {
    fn start(upstream: &str) -> Nginx {
        let port = free_ports(1);
        let dir = std::env::temp_dir().join(format!("switchyard-nginx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let upstream = upstream.trim_start_matches("http://");
        let conf = format!(
            "worker_processes 1;\nmaster_process off;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d};\n  proxy_temp_path {d};\n\
               upstream engine {{ server {upstream}; keepalive 256; }}\n\
               server {{\n    listen 127.0.0.1:{port};\n    location / {{\n\
                   proxy_pass http://engine;\n      proxy_http_version 1.1;\n\
                   proxy_set_header Connection \"\";\n      proxy_buffering off;\n    }}\n  }}\n}}\n",
            d = dir.display()
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new("nginx")
            .args([
                "-c",
                conf_path.to_str().unwrap(),
                "-p",
                dir.to_str().unwrap(),
            ])
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx runs (apt install nginx-light)");
        Nginx {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Pins every thread of process `pid` to the cores in `cpus` (`taskset`'s list form); threads it
/// starts later inherit the pinning.
fn pin(pid: u32, cpus: &str) {
    let pinned = Command::new("taskset")
        .args(["-a", "-c", "-p", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("taskset runs (util-linux)");
    assert!(pinned.success(), "taskset pinned {pid} to {cpus}");
}

/// Seconds of CPU (user + system) a process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().unwrap_or(0.0) + fields[12].parse::<f64>().unwrap_or(0.0);
    ticks / 100.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn timed(client: &reqwest::Client, base: &str, body: &Value) -> f64 {
    let started = Instant::now();
    let r = client
        .post(format!("{base}/v1/completions"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{base}");
    r.bytes().await.unwrap();
    started.elapsed().as_secs_f64() * 1e6
}

/// Latency percentiles (us) of each target, in rounds of `batch` requests each.
async fn latencies(
    targets: &[(&str, String)],
    body: &Value,
    rounds: usize,
    batch: usize,
) -> Vec<(f64, f64)> {
    let client = reqwest::Client::new();
    for (_, base) in targets {
        for _ in 0..20 {
            timed(&client, base, body).await;
        }
    }
    let mut samples = vec![Vec::new(); targets.len()];
    for _ in 0..rounds {
        for (i, (_, base)) in targets.iter().enumerate() {
            for _ in 0..batch {
                samples[i].push(timed(&client, base, body).await);
            }
        }
    }
    samples
        .into_iter()
        .map(|mut s| {
            s.sort_by(f64::total_cmp);
            (percentile(&s, 0.5), percentile(&s, 0.99))
        })
        .collect()
}

/// What `wrk` (one thread, `connections` keep-alive connections, `seconds`) printed posting
/// `body` to `base`, ending with the p50 and p99 latency in microseconds (`p50 N`, `p99 N`).
fn wrk(base: &str, body: &Value, connections: usize, seconds: u32) -> String {
    let dir = std::env::temp_dir().join(format!("switchyard-wrk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("post.lua");
    let lua_body = body.to_string().replace('\\', "\\\\").replace('\'', "\\'");
    std::fs::write(
        &script,
        format!(
            "wrk.method = \"POST\"\nwrk.body = '{lua_body}'\nwrk.headers[\"Content-Type\"] = \"application/json\"\n\
             done = function(summary, latency, requests)\n  \
             io.write(string.format(\"p50 %d\\np99 %d\\n\", latency:percentile(50), latency:percentile(99)))\nend\n"
        ),
    )
    .unwrap();
    let out = Command::new("wrk")
        .args([
            "-t1",
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "-s",
            script.to_str().unwrap(),
            &format!("{base}/v1/completions"),
        ])
        .output()
        .expect("wrk runs (apt install wrk)");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !text.contains("Non-2xx") && !text.contains("Socket errors"),
        "every request through {base} succeeded:\n{text}"
    );
    text
}

/// The number after `prefix` on one of `text`'s lines.
fn reported(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("wrk reported {prefix}\n{text}"))
}

/// Requests per second that `wrk` (one thread, `connections` keep-alive connections) gets
/// through `base` in `seconds`: a load generator lighter than this process's own client, so
/// that the 2 cores go to the target.
fn throughput(base: &str, body: &Value, connections: usize, seconds: u32) -> f64 {
    reported(&wrk(base, body, connections, seconds), "Requests/sec:")
}

/// Latency percentiles (us) of each target from `wrk` on one connection, a client in C on one
/// thread that leaves the cores to the targets: the medians over `rounds` rounds of `seconds`
/// per target, the targets in turn.
fn wrk_latencies(
    targets: &[(&str, String)],
    body: &Value,
    rounds: usize,
    seconds: u32,
) -> Vec<(f64, f64)> {
    let mut samples = vec![(Vec::new(), Vec::new()); targets.len()];
    for _ in 0..rounds {
        for (i, (_, base)) in targets.iter().enumerate() {
            let text = wrk(base, body, 1, seconds);
            samples[i].0.push(reported(&text, "p50"));
            samples[i].1.push(reported(&text, "p99"));
        }
    }
    samples
        .into_iter()
        .map(|(mut p50, mut p99)| {
            p50.sort_by(f64::total_cmp);
            p99.sort_by(f64::total_cmp);
            (percentile(&p50, 0.5), percentile(&p99, 0.5))
        })
        .collect()
}

/// Stream chunks relayed and CPU seconds `pid` spent relaying them.
async fn stream_cpu(base: &str, pid: u32, streams: usize, tokens: u32) -> (u64, f64) {
    let client = reqwest::Client::new();
    let body = json!({"model": MODEL, "prompt": "stream", "max_tokens": tokens, "ignore_eos": true, "stream": true});
    let before = cpu_seconds(pid);
    let tasks: Vec<_> = (0..streams)
        .map(|_| {
            let (client, base, body) = (client.clone(), base.to_string(), body.clone());
            tokio::spawn(async move {
                let r = client
                    .post(format!("{base}/v1/completions"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let mut chunks = 0u64;
                let mut pending = String::new();
                let mut stream = r.bytes_stream();
                while let Some(piece) = stream.next().await {
                    pending.push_str(std::str::from_utf8(&piece.unwrap()).unwrap());
                    chunks += pending.matches("data: ").count() as u64;
                    pending = pending
                        .rsplit("data: ")
                        .next()
                        .unwrap_or_default()
                        .to_string();
                }
                chunks
            })
        })
        .collect();
    let mut chunks = 0;
    for t in tasks {
        chunks += t.await.unwrap();
    }
    (chunks, cpu_seconds(pid) - before)
}

/// The engine's (p50, p99), then what nginx and the gateway add to them, from the targets'
/// percentiles in the order engine, nginx, gateway.
fn added(l: &[(f64, f64)]) -> [(f64, f64); 3] {
    let (e50, e99) = l[0];
    [
        (e50, e99),
        (l[1].0 - e50, l[1].1 - e99),
        (l[2].0 - e50, l[2].1 - e99),
    ]
}

/// A table row for `label`: the engine's p50 / p99, what nginx and the gateway add, and the
/// ratio of the added p50s, from the targets' percentiles as [`added`] takes them.
fn row(label: &str, l: &[(f64, f64)]) -> String {
    let [(e50, e99), (n50, n99), (g50, g99)] = added(l);
    format!(
        "| {label} | {e50:.0} / {e99:.0} | {n50:.0} / {n99:.0} | {g50:.0} / {g99:.0} | {:.2}x |",
        g50 / n50
    )
}

/// The short request's added p50 and p99 through nginx and the gateway, from this process's
/// client and from wrk, with this process (and so wrk) pinned to the first core and the
/// `servers` (every switchyard process and nginx) to the second; unpinned again after.
async fn pinned(targets: &[(&str, String)], short: &Value, servers: &[u32]) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        println!("\n(One core: no pinned timings.)");
        return;
    }
    let all = format!("0-{}", cores - 1);
    for pid in servers {
        pin(*pid, "1");
    }
    pin(std::process::id(), "0");
    let l = latencies(targets, short, 20, 50).await;
    let w = wrk_latencies(targets, short, 5, 2);
    for pid in servers.iter().chain([&std::process::id()]) {
        pin(*pid, &all);
    }
    println!(
        "\nPinned (this process and wrk on core 0; the engine, nginx and the gateway on core 1), short token-id request, added p50 / p99 in us:\n"
    );
    println!(
        "| client | engine p50 / p99 | nginx adds | gateway adds | gateway / nginx, added p50 |"
    );
    println!("|---|---|---|---|---|");
    for (client, l) in [("reqwest", l), ("wrk -t1 -c1", w)] {
        println!("{}", row(client, &l));
    }
    println!();
}

/// Every measurement for one setup: the engine at `engine`, the gateway at `gateway` (process
/// `gateway_pid`; `servers` are every switchyard process of the setup), and nginx started here
/// over the same engine.
async fn measure(
    setup: &str,
    engine: &str,
    gateway: &str,
    gateway_pid: Option<u32>,
    servers: &[u32],
) {
    let nginx = Nginx::start(engine);
    wait_healthy(&nginx.url).await;
    until_completing(gateway).await;
    let targets = [
        ("engine", engine.to_string()),
        ("nginx", nginx.url.clone()),
        ("gateway", gateway.to_string()),
    ];
    let words = "the quick brown fox jumps over the lazy dog while a router places requests ";
    let long_text = words.repeat(60);
    let tokenized: Value = reqwest::Client::new()
        .post(format!("{engine}/tokenize"))
        .json(&json!({"prompt": long_text}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let long_tokens = tokenized["count"].as_u64().unwrap();
    let ids: Vec<u32> = (1..=8).collect();
    let cases = [
        (
            "short, 8 token ids (no tokenization)",
            json!({"model": MODEL, "prompt": ids, "max_tokens": 1}),
        ),
        (
            "short text",
            json!({"model": MODEL, "prompt": "Say hi to the router", "max_tokens": 1}),
        ),
        (
            &*format!("{long_tokens}-token text"),
            json!({"model": MODEL, "prompt": long_text, "max_tokens": 1}),
        ),
    ];
    println!("\n### {setup}\n");
    println!("| request | engine p50 / p99 (us) | nginx adds p50 / p99 | gateway adds p50 / p99 | gateway / nginx, added p50 |");
    println!("|---|---|---|---|---|");
    for (name, body) in &cases {
        let l = latencies(&targets, body, 20, 50).await;
        println!("{}", row(name, &l));
    }
    let [(e50, e99), (n50, n99), (g50, g99)] = added(&wrk_latencies(&targets, &cases[0].1, 5, 2));
    println!(
        "\nThe short token-id request from `wrk -t1 -c1` instead (medians of 5 rounds of 2 s per target): \
         engine {e50:.0} / {e99:.0} us, nginx adds {n50:.0} / {n99:.0}, gateway adds {g50:.0} / {g99:.0}, {:.2}x",
        g50 / n50
    );
    let servers: Vec<u32> = servers.iter().copied().chain([nginx.child.id()]).collect();
    pinned(&targets, &cases[0].1, &servers).await;
    if let Some(pid) = gateway_pid {
        let (chunks, cpu) = stream_cpu(gateway, pid, 64, 2000).await;
        let (nchunks, ncpu) = stream_cpu(&nginx.url, nginx.child.id(), 64, 2000).await;
        println!(
            "\nStream relay CPU: gateway {:.2} us per chunk ({chunks} chunks, {cpu:.2} s of CPU); nginx {:.2} us per chunk ({nchunks} chunks, {ncpu:.2} s)\n",
            cpu * 1e6 / chunks as f64,
            ncpu * 1e6 / nchunks as f64
        );
    }
    let short = &cases[0].1;
    for (name, base) in &targets {
        let rps = throughput(base, short, 64, 5);
        println!("- throughput through {name}: {rps:.0} requests/s (wrk, 64 keep-alive connections, short token-id requests)");
    }
}

#[tokio::main]
async fn main() {
    let sim = [
        "--backend",
        "sim",
        "--sim-time-scale",
        "1000000",
        "--max-model-len",
        "8192",
        "--num-kv-blocks",
        "8192",
        "--max-num-seqs",
        "512",
    ];
    for (setup, transport) in [
        (
            "`switchyard serve --engines 1` (scheduler and engine called in process)",
            None,
        ),
        (
            "`switchyard serve --engines 1 --engines-over-http` (scheduler in process, engine over loopback HTTP)",
            Some("--engines-over-http"),
        ),
    ] {
        let args: Vec<&str> = sim.iter().copied().chain(transport).collect();
        let serve = Process::serve(1, &args).await;
        measure(
            setup,
            &serve.engine_url(0),
            &serve.url(0),
            None,
            &[serve.child.id()],
        )
        .await;
    }
    let engine = Process::engine(1, &sim[2..]).await;
    let scheduler = Process::scheduler(&["--instances", &engine.url(0)]).await;
    let gateway = Process::gateway(&[
        "--scheduler",
        &scheduler.url(0),
        "--served-model-name",
        MODEL,
    ])
    .await;
    measure(
        "separate engine, scheduler and gateway processes",
        &engine.url(0),
        &gateway.url(0),
        Some(gateway.child.id()),
        &[engine.child.id(), scheduler.child.id(), gateway.child.id()],
    )
    .await;
}
