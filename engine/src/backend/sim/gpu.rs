//! Accelerator profiles for the step-time model: memory, bandwidth and bf16 throughput.

/// One accelerator's published limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuProfile {
    /// Short name (`h100`).
    pub name: &'static str,
    /// Device memory in bytes.
    pub memory_bytes: f64,
    /// Peak memory bandwidth in bytes per second.
    pub bandwidth: f64,
    /// Peak dense bf16 tensor throughput in FLOP per second.
    pub bf16_flops: f64,
    /// Peak host link bandwidth in bytes per second, each way (PCIe 5.0 x16 on H100 and H200,
    /// 4.0 x16 on the others).
    pub host_link: f64,
}

const GB: f64 = 1e9;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const TFLOPS: f64 = 1e12;

/// Every known profile.
pub const GPU_PROFILES: [GpuProfile; 5] = [
    GpuProfile {
        name: "h100",
        memory_bytes: 80.0 * GIB,
        bandwidth: 3350.0 * GB,
        bf16_flops: 989.0 * TFLOPS,
        host_link: 64.0 * GB,
    },
    GpuProfile {
        name: "h200",
        memory_bytes: 141.0 * GB,
        bandwidth: 4800.0 * GB,
        bf16_flops: 989.0 * TFLOPS,
        host_link: 64.0 * GB,
    },
    GpuProfile {
        name: "a100",
        memory_bytes: 80.0 * GIB,
        bandwidth: 2039.0 * GB,
        bf16_flops: 312.0 * TFLOPS,
        host_link: 32.0 * GB,
    },
    GpuProfile {
        name: "l40s",
        memory_bytes: 48.0 * GIB,
        bandwidth: 864.0 * GB,
        bf16_flops: 362.0 * TFLOPS,
        host_link: 32.0 * GB,
    },
    GpuProfile {
        name: "a10",
        memory_bytes: 24.0 * GIB,
        bandwidth: 600.0 * GB,
        bf16_flops: 125.0 * TFLOPS,
        host_link: 32.0 * GB,
    },
];

impl GpuProfile {
    /// The profile called `name` (case-insensitive).
    pub fn by_name(name: &str) -> Option<GpuProfile> {
        GPU_PROFILES
            .iter()
            .find(|g| g.name.eq_ignore_ascii_case(name))
            .copied()
    }

    /// Names of every known profile, for error messages.
    pub fn names() -> Vec<&'static str> {
        GPU_PROFILES.iter().map(|g| g.name).collect()
    }
}
