//! An upstream's streamed answer, cut into arbitrary reads: the gateway's SSE splitter and its
//! chunk reader and assembler must take any bytes, never panic, and give the same events however
//! the bytes are cut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_gateway::relay::assemble::Assembler;
use switchyard_gateway::relay::chunk::{ChunkView, HeadKept};
use switchyard_gateway::shared::Route;
use switchyard_http::sse::SseSplitter;

fn events(pieces: &[&[u8]]) -> Vec<(Option<Vec<u8>>, Vec<u32>)> {
    let mut splitter = SseSplitter::default();
    let mut assembler = Assembler::new(Route::Chat);
    let mut out = Vec::new();
    let mut kept = HeadKept::default();
    for piece in pieces {
        splitter.push(piece);
        while let Some(event) = splitter.next_event() {
            if let Some(data) = &event.data {
                if let Some(view) = ChunkView::parse(data) {
                    let _ = (view.has_text(), view.is_usage_only());
                    view.choices.iter().for_each(|c| {
                        let _ = c.new_text();
                    });
                }
                if let Some(view) = ChunkView::parse_for_assembly(data, kept) {
                    kept.add(&view);
                    assembler.push(view);
                }
            }
            out.push((event.data.as_ref().map(|d| d.to_vec()), event.token_ids.clone()));
        }
    }
    let _ = splitter.has_partial();
    let _ = assembler.finish();
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let whole = events(&[stream]);
    let at = (cut as usize).min(stream.len());
    let (a, b) = stream.split_at(at);
    assert_eq!(events(&[a, b]), whole, "the same events however the bytes are cut");
});
