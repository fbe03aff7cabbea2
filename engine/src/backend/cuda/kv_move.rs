//! A running request's KV to and from another engine: its blocks of every layer's key and value
//! caches gathered on the GPU into one staging buffer and copied to the host (export), or copied
//! from the host and scattered into the blocks reserved for it (import). The wire order is
//! (layer, key then value, block). The host copy is what a socket sends today; an RDMA transport
//! (NIXL) would read the staging buffer in place instead.

use super::buffer::Buffer;
use super::workspace::KvCache;
use super::CudaBackend;
use crate::backend::KvMoveError;
use crate::kv::BlockId;

impl CudaBackend {
    /// Bytes one block takes in one layer's key (or value) cache.
    fn layer_block_bytes(&self) -> usize {
        KvCache::bytes_per_block(&self.model.config, self.block_size)
            / (2 * self.model.config.num_layers)
    }

    /// The KV of `blocks` as bytes in wire order (waits for the stream).
    pub(super) fn export_blocks(&self, blocks: &[BlockId]) -> Result<Vec<u8>, KvMoveError> {
        let layer_block = self.layer_block_bytes();
        let total = blocks.len() * layer_block * 2 * self.model.config.num_layers;
        if blocks.is_empty() {
            return Ok(Vec::new());
        }
        let device = |e: cudarc::driver::DriverError| KvMoveError::Device(e.to_string());
        self.model.ctx.bind_to_thread().map_err(device)?;
        let ids: Vec<i32> = blocks.iter().map(|&b| b as i32).collect();
        let ids = Buffer::from_host(&self.stream, &ids).map_err(device)?;
        let staged = Buffer::<u8>::zeros(&self.stream, total).map_err(device)?;
        for (i, cache) in self.caches().enumerate() {
            let at = staged.ptr() + (i * blocks.len() * layer_block) as u64;
            self.model
                .kernels
                .kv_blocks(
                    &self.stream,
                    (cache, ids.ptr(), at),
                    blocks.len(),
                    layer_block,
                    true,
                )
                .map_err(device)?;
        }
        staged.read(&self.stream, total).map_err(device)
    }

    /// Writes `bytes` in wire order into `blocks` (waits for the stream); refused, with nothing
    /// written, when their size does not match.
    pub(super) fn import_blocks(
        &mut self,
        blocks: &[BlockId],
        bytes: &[u8],
    ) -> Result<(), KvMoveError> {
        let layer_block = self.layer_block_bytes();
        let expected = blocks.len() * layer_block * 2 * self.model.config.num_layers;
        if bytes.len() != expected {
            return Err(KvMoveError::SizeMismatch {
                expected,
                got: bytes.len(),
            });
        }
        if blocks.is_empty() {
            return Ok(());
        }
        let device = |e: cudarc::driver::DriverError| KvMoveError::Device(e.to_string());
        self.model.ctx.bind_to_thread().map_err(device)?;
        let ids: Vec<i32> = blocks.iter().map(|&b| b as i32).collect();
        let ids = Buffer::from_host(&self.stream, &ids).map_err(device)?;
        let staged = Buffer::from_host(&self.stream, bytes).map_err(device)?;
        for (i, cache) in self.caches().enumerate() {
            let at = staged.ptr() + (i * blocks.len() * layer_block) as u64;
            self.model
                .kernels
                .kv_blocks(
                    &self.stream,
                    (cache, ids.ptr(), at),
                    blocks.len(),
                    layer_block,
                    false,
                )
                .map_err(device)?;
        }
        self.stream.synchronize().map_err(device)
    }

    /// Every layer's key cache then value cache, in wire order.
    fn caches(&self) -> impl Iterator<Item = u64> + '_ {
        self.kv
            .keys
            .iter()
            .zip(&self.kv.values)
            .flat_map(|(k, v)| [k.ptr(), v.ptr()])
    }
}
