//! Helpers for end-to-end tests: build the `switchyard` binary once, start it as a child process
//! on free loopback ports, wait until it is healthy, and stop it when the test ends.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Path of the `switchyard` binary, built on first use: in release when this crate is built
/// optimized (benchmarks), else in the test profile.
pub fn binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let mut build = escargot::CargoBuild::new()
            .package("switchyard")
            .bin("switchyard");
        for (name, _) in std::env::vars_os() {
            if set_by_cargo_for_this_test(&name.to_string_lossy()) {
                build = build.env_remove(name);
            }
        }
        let build = if cfg!(debug_assertions) {
            build
        } else {
            build.release()
        };
        build
            .run()
            .expect(
                "cargo builds the switchyard binary (`cargo build -p switchyard` shows why not)",
            )
            .path()
            .to_path_buf()
    })
    .clone()
}

/// Whether `name` is a variable cargo sets for the running test crate. Build scripts read some
/// (ring reads `CARGO_MANIFEST_DIR`): passed on, they would make the binary's build differ from
/// `cargo build`'s, and each would redo the other's work.
fn set_by_cargo_for_this_test(name: &str) -> bool {
    const PREFIXES: [&str; 2] = ["CARGO_PKG_", "CARGO_BIN_"];
    const NAMES: [&str; 5] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
    ];
    NAMES.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

