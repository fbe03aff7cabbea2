//! Splitting a byte stream into server-sent events, as they become whole. The gateway relays an
//! engine's event only once it is whole, so a stream broken off mid-event never leaves half an
//! event with the client, and a continuation elsewhere starts on an event boundary; the scheduler
//! reads each engine's state and KV event streams with it. Comment lines are dropped, except
//! switchyard's `: token_ids 1,2,3`, which is read into the event, and `: migrated TICKET
//! DESTINATION`, which ends the stream of a request that moved to another engine.

use bytes::{Bytes, BytesMut};
use switchyard_protocol::migration::{parse_migrated, MigratedTo};

/// One whole event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `data` field (lines joined with `\n`), if the event has one.
    pub data: Option<Bytes>,
    /// Generated token ids the engine named in a comment line.
    pub token_ids: Vec<u32>,
    /// Set when the engine moved the request: where its stream continues.
    pub migrated: Option<MigratedTo>,
}

impl SseEvent {
    /// Whether this is the stream's `[DONE]` marker.
    pub fn is_done(&self) -> bool {
        self.data.as_deref() == Some(b"[DONE]")
    }
}

/// Events in the making from pushed bytes.
#[derive(Debug, Default)]
pub struct SseSplitter {
    pending: BytesMut,
    /// How much of `pending` is known to hold no event's end, so that an event arriving in
    /// many pieces (a KV snapshot of megabytes) is scanned once, not once a piece.
    scanned: usize,
}

impl SseSplitter {
    /// Adds bytes as they arrived.
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The next whole event, if one is there.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            // An end (`\n\n` or `\n\r\n`) may have begun in the last two bytes scanned.
            let from = self.scanned.saturating_sub(2);
            let Some((end, gap)) = event_end(&self.pending[from..]).map(|(e, g)| (from + e, g))
            else {
                self.scanned = self.pending.len();
                return None;
            };
            self.scanned = 0;
            let raw = self.pending.split_to(end + gap).freeze();
            let event = parse_event(raw.slice(..end));
            if event.data.is_some() || !event.token_ids.is_empty() || event.migrated.is_some() {
                return Some(event);
            }
        }
    }

    /// How many bytes of unfinished events are waiting.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Whether bytes of an unfinished event are waiting.
    pub fn has_partial(&self) -> bool {
        self.pending.iter().any(|b| !b.is_ascii_whitespace())
    }
}

/// Where the first event ends and how long its blank-line terminator is.
fn event_end(buf: &[u8]) -> Option<(usize, usize)> {
    memchr::memchr_iter(b'\n', buf).find_map(|i| match buf.get(i + 1..) {
        Some([b'\n', ..]) => Some((i, 2)),
        Some([b'\r', b'\n', ..]) => Some((i, 3)),
        _ => None,
    })
}

fn parse_event(raw: Bytes) -> SseEvent {
    let mut data: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    let mut token_ids = Vec::new();
    let mut migrated = None;
    let mut start = 0;
    while start <= raw.len() {
        let end = memchr::memchr(b'\n', &raw[start..]).map_or(raw.len(), |p| start + p);
        let mut line = raw.slice(start..end);
        if line.last() == Some(&b'\r') {
            line.truncate(line.len() - 1);
        }
        start = end + 1;
        if let Some(ids) = line.strip_prefix(b": token_ids ") {
            token_ids.extend(
                std::str::from_utf8(ids)
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|t| t.trim().parse::<u32>().ok()),
            );
        } else if let Some(rest) = line.strip_prefix(b": ") {
            migrated = migrated.or_else(|| parse_migrated(std::str::from_utf8(rest).ok()?));
        } else if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            let offset = value.as_ptr() as usize - line.as_ptr() as usize;
            let value = line.slice(offset..);
            match (&mut joined, &data) {
                (Some(buf), _) => {
                    buf.extend_from_slice(b"\n");
                    buf.extend_from_slice(&value);
                }
                (None, Some(first)) => {
                    let mut buf = BytesMut::from(&first[..]);
                    buf.extend_from_slice(b"\n");
                    buf.extend_from_slice(&value);
                    joined = Some(buf);
                }
                (None, None) => data = Some(value),
            }
        }
    }
    SseEvent {
        data: joined.map(BytesMut::freeze).or(data),
        token_ids,
        migrated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_migrated_comment_is_an_event_of_its_own() {
        let mut splitter = SseSplitter::default();
        splitter.push(b": token_ids 3\ndata: {}\n\n: migrated t7 http://127.0.0.1:9\n\n");
        assert_eq!(splitter.next_event().unwrap().migrated, None);
        let moved = splitter.next_event().unwrap();
        assert_eq!(moved.data, None);
        assert_eq!(
            moved.migrated,
            Some(MigratedTo {
                ticket: "t7".into(),
                destination: "http://127.0.0.1:9".into()
            })
        );
    }

    #[test]
    fn events_split_anywhere_come_out_whole() {
        let stream = b": token_ids 5,6\ndata: {\"a\":1}\n\n: ping\n\ndata: x\ndata: y\r\n\r\ndata: [DONE]\n\n";
        for size in 1..stream.len() {
            let mut splitter = SseSplitter::default();
            let mut events = Vec::new();
            for piece in stream.chunks(size) {
                splitter.push(piece);
                while let Some(e) = splitter.next_event() {
                    events.push(e);
                }
            }
            assert_eq!(events.len(), 3, "pieces of {size}");
            assert_eq!(events[0].data.as_deref(), Some(&b"{\"a\":1}"[..]));
            assert_eq!(events[0].token_ids, vec![5, 6]);
            assert_eq!(events[1].data.as_deref(), Some(&b"x\ny"[..]));
            assert!(events[2].is_done());
            assert!(!splitter.has_partial());
        }
        let mut cut = SseSplitter::default();
        cut.push(b"data: {\"half");
        assert!(cut.next_event().is_none());
        assert!(cut.has_partial());
    }

    #[test]
    fn a_large_event_in_small_pieces_comes_out_whole_once() {
        let big = format!("data: {}\r\n\r\ndata: next\n\n", "x".repeat(100_000));
        for size in [1, 2, 3, 7, 4096] {
            let mut splitter = SseSplitter::default();
            let mut events = Vec::new();
            for piece in big.as_bytes().chunks(size) {
                splitter.push(piece);
                while let Some(e) = splitter.next_event() {
                    events.push(e);
                }
            }
            assert_eq!(events.len(), 2, "pieces of {size}");
            assert_eq!(events[0].data.as_ref().map(|d| d.len()), Some(100_000));
            assert_eq!(events[1].data.as_deref(), Some(&b"next"[..]));
        }
    }
}
