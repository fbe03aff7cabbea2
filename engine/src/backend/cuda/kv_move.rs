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

/// A device failure while moving KV.
fn device(e: cudarc::driver::DriverError) -> KvMoveError {
    KvMoveError::Device(e.to_string())
}

impl CudaBackend {
    /// Bytes one block takes in one layer's key (or value) cache.
    fn layer_block_bytes(&self) -> usize {
        KvCache::bytes_per_block(&self.model.config, self.block_size)
            / (2 * self.model.config.num_layers)
    }

    /// Bytes `count` blocks take on the wire: every layer's key and value block.
    fn wire_bytes(&self, count: usize) -> usize {
        count * KvCache::bytes_per_block(&self.model.config, self.block_size)
    }

    /// The KV of `blocks` as bytes in wire order (waits for the stream).
    pub(super) fn export_blocks(&self, blocks: &[BlockId]) -> Result<Vec<u8>, KvMoveError> {
        if blocks.is_empty() {
            return Ok(Vec::new());
        }
        let total = self.wire_bytes(blocks.len());
        self.model.ctx.bind_to_thread().map_err(device)?;
        let staged = Buffer::<u8>::zeros(&self.stream, total).map_err(device)?;
        self.copy_blocks(blocks, staged.ptr(), true)?;
        staged.read(&self.stream, total).map_err(device)
    }

    /// Writes `bytes` in wire order into `blocks` (waits for the stream); refused, with nothing
    /// written, when their size does not match.
    pub(super) fn import_blocks(
        &mut self,
        blocks: &[BlockId],
        bytes: &[u8],
    ) -> Result<(), KvMoveError> {
        let expected = self.wire_bytes(blocks.len());
        if bytes.len() != expected {
            return Err(KvMoveError::SizeMismatch {
                expected,
                got: bytes.len(),
            });
        }
        if blocks.is_empty() {
            return Ok(());
        }
        self.model.ctx.bind_to_thread().map_err(device)?;
        let staged = Buffer::from_host(&self.stream, bytes).map_err(device)?;
        self.copy_blocks(blocks, staged.ptr(), false)?;
        self.stream.synchronize().map_err(device)
    }

    /// Queues the copies of `blocks` of every cache between the caches and the staging buffer at
    /// `staged` (in wire order): gathered into it, or scattered from it.
    fn copy_blocks(
        &self,
        blocks: &[BlockId],
        staged: u64,
        gather: bool,
    ) -> Result<(), KvMoveError> {
        let layer_block = self.layer_block_bytes();
        let ids: Vec<i32> = blocks.iter().map(|&b| b as i32).collect();
        let ids = Buffer::from_host(&self.stream, &ids).map_err(device)?;
        for (i, cache) in self.caches().enumerate() {
            let at = staged + (i * blocks.len() * layer_block) as u64;
            let caches = (cache, ids.ptr(), at);
            self.model
                .kernels
                .kv_blocks(&self.stream, caches, blocks.len(), layer_block, gather)
                .map_err(device)?;
        }
        Ok(())
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
