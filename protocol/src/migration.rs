//! Live migration between engines, on the wire: what asks a source engine to move running
//! requests out, what the source and destination say to each other while the KV is copied, and
//! how a moved request's stream tells its gateway where to continue.
//!
//! The exchange, all over HTTP between the two engines:
//! 1. `POST {source}/v1/migrations` ([`MigrateRequest`]) picks requests on the source and
//!    answers once they moved or failed ([`MigrateResponse`]).
//! 2. The source asks `POST {destination}/internal/migrations` ([`ReserveRequest`]) for blocks
//!    and a running seat; a full destination answers 409 and the request stays.
//! 3. Copy stages `PUT .../migrations/{ticket}/kv` (raw KV bytes, [`KV_CHUNK_HEADERS`]) while the
//!    request keeps decoding on the source; the last one after it is suspended.
//! 4. `POST .../migrations/{ticket}/commit` carries its sampling state; the destination runs it
//!    from there, and the source ends the request's stream with [`migrated_comment`].
//! 5. The gateway continues the stream on the destination with the request's resume body and
//!    [`MIGRATION_TICKET_HEADER`]; the destination hands it the events of the moved request.
//!
//! `DELETE .../migrations/{ticket}` gives a reservation back when a move fails.

use serde::{Deserialize, Serialize};

/// Moves out of one engine at a time; more wait their turn. A hand-off holds its lane from
/// the first block of its prompt computed to its first token, so a long prompt's holds one for
/// seconds: at 2, short prompts handed off behind two long ones decoded on their prefill
/// instance, in steps that carry its prompts (200+ ms a token).
pub const MOVES_OUT_AT_ONCE: usize = 8;

/// Most moves coming into one engine at a time, each counted from its reservation (a
/// hand-off's as its prompt starts computing) until its last copy is committed; more are
/// refused (`too_many_moves`). A request that arrived decodes there already, waiting only for
/// its stream, and no longer counts. At 4, and counted until the stream came, one decode engine
/// behind seven prefill engines refused 40% of a real run's hand-offs (Azure code at 17 req/s).
pub const MAX_INCOMING: usize = 16;

/// Where the scheduler (or `serve`) is asked to empty an instance by moving its requests out.
pub const DRAIN_PATH: &str = "/v1/instances/drain";

/// Where a source engine is asked to move requests out.
pub const MIGRATIONS_PATH: &str = "/v1/migrations";

/// Where a destination engine takes moves in (`/{ticket}/kv`, `/{ticket}/commit`, and DELETE
/// `/{ticket}` below it).
pub const INCOMING_MIGRATIONS_PATH: &str = "/internal/migrations";

/// The request header a gateway sends when it can follow a request that moves: only such
/// requests are moved (a client talking to an engine directly would see its stream just end).
pub const FOLLOW_MIGRATION_HEADER: &str = "x-switchyard-follow-migration";

/// The request header that asks a prefill engine to hand the request, after its first token, to
/// the decode engine it names (prefill/decode disaggregation; the gateway follows, as for any
/// move).
pub const HAND_OFF_HEADER: &str = "x-switchyard-hand-off-to";

/// The request header that continues a moved request on its destination, naming its ticket.
pub const MIGRATION_TICKET_HEADER: &str = "x-switchyard-migration-ticket";

/// Headers of a KV chunk: its first block among the request's blocks, its block count, and the
/// XXH3-64 of its bytes (decimal).
pub const KV_CHUNK_HEADERS: [&str; 3] = [
    "x-switchyard-kv-first-block",
    "x-switchyard-kv-blocks",
    "x-switchyard-kv-checksum",
];

/// The SSE comment that ends a moved request's stream on its source:
/// `: migrated TICKET DESTINATION`.
pub fn migrated_comment(ticket: &str, destination: &str) -> String {
    format!(": migrated {ticket} {destination}\n\n")
}

/// Reads a [`migrated_comment`] line (without its `: `): the ticket and the destination.
pub fn parse_migrated(line: &str) -> Option<MigratedTo> {
    let rest = line.strip_prefix("migrated ")?;
    let (ticket, destination) = rest.trim().split_once(' ')?;
    let ok = |s: &str| !s.is_empty() && !s.contains(char::is_whitespace);
    (ok(ticket) && ok(destination)).then(|| MigratedTo {
        ticket: ticket.to_string(),
        destination: destination.to_string(),
    })
}

