//! The block hasher against vectors computed by Python's `xxhash` (see `vectors/make_vectors.py`).

use serde::Deserialize;
use switchyard_protocol::hashing::{block_hashes, local_block_hash};

#[derive(Deserialize)]
struct Case {
    block_size: usize,
    tokens: Vec<u32>,
    local: Vec<u64>,
    chained: Vec<u64>,
}

#[test]
fn matches_python_reference() {
    let cases: Vec<Case> =
        serde_json::from_str(include_str!("vectors/block_hashes.json")).expect("vectors parse");
    assert!(!cases.is_empty());
    for case in cases {
        let local: Vec<u64> = case
            .tokens
            .chunks_exact(case.block_size)
            .map(local_block_hash)
            .collect();
        assert_eq!(
            local, case.local,
            "local hashes, block size {}",
            case.block_size
        );
        assert_eq!(
            block_hashes(&case.tokens, case.block_size),
            case.chained,
            "chained hashes, block size {}",
            case.block_size
        );
    }
}
