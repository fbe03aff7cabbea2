//! Each engine's `/metrics` page turned into an engine status.

use switchyard_scheduler::cms::EngineKind;
use switchyard_scheduler::scrape::status_from_metrics;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/metrics/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn vllm() {
    let s = status_from_metrics(EngineKind::Vllm, &fixture("vllm.txt"), 64).unwrap();
    assert_eq!((s.num_running, s.num_waiting), (12, 3));
    assert_eq!(s.block_size, 16, "from cache_config_info");
    assert_eq!(s.total_kv_tokens, 28_000 * 16);
    assert_eq!(s.used_kv_tokens, 196_000);
}

#[test]
fn sglang() {
    let s = status_from_metrics(EngineKind::Sglang, &fixture("sglang.txt"), 16).unwrap();
    assert_eq!((s.num_running, s.num_waiting), (7, 2));
    assert_eq!((s.used_kv_tokens, s.total_kv_tokens), (90_000, 360_000));
}

#[test]
fn fastdeploy() {
    let s = status_from_metrics(EngineKind::FastDeploy, &fixture("fastdeploy.txt"), 64).unwrap();
    assert_eq!((s.num_running, s.num_waiting), (20, 5));
    assert_eq!((s.used_kv_tokens, s.total_kv_tokens), (128_000, 256_000));
}

#[test]
fn mindie() {
    let s = status_from_metrics(EngineKind::MindIe, &fixture("mindie.txt"), 128).unwrap();
    assert_eq!((s.num_running, s.num_waiting, s.num_swapped), (30, 9, 1));
    assert!((s.used_kv_tokens as f64 / s.total_kv_tokens as f64 - 0.8).abs() < 1e-9);
}
