//! An upstream's HTTP/1.1 answer, cut into arbitrary reads: the gateway's own client must take
//! any bytes, never panic, and decode the same status and body (or refuse the answer) however
//! the bytes are cut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_gateway::upstream::http1_client::decode_answer;

fuzz_target!(|data: &[u8]| {
    let Some((&piece, wire)) = data.split_first() else {
        return;
    };
    let whole = decode_answer(&[wire]).map_err(|e| e.kind());
    let reads: Vec<&[u8]> = wire.chunks(usize::from(piece).max(1)).collect();
    let cut = decode_answer(&reads).map_err(|e| e.kind());
    assert_eq!(
        cut.is_ok(),
        whole.is_ok(),
        "the same verdict however the bytes are cut"
    );
    if let (Ok(cut), Ok(whole)) = (cut, whole) {
        assert_eq!(cut, whole, "the same answer however the bytes are cut");
    }
});
