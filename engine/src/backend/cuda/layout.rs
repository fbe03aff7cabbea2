//! Where each token of a step sits, as the flat integer arrays the kernels read: token ids,
//! positions, KV cache slots, block tables, prefill tiles, decode queries and the rows that need
//! logits. Built on the host, uploaded once per step; pure, so it is tested without a GPU.

use crate::backend::ModelBatch;

/// Queries per prefill tile (`PREFILL_QUERIES` in `attention.cu`).
pub const PREFILL_QUERIES: usize = 16;

/// Context positions one decode partition covers at least.
pub const DECODE_PARTITION: usize = 512;

/// Most partitions a decode query's context is split into (sizes the kernel's workspace).
pub const MAX_DECODE_PARTITIONS: usize = 32;

/// The step's arrays.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepLayout {
    /// Token ids, in batch order.
    pub tokens: Vec<u32>,
    /// Position of each token in its sequence.
    pub positions: Vec<i32>,
    /// KV cache slot of each token (block * block_size + offset).
    pub slots: Vec<i64>,
    /// Each sequence's block table, `max_blocks` entries a row (unused entries 0).
    pub block_tables: Vec<i32>,
    /// First token of each prefill tile.
    pub tile_tokens: Vec<i32>,
    /// Tokens in each prefill tile.
    pub tile_lengths: Vec<i32>,
    /// Sequence (block-table row) of each prefill tile.
    pub tile_seqs: Vec<i32>,
    /// Token of each decode query (sequences with one token in the step).
    pub decode_tokens: Vec<i32>,
    /// Sequence (block-table row) of each decode query.
    pub decode_seqs: Vec<i32>,
    /// Longest context among the decode queries.
    pub decode_max_context: usize,
    /// Last token of each sequence that samples, in batch order.
    pub sample_rows: Vec<i32>,
    /// For each sampling row, whether only its most likely token is needed.
    pub sample_argmax_only: Vec<bool>,
}

impl StepLayout {
    /// Lays `batch` out for a cache of `block_size`-token blocks, `max_blocks` a sequence.
    pub fn new(batch: &ModelBatch, block_size: usize, max_blocks: usize) -> Self {
        let mut layout = StepLayout {
            block_tables: vec![0; batch.seqs.len() * max_blocks],
            ..Default::default()
        };
        for (row, seq) in batch.seqs.iter().enumerate() {
            let first = layout.tokens.len();
            for (i, &token) in seq.tokens.iter().enumerate() {
                let position = seq.start + i;
                let block = seq.block_table[position / block_size] as usize;
                layout.tokens.push(token);
                layout.positions.push(position as i32);
                layout
                    .slots
                    .push((block * block_size + position % block_size) as i64);
            }
            for (j, &block) in seq.block_table.iter().take(max_blocks).enumerate() {
                layout.block_tables[row * max_blocks + j] = block as i32;
            }
            if seq.tokens.len() == 1 {
                layout.decode_tokens.push(first as i32);
                layout.decode_seqs.push(row as i32);
                layout.decode_max_context = layout.decode_max_context.max(seq.start + 1);
            } else {
                let mut tile = first;
                let end = first + seq.tokens.len();
                while tile < end {
                    let length = PREFILL_QUERIES.min(end - tile);
                    layout.tile_tokens.push(tile as i32);
                    layout.tile_lengths.push(length as i32);
                    layout.tile_seqs.push(row as i32);
                    tile += length;
                }
            }
            if seq.sample && !seq.tokens.is_empty() {
                layout
                    .sample_rows
                    .push((first + seq.tokens.len() - 1) as i32);
                layout.sample_argmax_only.push(seq.argmax_only);
            }
        }
        layout
    }

    /// How the decode kernel splits the longest context: (partitions, positions in each).
    pub fn decode_split(&self) -> (usize, usize) {
        let context = self.decode_max_context.max(1);
        let partitions = context
            .div_ceil(DECODE_PARTITION)
            .clamp(1, MAX_DECODE_PARTITIONS);
        (partitions, context.div_ceil(partitions))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BatchSeq;

    fn seq(id: u64, tokens: Vec<u32>, start: usize, blocks: Vec<u32>, sample: bool) -> BatchSeq {
        BatchSeq {
            seq: id,
            tokens,
            start,
            block_table: blocks,
            sample,
            fingerprint: 0,
            argmax_only: id.is_multiple_of(2),
        }
    }

    #[test]
    fn decodes_and_prefill_chunks_get_their_slots_tiles_and_sample_rows() {
        let batch = ModelBatch {
            seqs: vec![
                seq(0, vec![7], 5, vec![3, 9], true),
                seq(1, (0..20).collect(), 0, vec![4, 1, 5, 7, 8], false),
                seq(2, vec![8, 9, 10], 4, vec![2, 6], true),
            ],
        };
        let layout = StepLayout::new(&batch, 4, 5);
        assert_eq!(layout.tokens.len(), 24);
        assert_eq!(layout.positions[0], 5);
        assert_eq!(layout.slots[0], 9 * 4 + 1);
        assert_eq!(layout.slots[1..6], [16, 17, 18, 19, 4]);
        assert_eq!(layout.slots[17..21], [32, 33, 34, 35]);
        assert_eq!(layout.slots[21..24], [24, 25, 26]);
        assert_eq!(
            layout.block_tables,
            vec![3, 9, 0, 0, 0, 4, 1, 5, 7, 8, 2, 6, 0, 0, 0]
        );
        assert_eq!(layout.decode_tokens, vec![0]);
        assert_eq!(layout.decode_seqs, vec![0]);
        assert_eq!(layout.decode_max_context, 6);
        assert_eq!(layout.tile_tokens, vec![1, 17, 21]);
        assert_eq!(layout.tile_lengths, vec![16, 4, 3]);
        assert_eq!(layout.tile_seqs, vec![1, 1, 2]);
        assert_eq!(layout.sample_rows, vec![0, 23]);
        assert_eq!(layout.sample_argmax_only, vec![true, true]);
        assert_eq!(layout.decode_split(), (1, 6));
    }

    #[test]
    fn long_decode_contexts_split_into_partitions() {
        let blocks: Vec<u32> = (0..100).collect();
        let batch = ModelBatch {
            seqs: vec![seq(1, vec![1], 1500, blocks, true)],
        };
        let layout = StepLayout::new(&batch, 16, 100);
        assert_eq!(layout.decode_max_context, 1501);
        assert_eq!(layout.decode_split(), (3, 501));
        assert_eq!(layout.sample_argmax_only, vec![false]);
    }

    #[test]
    fn very_long_contexts_use_at_most_the_workspace_partitions() {
        let blocks: Vec<u32> = (0..2000).collect();
        let batch = ModelBatch {
            seqs: vec![seq(1, vec![1], 31_999, blocks, true)],
        };
        let (partitions, size) = StepLayout::new(&batch, 16, 2000).decode_split();
        assert_eq!(partitions, MAX_DECODE_PARTITIONS);
        assert!(partitions * size >= 32_000);
    }
}
