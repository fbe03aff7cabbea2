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
    assert_eq!(s.kv_usage, Some(0.8));
    assert_eq!(
        (s.used_kv_tokens, s.total_kv_tokens),
        (0, 0),
        "MindIE says no capacity: unknown"
    );
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

/// A page captured from a real engine (`tests/fixtures/engine-metrics`, provenance in its
/// README).
fn captured(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/engine-metrics/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn real_pages_are_read_family_by_family() {
    let read = |name: &str, kind: EngineKind| {
        let mut memory = ScrapeMemory::default();
        let status = status_from_metrics(kind, &captured(name), 16, &mut memory)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let skipped: Vec<String> = memory.skipped.iter().map(|s| s.family.clone()).collect();
        (status, skipped)
    };
    // vLLM V0, a page whose last line has no newline: capacity from cache_config_info.
    let (s, skipped) = read("vllm-v0-2024-06-datadog-opt125m.txt", EngineKind::Vllm);
    assert_eq!(s.total_kv_tokens, 7281 * 16);
    assert!(skipped.is_empty(), "{skipped:?}");
    // vLLM V1 on Ascend: old and new names side by side, `*_created` gauge families,
    // summaries, scientific notation, `engine="0"`, 128-token blocks.
    let (s, skipped) = read(
        "vllm-0.10.x-v1-ascend-pymotor-qwen25-05b.txt",
        EngineKind::Vllm,
    );
    assert_eq!((s.block_size, s.total_kv_tokens), (128, 72_474 * 128));
    assert_eq!(s.used_kv_tokens, 128, "1.38e-5 of the cache");
    assert_eq!(s.kv_usage, Some(1.3798051715085968e-05));
    assert!(skipped.is_empty(), "{skipped:?}");
    let (s, skipped) = read("sglang-0.3.x-docs-llama31-8b-idle.txt", EngineKind::Sglang);
    assert_eq!((s.num_running, s.num_waiting), (0, 0));
    assert_eq!(
        (s.kv_usage, s.total_kv_tokens),
        (Some(0.0), 0),
        "an idle page that says no capacity"
    );
    assert!(skipped.is_empty(), "{skipped:?}");
    // MindIE: a TTFT histogram without `_sum` is skipped, and the page still reads.
    let (s, skipped) = read(
        "mindie-motor-coordinator-docs-llama3-8b.txt",
        EngineKind::MindIe,
    );
    assert_eq!(skipped, vec!["time_to_first_token_seconds".to_string()]);
    assert_eq!((s.kv_usage, s.total_kv_tokens), (Some(1.0), 0));
    let (s, skipped) = read(
        "mindie-motor-testdata-single-node-llama65b.txt",
        EngineKind::MindIe,
    );
    assert_eq!((s.kv_usage, s.total_kv_tokens), (Some(0.1), 0));
    assert!(skipped.is_empty(), "{skipped:?}");
}

#[test]
fn fragments_of_real_pages_read_as_far_as_they_go() {
    // Two partial vLLM pages hold every family a status needs.
    let mut memory = ScrapeMemory::default();
    let page = captured("vllm-0.7.x-v0-aibrix-runtime-docs-partial.txt");
    let s = status_from_metrics(EngineKind::Vllm, &page, 16, &mut memory).unwrap();
    assert_eq!(
        (s.num_running, s.num_waiting, s.kv_usage),
        (0, 0, Some(0.0))
    );
    assert!(s.total_kv_tokens > 0, "from cache_config_info");
    let cut: Vec<&str> = memory.skipped.iter().map(|f| f.family.as_str()).collect();
    assert_eq!(cut, ["vllm:iteration_tokens_total"], "cut off mid-family");
    let page = captured("vllm-0.8.x-v1-production-stack-issue318-fragment.txt");
    let s = status_from_metrics(EngineKind::Vllm, &page, 16, &mut ScrapeMemory::default()).unwrap();
    assert_eq!(
        (s.num_running, s.num_waiting, s.kv_usage),
        (0, 0, Some(0.0))
    );
    assert_eq!(
        s.total_kv_tokens, 0,
        "no cache_config_info in the fragment: unknown"
    );
    // The others end before a family a status needs, and say which.
    for (name, kind, missing) in [
        (
            "vllm-0.10.0-v1-production-stack-issue617-fragment.txt",
            EngineKind::Vllm,
            "vllm:num_requests_running",
        ),
        (
            "sglang-dp8-aibrix-issue1614-fragment-a.txt",
            EngineKind::Sglang,
            "sglang:token_usage",
        ),
        (
            "sglang-dp8-aibrix-issue1614-fragment-b.txt",
            EngineKind::Sglang,
            "sglang:token_usage",
        ),
        (
            "mindie-gpustack-issue1785-fragment-head.txt",
            EngineKind::MindIe,
            "num_requests_waiting",
        ),
        (
            "mindie-gpustack-issue1785-fragment-tail.txt",
            EngineKind::MindIe,
            "num_requests_running",
        ),
    ] {
        let e = status_from_metrics(kind, &captured(name), 16, &mut ScrapeMemory::default())
            .unwrap_err();
        assert_eq!(e, format!("{missing} is missing"), "{name}");
    }
}