/// A base port with `count` consecutive free ports after it on 127.0.0.1.
pub fn free_ports(count: u16) -> u16 {
    for _ in 0..200 {
        let probe = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let base = probe.local_addr().expect("local addr").port();
        drop(probe);
        if base.checked_add(count).is_none() {
            continue;
        }
        if (base..base + count).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
    panic!("no run of {count} free ports");
}

/// A running `switchyard` process, killed when dropped.
pub struct Process {
    /// The child process.
    pub child: Child,
    /// First port it serves.
    pub port: u16,
    /// First engine port of `switchyard serve` (0 for other subcommands).
    pub engine_port: u16,
}

impl Process {
    /// Runs `switchyard SUBCOMMAND` listening on 127.0.0.1:`port` with `args`, logging warnings
    /// only, with the test cache directory.
    fn spawn(subcommand: &str, port: u16, args: &[&str]) -> Process {
        let child = Command::new(binary())
            .arg(subcommand)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(args)
            .env("RUST_LOG", "warn")
            .env("SWITCHYARD_CACHE_DIR", test_cache_dir())
            .stdout(Stdio::null())
            .spawn()
            .expect("switchyard starts");
        Process {
            child,
            port,
            engine_port: 0,
        }
    }

    /// Starts `switchyard engine` with `args` (host and port are chosen here) serving
    /// `instances` instances, and waits until every one answers `/health`. The backend is the
    /// simulated one unless `args` name another.
    pub async fn engine(instances: u16, args: &[&str]) -> Process {
        healthy_on_free_ports(instances, |port| {
            Self::engine_spawned(port, instances, args)
        })
        .await
    }

    /// Starts `switchyard engine` as [`Process::engine`] does, on `port` and after.
    pub async fn engine_on(port: u16, instances: u16, args: &[&str]) -> Process {
        let process = Self::engine_spawned(port, instances, args);
        for i in 0..instances {
            wait_healthy(&process.url(i)).await;
        }
        process
    }

    fn engine_spawned(port: u16, instances: u16, args: &[&str]) -> Process {
        let count = instances.to_string();
        let mut all = vec!["--instances", count.as_str()];
        if !args.contains(&"--backend") {
            all.extend(["--backend", "sim"]);
        }
        all.extend_from_slice(args);
        Self::spawn("engine", port, &all)
    }

    /// Starts `switchyard scheduler` with `args` (which name its instances), and waits for its
    /// `/health`.
    pub async fn scheduler(args: &[&str]) -> Process {
        healthy_on_free_ports(1, |port| Self::spawn("scheduler", port, args)).await
    }

    /// Starts `switchyard scheduler` with `args` without waiting for it to listen.
    pub fn scheduler_starting(args: &[&str]) -> Process {
        Self::spawn("scheduler", free_ports(1), args)
    }

    /// Starts `switchyard gateway` with `args` (which name its scheduler), and waits for its
    /// `/health`.
    pub async fn gateway(args: &[&str]) -> Process {
        healthy_on_free_ports(1, |port| Self::spawn("gateway", port, args)).await
    }

    /// Starts `switchyard scheduler` on `port` with `args`, and waits for its `/health`.
    pub async fn scheduler_on(port: u16, args: &[&str]) -> Process {
        let process = Self::spawn("scheduler", port, args);
        wait_healthy(&process.url(0)).await;
        process
    }

    /// Starts `switchyard serve` with `engines` engines (`--prefill-engines` and
    /// `--decode-engines` in `args` must add up to it) and `args`, and waits for the gateway's
    /// `/health` (its URL is `url(0)`).
    pub async fn serve(engines: u16, args: &[&str]) -> Process {
        healthy_on_free_ports(1, |port| {
            let engine_port = free_ports(engines);
            let (count, first) = (engines.to_string(), engine_port.to_string());
            let mut all = vec!["--engine-port", first.as_str()];
            // A disaggregated serve counts its engines as prefill plus decode ones.
            if !args.contains(&"--prefill-engines") {
                all.extend(["--engines", count.as_str()]);
            }
            all.extend_from_slice(args);
            let mut process = Self::spawn("serve", port, &all);
            process.engine_port = engine_port;
            process
        })
        .await
    }

    /// Base URL of instance `i`.
    pub fn url(&self, i: u16) -> String {
        format!("http://127.0.0.1:{}", self.port + i)
    }

    /// Base URL of `switchyard serve`'s engine `i`.
    pub fn engine_url(&self, i: u16) -> String {
        format!("http://127.0.0.1:{}", self.engine_port + i)
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends signal `name` (`KILL`, `STOP`, `CONT`, ...).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Kills it with SIGKILL (`kill -9`) and reaps it.
    pub fn kill(&mut self) {
        self.child.kill().expect("the process is running");
        self.child.wait().expect("the process is reaped");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The cache directory test processes use (the built-in model is written there).
pub fn test_cache_dir() -> PathBuf {
    std::env::temp_dir().join("switchyard-test-cache")
}

/// Starts a process with `spawn` on free ports (`count` of them from the port it is given) until
/// its first `count` URLs answer `/health`. A port found free can still be taken, by another
/// test's outgoing connection say, before the child binds it; the child then exits, and is
/// started again on other ports.
async fn healthy_on_free_ports(count: u16, spawn: impl Fn(u16) -> Process) -> Process {
    for _ in 0..5 {
        let mut process = spawn(free_ports(count));
        if became_healthy(&mut process, count).await {
            return process;
        }
    }
    panic!("the process exited five times before it answered /health");
}

/// Waits up to 60 s for the first `count` URLs of `process` to answer `/health`; false as soon as
/// the process has exited.
async fn became_healthy(process: &mut Process, count: u16) -> bool {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    while i < count {
        if Instant::now() >= deadline {
            panic!("{} did not become healthy", process.url(i));
        }
        if let Ok(Some(status)) = process.child.try_wait() {
            eprintln!(
                "{} exited ({status}) before it answered /health",
                process.url(i)
            );
            return false;
        }
        match client
            .get(format!("{}/health", process.url(i)))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => i += 1,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    true
}

/// Waits up to 60 s for `GET base/health` to answer 200.
pub async fn wait_healthy(base: &str) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(r) = client.get(format!("{base}/health")).send().await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{base} did not become healthy");
}

/// The `/metrics` text of `base`.
pub async fn metrics_text(client: &reqwest::Client, base: &str) -> String {
    client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics answer")
        .text()
        .await
        .expect("metrics text")
}

/// The value of the first sample whose line starts with `series` (0 when there is none).
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Whether Python can import `module`.
pub fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The instance list of the scheduler at `base`.
pub async fn scheduler_instances(client: &reqwest::Client, base: &str) -> Vec<serde_json::Value> {
    client
        .get(format!("{base}/v1/instances"))
        .send()
        .await
        .expect("the scheduler answers")
        .json()
        .await
        .expect("a JSON list")
}

/// Waits up to 10 s until the instance list of the scheduler at `base` satisfies `done`.
pub async fn wait_for_instances(
    client: &reqwest::Client,
    base: &str,
    what: &str,
    done: impl Fn(&[serde_json::Value]) -> bool,
) {
    for _ in 0..200 {
        if done(&scheduler_instances(client, base).await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the scheduler never saw {what}");
}

/// Waits until the scheduler at `base` knows `n` instances, all schedulable.
pub async fn until_schedulable(client: &reqwest::Client, base: &str, n: usize) {
    wait_for_instances(
        client,
        base,
        &format!("{n} schedulable instances"),
        |list| list.len() == n && list.iter().all(|v| v["schedulable"] == true),
    )
    .await;
}

/// Waits up to 10 s until `base` answers a one-token completion (for a gateway: once its
/// scheduler follows an instance).
pub async fn until_completing(base: &str) {
    let client = reqwest::Client::new();
    for _ in 0..200 {
        let sent = client
            .post(format!("{base}/v1/completions"))
            .json(&serde_json::json!({"prompt": "hi", "max_tokens": 1}))
            .send()
            .await;
        if sent.is_ok_and(|r| r.status() == 200) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{base} never answered a completion");
}

/// The stand-in vLLM server with a KV-event publisher (`scripts/vllm_kv_publisher.py`, pyzmq and
/// msgspec), driven one command at a time.
pub struct VllmPublisher {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl VllmPublisher {
    /// Starts it serving HTTP on `http`, publishing on `publisher` and replaying on `replay`, in
    /// the `old` or `new` generation of vLLM's event format.
    pub fn start(http: u16, publisher: u16, replay: u16, generation: &str) -> VllmPublisher {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/vllm_kv_publisher.py");
        let ports = [http, publisher, replay].map(|p| p.to_string());
        let mut child = Command::new("python3")
            .arg(script)
            .args(&ports)
            .arg(generation)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("reads");
        assert_eq!(line.trim(), "ready");
        VllmPublisher {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends one command and waits for its "ok".
    pub fn command(&mut self, command: serde_json::Value) {
        writeln!(self.stdin, "{command}").expect("writes");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("reads");
        assert_eq!(line.trim(), "ok", "{command}");
    }

    /// Publishes batch `seq` (`send`) and keeps it for replay (`keep`).
    pub fn batch(&mut self, seq: u64, events: serde_json::Value, send: bool, keep: bool) {
        self.command(serde_json::json!({"seq": seq, "events": events, "send": send, "keep": keep}));
    }
}

impl Drop for VllmPublisher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Appends the rest of an answer's body to `text` as it arrives, until the body ends (a piece
/// that is not UTF-8 or a broken body fails the test).
pub async fn read_rest<S>(body: &mut S, text: &mut String)
where
    S: futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
{
    use futures::StreamExt;
    while let Some(piece) = body.next().await {
        text.push_str(std::str::from_utf8(&piece.expect("the body goes on")).expect("UTF-8"));
    }
}

/// What a streamed answer came to: its text, each token's logprob, its usage, and whether it
/// ended with `[DONE]`.
#[derive(Debug, PartialEq)]
pub struct Streamed {
    /// The text (completions' `text`, chat's `delta.content`).
    pub text: String,
    /// Each token's logprob, when asked for.
    pub logprobs: Vec<f64>,
    /// The last usage sent.
    pub usage: Option<serde_json::Value>,
    /// Whether it ended with `[DONE]`.
    pub done: bool,
}

/// Reads a streamed answer's SSE text (an error event fails the test).
pub fn read_stream(text: &str) -> Streamed {
    let mut out = Streamed {
        text: String::new(),
        logprobs: Vec::new(),
        usage: None,
        done: false,
    };
    for data in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
        if data == "[DONE]" {
            out.done = true;
            continue;
        }
        let chunk: serde_json::Value = serde_json::from_str(data).unwrap();
        assert!(chunk.get("error").is_none(), "{data}");
        let choice = &chunk["choices"][0];
        if let Some(t) = choice["text"].as_str() {
            out.text.push_str(t);
        }
        if let Some(t) = choice["delta"]["content"].as_str() {
            out.text.push_str(t);
        }
        if let Some(lps) = choice["logprobs"]["token_logprobs"].as_array() {
            out.logprobs.extend(lps.iter().map(|v| v.as_f64().unwrap()));
        }
        if !chunk["usage"].is_null() {
            out.usage = Some(chunk["usage"].clone());
        }
    }
    out
}
