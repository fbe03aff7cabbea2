//! Where each token of a step sits, as the flat integer arrays the kernels read: token ids,
//! positions, KV cache slots, block tables, prefill tiles, decode queries and the rows that need
//! logits. Built on the host, uploaded once per step; pure, so it is tested without a GPU.

use crate::backend::ModelBatch;
use crate::sampling::NextToken;

/// Queries per prefill tile (`PREFILL_QUERIES` in `attention.cu`).
pub const PREFILL_QUERIES: usize = 16;

/// Context positions a decode partition covers: the sizes steps are captured as CUDA graphs for,
/// smallest first.
pub const DECODE_PARTITIONS: [usize; 3] = [64, 128, 256];

/// Decode attention blocks (query x head x partition) a step should launch to keep the GPU busy:
/// about four a multiprocessor on an H100's 132. Fewer, and each block's serial walk over its
/// partition sets the kernel's time.
pub const DECODE_BLOCKS_TO_FILL: usize = 512;

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
    /// For each sampling row, whether every score must go back to the host.
    pub sample_scores: Vec<bool>,
    /// How each sampling row picks its token on the GPU.
    pub draws: DrawArrays,
}

/// Per sampling row draw parameters (argmax rows: temperature 0), and the score adjustments.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DrawArrays {
    /// Temperature.
    pub temperature: Vec<f32>,
    /// Top-k (0: all).
    pub top_k: Vec<i32>,
    /// Top-p.
    pub top_p: Vec<f32>,
    /// Min-p.
    pub min_p: Vec<f32>,
    /// The draw's uniform number.
    pub uniform: Vec<f32>,
    /// Repetition penalty.
    pub repetition: Vec<f32>,
    /// Presence penalty.
    pub presence: Vec<f32>,
    /// Frequency penalty.
    pub frequency: Vec<f32>,
    /// `ADJUST_FIELDS` ints an entry: row, token, times generated, in prompt, bias bits.
    pub adjustments: Vec<i32>,
}

/// Ints per adjustment entry (`ADJUST_FIELDS` in `sampling.cu`).
pub const ADJUST_FIELDS: usize = 5;

impl DrawArrays {
    fn push(&mut self, next: &NextToken) {
        let row = self.temperature.len() as i32;
        let NextToken::Draw(draw) = next else {
            self.temperature.push(0.0);
            self.top_k.push(0);
            self.top_p.push(1.0);
            self.min_p.push(0.0);
            self.uniform.push(0.0);
            self.repetition.push(1.0);
            self.presence.push(0.0);
            self.frequency.push(0.0);
            return;
        };
        self.temperature.push(draw.temperature);
        self.top_k.push(draw.top_k.min(i32::MAX as u32) as i32);
        self.top_p.push(draw.top_p);
        self.min_p.push(draw.min_p);
        self.uniform.push(draw.uniform as f32);
        self.repetition.push(draw.repetition_penalty);
        self.presence.push(draw.presence_penalty);
        self.frequency.push(draw.frequency_penalty);
        for a in &draw.adjustments {
            self.adjustments.extend_from_slice(&[
                row,
                a.token as i32,
                a.generated as i32,
                a.in_prompt as i32,
                a.bias.to_bits() as i32,
            ]);
        }
    }

