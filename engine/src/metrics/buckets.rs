//! Histogram bucket sets of the engines whose metric names switchyard speaks.

/// vLLM's time-to-first-token buckets (seconds).
pub const VLLM_TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's inter-token latency buckets (seconds).
pub const VLLM_ITL: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's request latency buckets (seconds).
pub const VLLM_REQUEST_LATENCY: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// vLLM's tokens-per-step buckets.
pub const VLLM_ITERATION_TOKENS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
/// MindIE's time-to-first-token buckets (seconds).
pub const MINDIE_TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// MindIE's time-per-output-token buckets (seconds).
pub const MINDIE_TPOT: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
/// MindIE's end-to-end latency buckets (seconds).
pub const MINDIE_E2E: &[f64] = &[1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0];
/// MindIE's token-count buckets.
pub const MINDIE_TOKENS: &[f64] = &[
    10.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 16000.0, 20000.0, 32000.0,
    50000.0, 64000.0, 128000.0,
];

/// vLLM's TTFT buckets up to one second (FastDeploy's TTFT buckets).
pub fn ttft_up_to_one_second() -> Vec<f64> {
    VLLM_TTFT.iter().copied().filter(|&b| b <= 1.0).collect()
}

/// vLLM's ITL buckets up to one second (FastDeploy's TPOT buckets).
pub fn itl_up_to_one_second() -> Vec<f64> {
    VLLM_ITL.iter().copied().filter(|&b| b <= 1.0).collect()
}

/// 1, 2, 5, 10, 20, 50, ... up to and including `max`.
pub fn one_two_five(max: usize) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 1u64;
    loop {
        for m in [1, 2, 5] {
            let b = decade * m;
            if b > max.max(1) as u64 {
                return out;
            }
            out.push(b as f64);
        }
        decade *= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_two_five_stops_at_max() {
        assert_eq!(one_two_five(60), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(ttft_up_to_one_second().last(), Some(&1.0));
    }
}
