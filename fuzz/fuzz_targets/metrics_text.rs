//! An engine's `/metrics` text as the scheduler scrapes it, in every dialect: any text must
//! give a status or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_protocol::schedule::EngineKind;
use switchyard_scheduler::scrape::{status_from_metrics, ScrapeMemory};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for kind in [
        EngineKind::Vllm,
        EngineKind::Sglang,
        EngineKind::FastDeploy,
        EngineKind::MindIe,
    ] {
        let mut memory = ScrapeMemory::default();
        // Twice, so the second scrape also reads against the first one's memory.
        let _ = status_from_metrics(kind, text, 16, &mut memory);
        let _ = status_from_metrics(kind, text, 16, &mut memory);
    }
});