    /// Adjustment entries.
    pub fn num_adjustments(&self) -> usize {
        self.adjustments.len() / ADJUST_FIELDS
    }
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
                layout
                    .sample_scores
                    .push(matches!(seq.next, NextToken::Scores));
                layout.draws.push(&seq.next);
            }
        }
        layout
    }

    /// How the decode kernel splits the longest context over `num_heads` query heads:
    /// (partitions, positions in each). The largest of [`DECODE_PARTITIONS`] that launches
    /// [`DECODE_BLOCKS_TO_FILL`] blocks within [`MAX_DECODE_PARTITIONS`]; else the smallest that
    /// stays within them (a short context at a small batch); else partitions grow past the
    /// standard sizes (a context over 32 x 256 positions).
    pub fn decode_split(&self, num_heads: usize) -> (usize, usize) {
        let context = self.decode_max_context.max(1);
        let queries = self.decode_tokens.len().max(1);
        let fitting = DECODE_PARTITIONS
            .iter()
            .map(|&size| (context.div_ceil(size), size))
            .filter(|&(partitions, _)| partitions <= MAX_DECODE_PARTITIONS);
        let filling = fitting
            .clone()
            .rev()
            .find(|&(partitions, _)| queries * num_heads * partitions >= DECODE_BLOCKS_TO_FILL);
        filling.or(fitting.clone().next()).unwrap_or((
            MAX_DECODE_PARTITIONS,
            context.div_ceil(MAX_DECODE_PARTITIONS),
        ))
    }

    /// The shape a CUDA graph of this step would be captured for: (tokens, partitions, partition
    /// size) of a step of decode tokens only, every one sampling, split into partitions of a
    /// standard size. `None` for any other step.
    pub fn decode_graph_key(&self, num_heads: usize) -> Option<(usize, usize, usize)> {
        let n = self.tokens.len();
        let (partitions, size) = self.decode_split(num_heads);
        (self.tile_tokens.is_empty()
            && self.decode_tokens.len() == n
            && self.sample_rows.len() == n
            && DECODE_PARTITIONS.contains(&size))
        .then_some((n, partitions, size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BatchSeq;
    use crate::sampling::{draw_uniform, SamplingParams};

    fn seq(id: u64, tokens: Vec<u32>, start: usize, blocks: Vec<u32>, sample: bool) -> BatchSeq {
        BatchSeq {
            seq: id,
            tokens,
            start,
            block_table: blocks,
            sample,
            fingerprint: 0,
            next: if id.is_multiple_of(2) {
                NextToken::Argmax
            } else {
                NextToken::Scores
            },
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
            ..Default::default()
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
        assert_eq!(layout.sample_scores, vec![false, false]);
        assert_eq!(layout.draws.temperature, vec![0.0, 0.0]);
        assert_eq!(layout.decode_split(32), (1, 64));
        assert_eq!(layout.decode_graph_key(32), None);
    }

    #[test]
    fn long_decode_contexts_split_into_partitions() {
        let blocks: Vec<u32> = (0..100).collect();
        let batch = ModelBatch {
            seqs: vec![seq(1, vec![1], 1500, blocks, true)],
            ..Default::default()
        };
        let layout = StepLayout::new(&batch, 16, 100);
        assert_eq!(layout.decode_max_context, 1501);
        // One query of 32 heads: the smallest partitions that fit, for the most blocks.
        assert_eq!(layout.decode_split(32), (24, 64));
        assert_eq!(layout.decode_graph_key(32), Some((1, 24, 64)));
        assert_eq!(layout.sample_scores, vec![true]);
    }

    #[test]
    fn large_batches_keep_the_largest_partitions_that_fill_the_gpu() {
        // `n` queries decoding position 575.
        let decoding = |n: u64| {
            let seqs = (0..n)
                .map(|i| seq(i, vec![1], 575, (0..36).collect(), true))
                .collect();
            let batch = ModelBatch {
                seqs,
                ..Default::default()
            };
            StepLayout::new(&batch, 16, 36)
        };
        assert_eq!(decoding(64).decode_split(16), (3, 256));
        assert_eq!(decoding(64).decode_graph_key(16), Some((64, 3, 256)));
        // Four queries of 32 heads fill it only with partitions of 128 positions.
        assert_eq!(decoding(4).decode_split(32), (5, 128));
    }

    #[test]
    fn draws_carry_their_parameters_and_adjustments_by_row() {
        let params = SamplingParams {
            temperature: 0.7,
            top_k: 40,
            seed: 3,
            logit_bias: vec![(6, 1.5)],
            ..Default::default()
        };
        let mut drawing = seq(1, vec![4], 2, vec![0], true);
        drawing.next = NextToken::for_draw(&params, &[1, 2], &[4], 1);
        let batch = ModelBatch {
            seqs: vec![seq(0, vec![9], 0, vec![1], true), drawing],
            ..Default::default()
        };
        let layout = StepLayout::new(&batch, 16, 1);
        assert_eq!(layout.draws.temperature, vec![0.0, 0.7]);
        assert_eq!(layout.draws.top_k, vec![0, 40]);
        assert_eq!(layout.draws.uniform[1], draw_uniform(3, 1) as f32);
        assert_eq!(layout.draws.num_adjustments(), 1);
        assert_eq!(
            layout.draws.adjustments,
            vec![1, 6, 0, 0, 1.5f32.to_bits() as i32]
        );
    }

    #[test]
    fn very_long_contexts_use_at_most_the_workspace_partitions() {
        let blocks: Vec<u32> = (0..2000).collect();
        let batch = ModelBatch {
            seqs: vec![seq(1, vec![1], 31_999, blocks, true)],
            ..Default::default()
        };
        let (partitions, size) = StepLayout::new(&batch, 16, 2000).decode_split(32);
        assert_eq!(partitions, MAX_DECODE_PARTITIONS);
        assert!(partitions * size >= 32_000);
        assert_eq!(StepLayout::new(&batch, 16, 2000).decode_graph_key(32), None);
    }
}
