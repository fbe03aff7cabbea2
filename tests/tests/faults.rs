//! Faults injected into real processes on loopback: engines killed (`kill -9`), stalled
//! (SIGSTOP), slow or refusing with 429 for a while, the scheduler and the gateway killed under
//! load, an engine restarted on its old address. Each test counts how every request ended, and
//! prints a summary line (sent, succeeded, retried, continued, failed, p99) for RELIABILITY.md.
//!
//! The tests run one at a time (they load the machine and some wait on timeouts).

use futures::future::join_all;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_tests::{
    free_ports, metric_value, metrics_text, scheduler_instances, until_schedulable,
    wait_for_instances, Process,
};
use tokio::sync::Mutex;

const MODEL: &str = "qwen3-0.6b";

/// One test at a time.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// Engines (one instance each), a scheduler following them and a gateway over it.
struct Cluster {
    engines: Vec<Process>,
    scheduler: Process,
    gateway: Process,
    client: reqwest::Client,
}

impl Cluster {
    /// Starts one engine per entry of `engines` (its extra flags), the scheduler with
    /// `scheduler_args` and the gateway with `gateway_args`, and waits until all are schedulable.
    async fn start(engines: &[&[&str]], scheduler_args: &[&str], gateway_args: &[&str]) -> Self {
        let mut started = Vec::new();
        for args in engines {
            started.push(Process::engine(1, args).await);
        }
        let list: Vec<String> = started.iter().map(|e| e.url(0)).collect();
        let scheduler =
            Process::scheduler(&[&["--instances", &list.join(",")], scheduler_args].concat()).await;
        let gateway = Self::gateway(&scheduler, gateway_args).await;
        let client = reqwest::Client::new();
        until_schedulable(&client, &scheduler.url(0), engines.len()).await;
        Cluster {
            engines: started,
            scheduler,
            gateway,
            client,
        }
    }

    async fn gateway(scheduler: &Process, args: &[&str]) -> Process {
        let base = [
            "--scheduler",
            &scheduler.url(0),
            "--served-model-name",
            MODEL,
        ];
        Process::gateway(&[&base[..], args].concat()).await
    }

    /// Sends request `i` to the gateway.
    async fn send(&self, i: usize, stream: bool, max_tokens: u32) -> Outcome {
        send(&self.client, &self.gateway.url(0), i, stream, max_tokens).await
    }

    /// The scheduler's view of engine `e`.
    async fn instance(&self, e: usize) -> Value {
        let url = self.engines[e].url(0);
        scheduler_instances(&self.client, &self.scheduler.url(0))
            .await
            .into_iter()
            .find(|v| v["meta"]["endpoint"] == url.as_str())
            .expect("the scheduler knows the engine")
    }

    /// Waits until the scheduler's view of engine `e` satisfies `done`.
    async fn until_instance(&self, e: usize, what: &str, done: impl Fn(&Value) -> bool) {
        let url = self.engines[e].url(0);
        wait_for_instances(&self.client, &self.scheduler.url(0), what, |list| {
            list.iter()
                .find(|v| v["meta"]["endpoint"] == url.as_str())
                .is_some_and(&done)
        })
        .await;
    }

    /// Requests running on engine `e`.
    async fn running(&self, e: usize) -> f64 {
        let text = metrics_text(&self.client, &self.engines[e].url(0)).await;
        metric_value(&text, "vllm:num_requests_running")
    }

    /// Waits up to 30 s until engine `e` runs at least `n` requests.
    async fn until_running(&self, e: usize, n: f64) {
        for _ in 0..600 {
            if self.running(e).await >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("engine {e} never ran {n} requests");
    }

    /// The gateway's retries (every cause) and resumed streams so far.
    async fn retried_and_continued(&self) -> (f64, f64) {
        let text = metrics_text(&self.client, &self.gateway.url(0)).await;
        let resumed =
            format!("request_stream_continuation_total{{model=\"{MODEL}\",outcome=\"resumed\"}}");
        (
            sum_of(&text, "request_retry_total{"),
            metric_value(&text, &resumed),
        )
    }
}

/// The sum of every sample whose line starts with `prefix`.
fn sum_of(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |sum, v| sum + v)
}

