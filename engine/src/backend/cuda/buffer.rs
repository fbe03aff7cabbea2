//! Device memory the backend owns for its whole life, with its address kept at hand for kernel
//! and cuBLAS arguments (event tracking is off: one stream per instance orders all the work).

use super::launch::Ptr;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DeviceRepr, DriverError, ValidAsZeroBits};
use std::sync::Arc;

/// A device array of `T`.
#[derive(Debug)]
pub struct Buffer<T> {
    slice: CudaSlice<T>,
    ptr: Ptr,
}

impl<T: DeviceRepr> Buffer<T> {
    fn wrap(stream: &Arc<CudaStream>, slice: CudaSlice<T>) -> Self {
        let ptr = slice.device_ptr(stream).0;
        Buffer { slice, ptr }
    }

    /// `len` zeroed elements (at least one, so that the address is real).
    pub fn zeros(stream: &Arc<CudaStream>, len: usize) -> Result<Self, DriverError>
    where
        T: ValidAsZeroBits,
    {
        Ok(Self::wrap(stream, stream.alloc_zeros(len.max(1))?))
    }

    /// A copy of `data`.
    pub fn from_host(stream: &Arc<CudaStream>, data: &[T]) -> Result<Self, DriverError>
    where
        T: ValidAsZeroBits,
    {
        if data.is_empty() {
            return Self::zeros(stream, 1);
        }
        Ok(Self::wrap(stream, stream.clone_htod(data)?))
    }

    /// The address of the first element.
    pub fn ptr(&self) -> Ptr {
        self.ptr
    }

    /// Elements held.
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    /// Copies `data` to the start of the buffer (queued on `stream`).
    pub fn write(&mut self, stream: &Arc<CudaStream>, data: &[T]) -> Result<(), DriverError> {
        assert!(
            data.len() <= self.len(),
            "a step's inputs exceed their buffer"
        );
        if data.is_empty() {
            return Ok(());
        }
        let mut prefix = self.slice.slice_mut(..data.len());
        stream.memcpy_htod(data, &mut prefix)
    }

    /// The first `len` elements, copied to the host (waits for the stream).
    pub fn read(&self, stream: &Arc<CudaStream>, len: usize) -> Result<Vec<T>, DriverError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        stream.clone_dtoh(&self.slice.slice(..len))
    }
}
