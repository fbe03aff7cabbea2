//! Engines, scheduler and gateway as separate processes: the scheduler hears of every request
//! that ended, and the gateway keeps serving while the scheduler is down (round-robin over the instances it last knew) and goes back to it when it
//! returns.

use serde_json::json;
use std::time::Duration;
use switchyard_tests::{free_ports, metric_value, metrics_text, Process};

async fn complete(client: &reqwest::Client, base: &str) -> u16 {
    client
        .post(format!("{base}/v1/completions"))
        .json(&json!({"model": "qwen3-0.6b", "prompt": "hello", "max_tokens": 3}))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

async fn scheduled_total(client: &reqwest::Client, scheduler: &str) -> f64 {
    metric_value(
        &metrics_text(client, scheduler).await,
        "scheduler_scheduling_total",
    )
}

#[tokio::test]
async fn the_gateway_survives_its_scheduler() {
    let engines = Process::engine(2, &["--sim-time-scale", "1000"]).await;
    let instances = format!("{},{}", engines.url(0), engines.url(1));
    let port = free_ports(1);
    let mut scheduler = Process::scheduler_on(port, &["--instances", &instances]).await;
    let scheduler_url = scheduler.url(0);
    let gateway = Process::gateway(&[
        "--scheduler",
        &scheduler_url,
        "--served-model-name",
        "qwen3-0.6b",
    ])
    .await;
    let base = gateway.url(0);
    let client = reqwest::Client::new();
    let mut ok = false;
    for _ in 0..100 {
        if complete(&client, &base).await == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "the gateway answers through the scheduler");
    // Ended requests are released: each with the next placement request, the last on its own.
    for _ in 0..5 {
        assert_eq!(complete(&client, &base).await, 200);
    }
    let mut tracked = f64::NAN;
    for _ in 0..100 {
        tracked = metric_value(
            &metrics_text(&client, &scheduler_url).await,
            "scheduler_tracked_requests",
        );
        if tracked == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(tracked, 0.0, "every placed request is released");
    // Let the gateway learn the instance list (refreshed every 2 s).
    tokio::time::sleep(Duration::from_millis(2500)).await;

    scheduler.child.kill().unwrap();
    scheduler.child.wait().unwrap();
    for i in 0..10 {
        assert_eq!(
            complete(&client, &base).await,
            200,
            "request {i} while the scheduler is down"
        );
    }

    let scheduler = Process::scheduler_on(port, &["--instances", &instances]).await;
    let mut back = false;
    for _ in 0..100 {
        assert_eq!(complete(&client, &base).await, 200);
        if scheduled_total(&client, &scheduler.url(0)).await > 0.0 {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "placements return to the scheduler");
}

#[tokio::test]
async fn a_gateway_whose_block_size_differs_from_its_schedulers_is_refused_at_start() {
    let scheduler = Process::scheduler(&[
        "--instances",
        "http://127.0.0.1:9",
        "--startup-wait",
        "0",
        "--block-size",
        "32",
    ])
    .await;
    let mut child = std::process::Command::new(switchyard_tests::binary())
        .args(["gateway", "--port", "0", "--scheduler", &scheduler.url(0)])
        .args(["--served-model-name", "m", "--block-size", "16"])
        .env("RUST_BACKTRACE", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut status = None;
    for _ in 0..300 {
        status = child.try_wait().expect("waits");
        if status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let Some(status) = status else {
        child.kill().expect("kills");
        panic!("the gateway started although its block size differs from the scheduler's");
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr)
        .expect("reads");
    assert!(!status.success());
    assert!(
        stderr.contains("--block-size is 16 and the scheduler's is 32"),
        "{stderr}"
    );
}