/// How one request ended.
#[derive(Debug, Clone)]
struct Outcome {
    /// Whole and right: status 200, every token asked for, a stream ended by `[DONE]`.
    ok: bool,
    /// The engine that answered (`x-switchyard-instance`).
    instance: String,
    /// What went wrong, when it did.
    detail: String,
    /// Seconds from sending to the last byte.
    seconds: f64,
}

/// Sends request `i` (distinct prompts, greedy, exactly `max_tokens` tokens) and reads it to
/// the end.
async fn send(
    client: &reqwest::Client,
    base: &str,
    i: usize,
    stream: bool,
    max_tokens: u32,
) -> Outcome {
    let started = Instant::now();
    let mut body = json!({"model": MODEL, "prompt": format!("request {i}: tell me a story"),
        "max_tokens": max_tokens, "ignore_eos": true, "temperature": 0, "stream": stream});
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    let (ok, instance, detail) = match client
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
    {
        Err(e) => (false, String::new(), format!("send: {e}")),
        Ok(r) => {
            let status = r.status().as_u16();
            let instance = r
                .headers()
                .get("x-switchyard-instance")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            match r.text().await {
                Err(e) => (false, instance, format!("read: {e}")),
                Ok(text) => {
                    let tokens = if stream {
                        stream_tokens(&text)
                    } else {
                        serde_json::from_str::<Value>(&text)
                            .ok()
                            .and_then(|v| v["usage"]["completion_tokens"].as_u64())
                    };
                    let ok = status == 200 && tokens == Some(max_tokens as u64);
                    (ok, instance, format!("{status}: {text:.300}"))
                }
            }
        }
    };
    Outcome {
        ok,
        instance,
        detail,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// The completion tokens of a whole stream: `None` unless it ended with `[DONE]` and carried
/// no error event.
fn stream_tokens(text: &str) -> Option<u64> {
    let mut tokens = None;
    let mut done = false;
    for data in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(data).ok()?;
        if chunk.get("error").is_some() {
            return None;
        }
        if let Some(n) = chunk["usage"]["completion_tokens"].as_u64() {
            tokens = Some(n);
        }
    }
    tokens.filter(|_| done)
}

/// Counts of a scenario, printed for RELIABILITY.md.
struct Summary {
    sent: usize,
    succeeded: usize,
    failed: Vec<Outcome>,
    p99_seconds: f64,
}

/// The first few failures, for an assertion's message.
fn describe(failed: &[Outcome]) -> String {
    failed
        .iter()
        .take(5)
        .map(|o| format!("{} after {:.1} s: {}", o.instance, o.seconds, o.detail))
        .collect::<Vec<_>>()
        .join("\n")
}

fn summarize(scenario: &str, outcomes: &[Outcome], retried: f64, continued: f64) -> Summary {
    let failed: Vec<Outcome> = outcomes.iter().filter(|o| !o.ok).cloned().collect();
    let mut seconds: Vec<f64> = outcomes.iter().map(|o| o.seconds).collect();
    seconds.sort_by(f64::total_cmp);
    let p99_seconds = seconds
        .get(((seconds.len() as f64 * 0.99).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or(0.0);
    let summary = Summary {
        sent: outcomes.len(),
        succeeded: outcomes.len() - failed.len(),
        failed,
        p99_seconds,
    };
    println!(
        "RELIABILITY {scenario}: sent {}, succeeded {}, retried {retried}, continued {continued}, \
         failed {}, p99 {:.2} s",
        summary.sent,
        summary.succeeded,
        summary.failed.len(),
        summary.p99_seconds
    );
    summary
}

/// Flags of an engine that runs in real time (the simulated GPU's step times).
const REAL_TIME: &[&str] = &["--sim-time-scale", "1"];

/// The gateway's flags, plus `--engine-http2` when `http2` (every answer of an engine on one
/// HTTP/2 connection, so a fault hits all of them at once).
fn with_http2<'a>(flags: &[&'a str], http2: bool) -> Vec<&'a str> {
    let mut all = flags.to_vec();
    if http2 {
        all.push("--engine-http2");
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_ends_when_one_engine_of_four_is_killed_under_load() {
    one_engine_of_four_killed_under_load(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_ends_when_one_engine_of_four_is_killed_under_load_over_http2() {
    one_engine_of_four_killed_under_load(true).await;
}

async fn one_engine_of_four_killed_under_load(http2: bool) {
    let _serial = SERIAL.lock().await;
    let gateway = with_http2(&["--request-timeout", "60"], http2);
    let c = Cluster::start(&[REAL_TIME; 4], &[], &gateway).await;
    let requests = join_all((0..500).map(|i| c.send(i, i.is_multiple_of(2), 100)));
    let kill = async {
        c.until_running(0, 10.0).await;
        c.engines[0].signal("KILL");
    };
    let (outcomes, ()) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(150), requests),
        kill
    );
    let outcomes = outcomes.expect("every request ends");
    let (retried, continued) = c.retried_and_continued().await;
    let name = if http2 {
        "kill -9 one engine of four (HTTP/2 to engines)"
    } else {
        "kill -9 one engine of four"
    };
    let s = summarize(name, &outcomes, retried, continued);
    assert_eq!(s.sent, 500);
    assert!(s.failed.is_empty(), "{}", describe(&s.failed));
    assert!(s.p99_seconds < 60.0, "within the deadline");
    assert!(
        continued >= 1.0,
        "the killed engine's streams went on elsewhere"
    );
    assert!(
        outcomes
            .iter()
            .filter(|o| o.instance == c.engines[0].url(0))
            .count()
            < 500,
        "{retried}"
    );
    c.until_instance(0, "the killed engine unschedulable, its index empty", |v| {
        v["schedulable"] == false && v["indexed_blocks"] == 0
    })
    .await;
    let after = c.send(1000, true, 10).await;
    assert!(
        after.ok && after.instance != c.engines[0].url(0),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_engine_is_routed_around_and_returns_when_it_resumes() {
    stalled_engine_routed_around(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_engine_is_routed_around_and_returns_when_it_resumes_over_http2() {
    stalled_engine_routed_around(true).await;
}

async fn stalled_engine_routed_around(http2: bool) {
    let _serial = SERIAL.lock().await;
    let gateway = with_http2(
        &[
            "--request-timeout",
            "60",
            "--first-byte-timeout",
            "1",
            "--stream-idle-timeout",
            "3",
        ],
        http2,
    );
    let c = Cluster::start(&[REAL_TIME; 3], &["--instance-staleness", "2"], &gateway).await;
    let streaming = join_all((0..30).map(|i| c.send(i, true, 400)));
    let stall = async {
        c.until_running(0, 1.0).await;
        c.engines[0].signal("STOP");
        // Sent while the scheduler still sees the stalled engine as fresh.
        join_all((30..60).map(|i| c.send(i, i.is_multiple_of(2), 50))).await
    };
    let (first, later) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(120), streaming),
        stall
    );
    let outcomes: Vec<Outcome> = first
        .expect("every stream ends")
        .into_iter()
        .chain(later)
        .collect();
    let (retried, continued) = c.retried_and_continued().await;
    let name = if http2 {
        "an engine of three stalls (SIGSTOP, HTTP/2 to engines)"
    } else {
        "an engine of three stalls (SIGSTOP)"
    };
    let s = summarize(name, &outcomes, retried, continued);
    assert!(s.failed.is_empty(), "{}", describe(&s.failed));
    assert!(
        continued >= 1.0,
        "streams of the stalled engine went on elsewhere"
    );

    c.until_instance(0, "the stalled engine unschedulable", |v| {
        v["schedulable"] == false
    })
    .await;
    let stalled = c.engines[0].url(0);
    for i in 0..10 {
        let o = c.send(100 + i, false, 5).await;
        assert!(o.ok && o.instance != stalled, "{o:?}");
    }

    c.engines[0].signal("CONT");
    c.until_instance(0, "the engine schedulable again", |v| {
        v["schedulable"] == true
    })
    .await;
    let resumed = Instant::now();
    let mut returned = false;
    for i in 0.. {
        let o = c.send(200 + i, false, 5).await;
        assert!(o.ok, "{o:?}");
        if o.instance == stalled {
            returned = true;
            break;
        }
        if resumed.elapsed() > Duration::from_secs(40) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gateway = metrics_text(&c.client, &c.gateway.url(0)).await;
    let breakers: Vec<&str> = gateway
        .lines()
        .filter(|l| l.starts_with("gateway_circuit_breaker_state{"))
        .collect();
    assert!(
        returned,
        "traffic returns to the engine once it resumes; breakers {breakers:?}, scheduler's view {}",
        c.instance(0).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_engine_gets_less_traffic_and_every_request_meets_its_deadline() {
    let _serial = SERIAL.lock().await;
    let slow: &[&str] = &["--sim-time-scale", "0.05"];
    let c = Cluster::start(
        &[slow, REAL_TIME, REAL_TIME],
        &[],
        &["--request-timeout", "30"],
    )
    .await;
    let next = AtomicUsize::new(0);
    let worker = || async {
        let mut outcomes = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::SeqCst);
            if i >= 90 {
                return outcomes;
            }
            outcomes.push(c.send(i, i.is_multiple_of(2), 32).await);
        }
    };
    let outcomes: Vec<Outcome> = join_all((0..6).map(|_| worker()))
        .await
        .into_iter()
        .flatten()
        .collect();
    let (retried, continued) = c.retried_and_continued().await;
    let s = summarize(
        "one engine of three 20x slower",
        &outcomes,
        retried,
        continued,
    );
    assert!(s.failed.is_empty(), "{}", describe(&s.failed));
    assert!(s.p99_seconds < 30.0);
    let served = |e: usize| {
        let url = c.engines[e].url(0);
        outcomes.iter().filter(|o| o.instance == url).count()
    };
    let (slow, fast) = (served(0), served(1).min(served(2)));
    assert!(
        slow < fast,
        "the slow engine served {slow}, the fast ones at least {fast}"
    );
}

/// A stand-in for a third-party vLLM server that answers 429 while `busy`: the scheduler scrapes
/// its `/metrics`, and its completions stream `max_tokens` tokens.
struct FakeVllm {
    url: String,
    busy: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
    served: Arc<AtomicUsize>,
}

async fn fake_vllm() -> FakeVllm {
    use axum::response::IntoResponse;
    use axum::routing::{get, post};
    let busy = Arc::new(AtomicBool::new(true));
    let refused = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let metrics = "# TYPE vllm:num_requests_running gauge\n\
        vllm:num_requests_running{model_name=\"m\"} 0\n\
        # TYPE vllm:num_requests_waiting gauge\n\
        vllm:num_requests_waiting{model_name=\"m\"} 0\n\
        # TYPE vllm:kv_cache_usage_perc gauge\n\
        vllm:kv_cache_usage_perc{model_name=\"m\"} 0\n\
        # TYPE vllm:cache_config_info gauge\n\
        vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1\n";
    let (b, r, s) = (busy.clone(), refused.clone(), served.clone());
    let complete = move |body: axum::Json<Value>| {
        let (busy, refused, served) = (b.clone(), r.clone(), s.clone());
        async move {
            if busy.load(Ordering::SeqCst) {
                refused.fetch_add(1, Ordering::SeqCst);
                let error =
                    json!({"error": {"message": "busy", "type": "rate_limit", "code": 429}});
                return (
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "0")],
                    axum::Json(error),
                )
                    .into_response();
            }
            served.fetch_add(1, Ordering::SeqCst);
            let n = body["max_tokens"].as_u64().unwrap_or(1);
            let mut text = String::new();
            for k in 0..n {
                let finish = if k + 1 == n {
                    json!("length")
                } else {
                    Value::Null
                };
                let chunk = json!({"id": "cmpl-f", "object": "text_completion", "created": 1, "model": MODEL,
                    "choices": [{"index": 0, "text": " x", "finish_reason": finish}]});
                text.push_str(&format!("data: {chunk}\n\n"));
            }
            let usage = json!({"id": "cmpl-f", "object": "text_completion", "created": 1, "model": MODEL, "choices": [],
                "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}});
            text.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
            ([("content-type", "text/event-stream")], text).into_response()
        }
    };
    let models = json!({"object": "list", "data": [{"id": MODEL, "object": "model"}]});
    let app = axum::Router::new()
        .route("/metrics", get(move || async move { metrics }))
        .route("/v1/models", get(move || async move { axum::Json(models) }))
        .route("/health", get(|| async { "ok" }))
        .route("/v1/completions", post(complete));
    tokio::spawn(async move { axum::serve(listener, app).await });
    FakeVllm {
        url,
        busy,
        refused,
        served,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_answering_429_for_a_while_is_retried_around_and_gets_traffic_back() {
    let _serial = SERIAL.lock().await;
    let fake = fake_vllm().await;
    let engine = Process::engine(1, REAL_TIME).await;
    let list = format!("{},vllm@{}", engine.url(0), fake.url);
    let scheduler = Process::scheduler(&[
        "--instances",
        &list,
        "--scrape-interval",
        "50",
        "--policy",
        "round-robin",
    ])
    .await;
    let gateway = Cluster::gateway(&scheduler, &[]).await;
    let client = reqwest::Client::new();
    until_schedulable(&client, &scheduler.url(0), 2).await;
    let base = gateway.url(0);

    let busy = join_all((0..40).map(|i| send(&client, &base, i, i.is_multiple_of(2), 8))).await;
    let text = metrics_text(&client, &gateway.url(0)).await;
    let retried_429 = sum_of(
        &text,
        "request_retry_total{model=\"qwen3-0.6b\",status_code=\"429\"}",
    );
    let s = summarize("one engine of two answers 429", &busy, retried_429, 0.0);
    assert!(s.failed.is_empty(), "{}", describe(&s.failed));
    assert!(fake.refused.load(Ordering::SeqCst) >= 1);
    assert!(retried_429 >= 1.0, "{text}");
    assert!(
        !text.contains("gateway_circuit_breaker_state{"),
        "a 429 is capacity, not failure: no breaker opens\n{text}"
    );

    fake.busy.store(false, Ordering::SeqCst);
    let after = join_all((40..60).map(|i| send(&client, &base, i, i.is_multiple_of(2), 8))).await;
    assert!(after.iter().all(|o| o.ok), "{after:#?}");
    assert!(
        fake.served.load(Ordering::SeqCst) >= 5,
        "traffic returns once it stops refusing"
    );
}

/// Closed-loop load from `workers` clients until `stop`, each request's outcome kept.
async fn load_until(
    client: &reqwest::Client,
    base: &str,
    workers: usize,
    stop: &AtomicBool,
) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let worker = || async {
        let mut outcomes = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let i = next.fetch_add(1, Ordering::SeqCst);
            outcomes.push(send(client, base, i, i.is_multiple_of(2), 16).await);
        }
        outcomes
    };
    join_all((0..workers).map(|_| worker()))
        .await
        .into_iter()
        .flatten()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_serves_through_a_scheduler_restart_under_load() {
    let _serial = SERIAL.lock().await;
    let engines = [
        Process::engine(1, REAL_TIME).await,
        Process::engine(1, REAL_TIME).await,
    ];
    let list = format!("{},{}", engines[0].url(0), engines[1].url(0));
    let port = free_ports(1);
    let mut scheduler = Process::scheduler_on(port, &["--instances", &list]).await;
    let gateway = Cluster::gateway(&scheduler, &[]).await;
    let client = reqwest::Client::new();
    until_schedulable(&client, &scheduler.url(0), 2).await;
    let scheduled = |text: &str| metric_value(text, "scheduler_scheduling_total");

    let stop = AtomicBool::new(false);
    let base = gateway.url(0);
    let load = load_until(&client, &base, 6, &stop);
    let faults = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        scheduler.kill();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let restarted = Process::scheduler_on(port, &["--instances", &list]).await;
        until_schedulable(&client, &restarted.url(0), 2).await;
        let mut back = false;
        for _ in 0..200 {
            if scheduled(&metrics_text(&client, &restarted.url(0)).await) >= 5.0 {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.store(true, Ordering::SeqCst);
        (restarted, back)
    };
    let (outcomes, (restarted, back)) = tokio::join!(load, faults);
    let text = metrics_text(&client, &gateway.url(0)).await;
    let s = summarize(
        "the scheduler killed and restarted",
        &outcomes,
        sum_of(&text, "request_retry_total{"),
        0.0,
    );
    assert!(s.failed.is_empty(), "{}", describe(&s.failed));
    assert!(s.sent >= 20, "load ran throughout: {}", s.sent);
    assert!(back, "the gateway returned to scheduled placement");
    drop(restarted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateway_has_its_requests_reclaimed_by_the_scheduler() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&[REAL_TIME; 2], &["--gateway-timeout", "2"], &[]).await;
    let scheduler_metric = |name: &'static str| {
        let (client, url) = (c.client.clone(), c.scheduler.url(0));
        async move { metric_value(&metrics_text(&client, &url).await, name) }
    };
    let mut streams = Vec::new();
    for i in 0..20 {
        let body = json!({"model": MODEL, "prompt": format!("long {i}"), "max_tokens": 20000,
            "ignore_eos": true, "stream": true});
        let response = c
            .client
            .post(format!("{}/v1/completions", c.gateway.url(0)))
            .json(&body)
            .send()
            .await
            .unwrap();
        let mut body = response.bytes_stream();
        futures::StreamExt::next(&mut body).await.unwrap().unwrap();
        streams.push(body);
    }
    let mut tracked = 0.0;
    for _ in 0..100 {
        tracked = scheduler_metric("scheduler_tracked_requests").await;
        if tracked == 20.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(tracked, 20.0, "the scheduler tracks the gateway's requests");

    c.gateway.kill();
    let killed = Instant::now();
    let mut reclaimed = 0.0;
    while killed.elapsed() < Duration::from_secs(15) {
        reclaimed = scheduler_metric("scheduler_reclaimed_requests_total").await;
        if reclaimed == 20.0 && scheduler_metric("scheduler_tracked_requests").await == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "RELIABILITY the gateway killed with 20 streams: reclaimed {reclaimed} after {:.1} s",
        killed.elapsed().as_secs_f64()
    );
    assert_eq!(reclaimed, 20.0);
    assert_eq!(scheduler_metric("scheduler_tracked_requests").await, 0.0);
    for e in 0..2 {
        let mut freed = false;
        for _ in 0..100 {
            if c.running(e).await == 0.0 {
                freed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(freed, "engine {e} dropped the dead gateway's requests");
    }
    drop(streams);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_restarted_on_its_address_is_readmitted_after_its_first_status() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&[REAL_TIME; 2], &[], &[]).await;
    for i in 0..10 {
        assert!(c.send(i, false, 4).await.ok);
    }
    let port = c.engines[0].port;
    let url = c.engines[0].url(0);
    c.engines[0].kill();
    c.until_instance(0, "the killed engine unschedulable", |v| {
        v["schedulable"] == false
    })
    .await;
    c.engines[0] = Process::engine_on(port, 1, REAL_TIME).await;
    c.until_instance(0, "the restarted engine schedulable", |v| {
        v["schedulable"] == true
    })
    .await;
    let view = c.instance(0).await;
    assert!(view["status"].is_object(), "{view}");
    let mut returned = false;
    for i in 0..100 {
        let o = c.send(100 + i, i.is_multiple_of(2), 4).await;
        assert!(o.ok, "{o:?}");
        if o.instance == url {
            returned = true;
            break;
        }
    }
    assert!(returned, "requests reach the restarted engine");
}
