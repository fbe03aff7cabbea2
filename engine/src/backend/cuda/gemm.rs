//! Matrix products on tensor cores through cuBLAS: bf16 inputs, f32 accumulation.

use super::launch::Ptr;
use cudarc::cublas::result::{gemm_ex, CublasError};
use cudarc::cublas::{sys, CudaBlas};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};
use std::sync::Arc;

/// Bytes of the workspace each handle gets: what cuBLAS recommends for Hopper (4 MiB for older
/// GPUs, which larger does not hurt). Set explicitly, as PyTorch does, so that a product captured
/// into a CUDA graph has the same workspace (and algorithms) as one run eagerly, and repeated
/// captures do not each allocate their own.
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// A cuBLAS handle bound to one stream, with its workspace.
#[derive(Debug)]
pub struct Blas {
    blas: CudaBlas,
    _workspace: CudaSlice<u8>,
}

/// The element type a product writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// bf16, like the activations.
    Bf16,
    /// f32, for logits.
    F32,
}

impl Blas {
    /// A handle that queues its work on `stream`.
    pub fn new(stream: Arc<CudaStream>) -> Result<Self, String> {
        let blas = CudaBlas::new(stream.clone()).map_err(|e| format!("{e:?}"))?;
        let mut workspace = stream
            .alloc_zeros::<u8>(WORKSPACE_BYTES)
            .map_err(|e| format!("cannot allocate its workspace: {e}"))?;
        let (address, _) = workspace.device_ptr_mut(&stream);
        // Safety: the workspace lives as long as the handle (both are fields of `Blas`).
        unsafe { sys::cublasSetWorkspace_v2(*blas.handle(), address as *mut _, WORKSPACE_BYTES) }
            .result()
            .map_err(|e| format!("cannot set its workspace: {e:?}"))?;
        Ok(Blas {
            blas,
            _workspace: workspace,
        })
    }

    /// `y[rows, out_dim] = x[rows, in_dim] · w[out_dim, in_dim]ᵀ`, every matrix row-major as the
    /// checkpoint stores `w`. In cuBLAS's column-major terms that is `yᵀ = op(w) · xᵀ` with `w`
    /// transposed.
    ///
    /// # Safety
    /// `x`, `w` and `y` must address buffers of the stated shapes on the handle's device.
    pub unsafe fn linear(
        &self,
        x: Ptr,
        w: Ptr,
        y: Ptr,
        (rows, out_dim, in_dim): (usize, usize, usize),
        output: Output,
    ) -> Result<(), CublasError> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let c_type = match output {
            Output::Bf16 => sys::cudaDataType_t::CUDA_R_16BF,
            Output::F32 => sys::cudaDataType_t::CUDA_R_32F,
        };
        gemm_ex(
            *self.blas.handle(),
            sys::cublasOperation_t::CUBLAS_OP_T,
            sys::cublasOperation_t::CUBLAS_OP_N,
            out_dim as i32,
            rows as i32,
            in_dim as i32,
            (&alpha as *const f32).cast(),
            w as *const _,
            sys::cudaDataType_t::CUDA_R_16BF,
            in_dim as i32,
            x as *const _,
            sys::cudaDataType_t::CUDA_R_16BF,
            in_dim as i32,
            (&beta as *const f32).cast(),
            y as *mut _,
            c_type,
            out_dim as i32,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
}
