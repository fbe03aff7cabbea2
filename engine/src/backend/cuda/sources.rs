//! The backend's CUDA C sources, compiled into the binary and handed to NVRTC at start-up.

/// Definitions every kernel file starts with (bf16 conversions, reductions): NVRTC has no
/// `cuda_bf16.h` of its own, so the backend brings what it needs.
pub const COMMON: &str = include_str!("kernels/common.cuh");

/// One CUDA C file and the kernels it defines.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// File name, for logs and error messages.
    pub name: &'static str,
    /// The file's text (without [`COMMON`]).
    pub text: &'static str,
    /// Names of its `extern "C"` kernels.
    pub kernels: &'static [&'static str],
}

impl KernelSource {
    /// The complete translation unit NVRTC compiles.
    pub fn program(&self) -> String {
        format!("{COMMON}\n{}", self.text)
    }
}

/// Every kernel file of the backend.
pub const SOURCES: &[KernelSource] = &[
    KernelSource {
        name: "elementwise.cu",
        text: include_str!("kernels/elementwise.cu"),
        kernels: &["embed", "add_rms_norm", "silu_mul", "gather_rows"],
    },
    KernelSource {
        name: "qkv.cu",
        text: include_str!("kernels/qkv.cu"),
        kernels: &["qkv_prepare"],
    },
    KernelSource {
        name: "attention.cu",
        text: include_str!("kernels/attention.cu"),
        kernels: &["attention_prefill", "attention_decode", "attention_combine"],
    },
    KernelSource {
        name: "sampling.cu",
        text: include_str!("kernels/sampling.cu"),
        kernels: &["adjust_logits", "sample_rows"],
    },
    KernelSource {
        name: "kv_move.cu",
        text: include_str!("kernels/kv_move.cu"),
        kernels: &["kv_gather", "kv_scatter"],
    },
];
