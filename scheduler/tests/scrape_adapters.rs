//! Each engine's `/metrics` page turned into an engine status.

use switchyard_scheduler::cms::EngineKind;
use switchyard_scheduler::scrape::{status_from_metrics, ScrapeMemory};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/metrics/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn vllm() {
    let s = status_from_metrics(
        EngineKind::Vllm,
        &fixture("vllm.txt"),
        64,
        &mut ScrapeMemory::default(),
    )
    .unwrap();
    assert_eq!((s.num_running, s.num_waiting), (12, 3));
    assert_eq!(s.block_size, 16, "from cache_config_info");
    assert_eq!(s.total_kv_tokens, 28_000 * 16);
    assert_eq!(s.used_kv_tokens, 196_000);
}

#[test]
fn sglang() {
    let s = status_from_metrics(
        EngineKind::Sglang,
        &fixture("sglang.txt"),
        16,
        &mut ScrapeMemory::default(),
    )
    .unwrap();
    assert_eq!((s.num_running, s.num_waiting), (7, 2));
    assert_eq!((s.used_kv_tokens, s.total_kv_tokens), (90_000, 360_000));
}

#[test]
fn fastdeploy() {
    let s = status_from_metrics(
        EngineKind::FastDeploy,
        &fixture("fastdeploy.txt"),
        64,
        &mut ScrapeMemory::default(),
    )
    .unwrap();
    assert_eq!((s.num_running, s.num_waiting), (20, 5));
    assert_eq!((s.used_kv_tokens, s.total_kv_tokens), (128_000, 256_000));
}

#[test]
fn mindie() {
    let s = status_from_metrics(
        EngineKind::MindIe,
        &fixture("mindie.txt"),
        128,
        &mut ScrapeMemory::default(),
    )
    .unwrap();
    assert_eq!((s.num_running, s.num_waiting, s.num_swapped), (30, 9, 1));
    assert!((s.used_kv_tokens as f64 / s.total_kv_tokens as f64 - 0.8).abs() < 1e-9);
}

#[test]
fn two_scrapes_make_a_decode_step_sample() {
    let page = |count: u32, sum: f64| {
        format!(
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 8\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.5\n# TYPE vllm:inter_token_latency_seconds histogram\nvllm:inter_token_latency_seconds_bucket{{le=\"+Inf\"}} {count}\nvllm:inter_token_latency_seconds_sum {sum}\nvllm:inter_token_latency_seconds_count {count}\n"
        )
    };
    let mut memory = ScrapeMemory::default();
    let first = status_from_metrics(EngineKind::Vllm, &page(100, 2.0), 16, &mut memory).unwrap();
    assert!(first.steps.is_empty(), "one scrape has no interval");
    let second = status_from_metrics(EngineKind::Vllm, &page(180, 3.6), 16, &mut memory).unwrap();
    assert_eq!(second.steps.len(), 1);
    let step = second.steps[0];
    assert_eq!(step.decode_batch, 8);
    assert!(
        (step.step_seconds - 0.02).abs() < 1e-9,
        "{}",
        step.step_seconds
    );
}
