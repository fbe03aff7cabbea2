//! The wall clock switchyard's processes share: Unix time in seconds, the time base of engine
//! status snapshots and of the scheduler. Core logic takes `now` as an argument; only the
//! edges read this.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in seconds (0 if the system clock is before 1970).
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}
