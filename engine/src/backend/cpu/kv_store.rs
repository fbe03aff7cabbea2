//! The CPU backend's KV cache: `[block][layer][key|value][slot][kv_dim]` in one f32 buffer.

/// Keys and values of every block, layer and slot.
pub struct KvStore {
    data: Vec<f32>,
    block_size: usize,
    layers: usize,
    kv_dim: usize,
}

impl KvStore {
    /// Zeroed storage for `num_blocks` blocks.
    pub fn new(num_blocks: usize, block_size: usize, layers: usize, kv_dim: usize) -> Self {
        KvStore {
            data: vec![0.0; num_blocks * layers * 2 * block_size * kv_dim],
            block_size,
            layers,
            kv_dim,
        }
    }

    /// Floats of one block (every layer's keys and values, contiguous).
    pub fn block_len(&self) -> usize {
        self.layers * 2 * self.block_size * self.kv_dim
    }

    /// The contents of `block`.
    pub fn block(&self, block: u32) -> &[f32] {
        let len = self.block_len();
        &self.data[block as usize * len..][..len]
    }

    /// The contents of `block`, to overwrite.
    pub fn block_mut(&mut self, block: u32) -> &mut [f32] {
        let len = self.block_len();
        &mut self.data[block as usize * len..][..len]
    }

    fn offset(&self, block_table: &[u32], position: usize, layer: usize, which: usize) -> usize {
        let block = block_table[position / self.block_size] as usize;
        let slot = position % self.block_size;
        (((block * self.layers + layer) * 2 + which) * self.block_size + slot) * self.kv_dim
    }

    /// Stores the key and value of the token at `position`.
    pub fn write(
        &mut self,
        block_table: &[u32],
        position: usize,
        layer: usize,
        key: &[f32],
        value: &[f32],
    ) {
        let k = self.offset(block_table, position, layer, 0);
        self.data[k..k + self.kv_dim].copy_from_slice(key);
        let v = self.offset(block_table, position, layer, 1);
        self.data[v..v + self.kv_dim].copy_from_slice(value);
    }

    /// The key at `position`.
    pub fn key(&self, block_table: &[u32], position: usize, layer: usize) -> &[f32] {
        let k = self.offset(block_table, position, layer, 0);
        &self.data[k..k + self.kv_dim]
    }

    /// The value at `position`.
    pub fn value(&self, block_table: &[u32], position: usize, layer: usize) -> &[f32] {
        let v = self.offset(block_table, position, layer, 1);
        &self.data[v..v + self.kv_dim]
    }
}
