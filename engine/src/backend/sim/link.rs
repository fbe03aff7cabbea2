//! A simulated link between two engines: how long a KV transfer takes, with no bytes sent.

/// A network link for KV transfers: bandwidth plus a fixed cost per transfer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvLink {
    /// Gigabits per second.
    pub gbps: f64,
    /// Seconds each transfer costs before its first byte (connection, reservation, handshake).
    pub latency: f64,
}

impl Default for KvLink {
    /// 25 Gb/s, a common datacenter NIC, and 1 ms a transfer.
    fn default() -> Self {
        KvLink {
            gbps: 25.0,
            latency: 0.001,
        }
    }
}

impl KvLink {
    /// Seconds to send `bytes`.
    pub fn seconds(&self, bytes: u64) -> f64 {
        self.latency + bytes as f64 * 8.0 / (self.gbps * 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_costs_its_bytes_over_the_bandwidth_plus_the_latency() {
        let link = KvLink::default();
        // 1,000 tokens of Llama-3.1-8B (128 KiB each) over 25 Gb/s: 41.9 ms, plus 1 ms.
        let seconds = link.seconds(1_000 * 131_072);
        assert!((seconds - 0.042943).abs() < 1e-5, "{seconds}");
        assert_eq!(link.seconds(0), 0.001);
    }
}
