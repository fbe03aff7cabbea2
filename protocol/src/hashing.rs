//! The block hasher shared by engines, the scheduler's prefix index and the gateway.
//!
//! A prompt is cut into blocks of `block_size` tokens; only full blocks are hashed. Each block's
//! own hash is XXH3-64 (seed 1337) over its token ids as little-endian `u32`; the chained hash of
//! block `i` mixes the chained hash of block `i - 1` with the block's own hash, so equal chained
//! hashes mean equal prefixes. This is the scheme NVIDIA Dynamo and SGLang's gateway use.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Seed of every XXH3-64 hash in switchyard.
pub const HASH_SEED: u64 = 1337;

/// Hash of one block's token ids on their own (`local_i`).
pub fn local_block_hash(tokens: &[u32]) -> u64 {
    // Blocks of up to 64 tokens (every common block size) are laid out on the stack.
    let mut stack = [0u8; 256];
    let mut heap = Vec::new();
    let bytes = match stack.get_mut(..tokens.len() * 4) {
        Some(bytes) => bytes,
        None => {
            heap.resize(tokens.len() * 4, 0);
            &mut heap[..]
        }
    };
    for (chunk, t) in bytes.chunks_exact_mut(4).zip(tokens) {
        chunk.copy_from_slice(&t.to_le_bytes());
    }
    xxh3_64_with_seed(bytes, HASH_SEED)
}

/// Chained hash of a block given the chained hash of the block before it (`None` for block 0).
pub fn chain_hash(parent: Option<u64>, local: u64) -> u64 {
    match parent {
        None => local,
        Some(parent) => {
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&parent.to_le_bytes());
            bytes[8..].copy_from_slice(&local.to_le_bytes());
            xxh3_64_with_seed(&bytes, HASH_SEED)
        }
    }
}

/// Chained hashes of every full block of `tokens`.
pub fn block_hashes(tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut hashes = Vec::with_capacity(tokens.len() / block_size.max(1));
    extend_block_hashes(&mut hashes, tokens, block_size);
    hashes
}

/// Appends the chained hashes of the full blocks of `tokens` that `hashes` does not cover yet.
///
/// `hashes` must hold the chained hashes of the first `hashes.len()` blocks of `tokens`; this
/// lets a growing sequence hash each block once.
pub fn extend_block_hashes(hashes: &mut Vec<u64>, tokens: &[u32], block_size: usize) {
    if block_size == 0 {
        return;
    }
    let full = tokens.len() / block_size;
    for i in hashes.len()..full {
        let local = local_block_hash(&tokens[i * block_size..(i + 1) * block_size]);
        let parent = i.checked_sub(1).map(|p| hashes[p]);
        hashes.push(chain_hash(parent, local));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extend_matches_whole() {
        let tokens: Vec<u32> = (0..100).collect();
        let mut grown = Vec::new();
        extend_block_hashes(&mut grown, &tokens[..40], 16);
        extend_block_hashes(&mut grown, &tokens, 16);
        assert_eq!(grown, block_hashes(&tokens, 16));
        assert_eq!(grown.len(), 6);
    }

    #[test]
    fn partial_block_is_not_hashed() {
        assert!(block_hashes(&[1, 2, 3], 4).is_empty());
        assert_eq!(block_hashes(&[1, 2, 3, 4, 5], 4).len(), 1);
    }
}