/// Where a moved request continues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigratedTo {
    /// The destination's ticket for it.
    pub ticket: String,
    /// The destination engine's endpoint (`http://host:port`).
    pub destination: String,
}

/// `POST /v1/migrations` on a source engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigrateRequest {
    /// The destination engine's endpoint (`http://host:port`), of the same model and shape.
    pub destination: String,
    /// Move this request (its `x-request-id`); without it, the cheapest to move are picked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// How many requests to move when none is named (default 1).
    #[serde(default = "one")]
    pub requests: usize,
    /// Why (a label for the counts: `load_balance`, `room`, `drain`, ...); `manual` if not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Which requests go first when none is named.
    #[serde(default)]
    pub first: MoveFirst,
    /// A prefill/decode hand-off of the request named: it may still be computing its prompt
    /// (or waiting to); its KV is copied as it is computed, and it is suspended at its first
    /// token, decoding no further here. Otherwise a running request decodes on while its KV is
    /// copied, until little is left.
    #[serde(default)]
    pub hand_off: bool,
}

/// Which running requests a source moves first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveFirst {
    /// The one with the least KV, the cheapest to copy (Llumnix's SR, shortest running).
    #[default]
    LeastKv,
    /// The least urgent (the highest `priority` value), then the least KV: to make room for
    /// more urgent requests waiting.
    LeastUrgent,
}

impl MoveFirst {
    /// The `order` label of the rescheduling counters.
    pub fn label(self) -> &'static str {
        match self {
            MoveFirst::LeastKv => "SR",
            MoveFirst::LeastUrgent => "priority",
        }
    }
}

fn one() -> usize {
    1
}

/// What a migration call did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MigrateResponse {
    /// Requests that now run on the destination.
    pub migrated: Vec<MigratedRequest>,
    /// Moves that failed (the request went on where it was).
    pub failed: Vec<FailedMigration>,
}

/// One request that moved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigratedRequest {
    /// Its `x-request-id`.
    pub request_id: String,
    /// Tokens (prompt and output) whose KV moved.
    pub tokens: usize,
    /// Copy stages, the last (with the request suspended) included.
    pub stages: u32,
    /// KV blocks sent, over all stages (a block still filling is sent again).
    pub blocks: usize,
    /// KV bytes sent, over all stages.
    pub bytes: u64,
    /// How long it was suspended: from its last step on the source to its hand-over.
    pub suspended_ms: f64,
    /// How long the whole move took, from the reservation to the hand-over.
    pub duration_ms: f64,
}

/// One move that failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedMigration {
    /// The request, when one was picked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Why: `no_request`, `no_room`, `unreachable`, `refused`, `finished`, `preempted`,
    /// `unsupported`.
    pub reason: String,
    /// What went wrong, for people.
    pub message: String,
}

/// `POST /internal/migrations` on a destination: hold room for a request on its way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReserveRequest {
    /// The request's `x-request-id`.
    pub request_id: String,
    /// Served model name; must be the destination's.
    pub model: String,
    /// Tokens per KV block; must be the destination's.
    pub block_size: usize,
    /// Bytes of one block's KV in the source backend's layout; must be the destination's.
    pub kv_block_bytes: u64,
    /// Tokens to hold blocks for now (grown by later chunks).
    pub tokens: usize,
}

/// The destination's answer to a [`ReserveRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReserveResponse {
    /// Names the reservation in the later calls and the continuation.
    pub ticket: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migrated_comment_reads_back() {
        let comment = migrated_comment("t-1", "http://127.0.0.1:8001");
        let line = comment.trim_end().strip_prefix(": ").unwrap();
        assert_eq!(
            parse_migrated(line),
            Some(MigratedTo {
                ticket: "t-1".into(),
                destination: "http://127.0.0.1:8001".into()
            })
        );
        assert_eq!(parse_migrated("migrated onlyone"), None);
        assert_eq!(parse_migrated("token_ids 1,2"), None);
    }

    #[test]
    fn a_migrate_request_moves_one_by_default_and_refuses_unknown_fields() {
        let r: MigrateRequest =
            serde_json::from_str(r#"{"destination":"http://127.0.0.1:1"}"#).unwrap();
        assert_eq!(r.requests, 1);
        assert!(serde_json::from_str::<MigrateRequest>(r#"{"destination":"x","oops":1}"#).is_err());
    }
}
