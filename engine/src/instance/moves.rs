//! An instance's side of live migration in real time: the commands its HTTP handlers send the
//! driver for a move out (pick, export, hand over, give up) and a move in (reserve, import,
//! commit, cancel, attach), and how the driver carries them out. Exports (which read KV a step
//! may be writing, and may suspend a sequence a step runs) and imports while a step has the
//! backend wait for the step's end; the rest touch only sequences and blocks no step under way
//! uses, and are carried out at once. The copying over HTTP is [`crate::mover`]'s; the core's
//! part is [`crate::migration`].

use super::{Command, Driver, Instance};
use crate::backend::KvMoveError;
use crate::batching::SeqId;
use crate::core::SeqEvent;
use crate::migration::{late_hand_off_copies_first, KvChunk, MovedSeq, Reservation};
use rustc_hash::FxHashMap;
use std::time::Duration;
use switchyard_protocol::clock::unix_now;
use switchyard_protocol::migration::{MigratedTo, MoveFirst, ReserveRequest};
use switchyard_protocol::openai::{ApiError, FinishReason};
use tokio::sync::{mpsc, oneshot};

/// How long a destination holds a reservation, and a moved-in request no gateway came for,
/// before it gives them up (the source or the gateway went away mid-move).
pub const INCOMING_TIMEOUT: Duration = Duration::from_secs(30);

pub use switchyard_protocol::migration::MAX_INCOMING;

/// A request picked to move out.
#[derive(Debug, Clone)]
pub struct Picked {
    /// Its sequence here.
    pub seq: SeqId,
    /// Its `x-request-id`.
    pub request_id: String,
    /// Tokens whose KV is computed now.
    pub tokens: usize,
}

/// When an export suspends the request for the last copy stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suspend {
    /// Not now: it keeps decoding.
    No,
    /// When at most a block of tokens was computed beyond `copied` (what earlier stages sent),
    /// or regardless with `force` (the last stage allowed); the first export of a stage.
    IfRestWithin {
        /// Tokens the earlier stages copied.
        copied: usize,
        /// Suspend even if more is left.
        force: bool,
    },
    /// Now (the rest of the last stage; it is suspended already).
    Yes,
    /// When it has its first token (a prefill/decode hand-off), unless this is the first stage
    /// (nothing `copied` yet) and more than a step's prompt tokens and a block are computed: a
    /// hand-off that got its destination's slot only after the first token copies that much
    /// while the request decodes on, as a live migration does, rather than pausing it for the
    /// copy of its whole context.
    AtFirstToken {
        /// Tokens the earlier stages copied.
        copied: usize,
    },
}

/// One export of a move's KV.
#[derive(Debug)]
pub struct Exported {
    /// Index of the first block exported among the sequence's blocks.
    pub first_block: usize,
    /// Blocks exported.
    pub num_blocks: usize,
    /// Their bytes, not yet checksummed: the sender sums them off the step loop
    /// ([`KvChunk::new`]).
    pub bytes: Vec<u8>,
    /// Tokens whose KV is computed now.
    pub computed: usize,
    /// Blocks holding computed tokens now (the last may be partly filled).
    pub blocks_computed: usize,
    /// What the request travels as, once it is suspended.
    pub moved: Option<MovedSeq>,
    /// For a simulated backend, how long (in real seconds) these bytes would take to send.
    pub modeled_seconds: f64,
}

/// Why a move cannot go on: a reason for the counts and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveFailure {
    /// `finished`, `preempted`, `unsupported`, `export_failed`, `no_room`, `refused`,
    /// `unreachable`, ...
    pub reason: &'static str,
    /// For people.
    pub message: String,
}

impl MoveFailure {
    /// A failure for `reason`, explained by `message`.
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        MoveFailure {
            reason,
            message: message.into(),
        }
    }
}

/// The move commands a driver carries out between steps.
pub(super) enum MoveCommand {
    Pick {
        request_id: Option<String>,
        count: usize,
        first: MoveFirst,
        hand_off: bool,
        reply: oneshot::Sender<Vec<Picked>>,
    },
    Export {
        seq: SeqId,
        from_block: usize,
        max_blocks: usize,
        suspend: Suspend,
        reply: oneshot::Sender<Result<Exported, MoveFailure>>,
    },
    HandOver {
        seq: SeqId,
        to: MigratedTo,
        reply: oneshot::Sender<bool>,
    },
    GiveUp {
        seq: SeqId,
    },
    Leaving {
        seq: SeqId,
        reply: oneshot::Sender<bool>,
    },
    Reserve {
        ask: ReserveRequest,
        reply: oneshot::Sender<Result<String, ApiError>>,
    },
    Import {
        ticket: String,
        chunk: KvChunk,
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    Commit {
        ticket: String,
        moved: Box<MovedSeq>,
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    Cancel {
        ticket: String,
    },
    Expire {
        ticket: String,
    },
    Attach {
        ticket: String,
        tokens: Vec<u32>,
        reply: oneshot::Sender<Result<Attached, ApiError>>,
    },
}

impl MoveCommand {
    /// Whether it must wait for the end of a step under way; `backend_away` when the step has
    /// the backend on another thread.
    pub(super) fn waits_for_step_end(&self, backend_away: bool) -> bool {
        match self {
            MoveCommand::Export { .. } => true,
            MoveCommand::Import { .. } => backend_away,
            _ => false,
        }
    }
}

/// A moved-in request's events, for the stream that continues it.
pub struct Attached {
    /// Its sequence here.
    pub seq: SeqId,
    /// Its events since it arrived, and from now on.
    pub events: mpsc::UnboundedReceiver<SeqEvent>,
}

/// What the driver keeps of moves under way.
#[derive(Default)]
pub(super) struct Moves {
    /// Sequences whose client follows a move (the gateway said so), and may move.
    pub following: rustc_hash::FxHashSet<SeqId>,
    /// Sequences being moved out, with the blocks of theirs sent so far.
    outgoing: FxHashMap<SeqId, usize>,
    /// Reservations for requests on their way in, by ticket.
    incoming: FxHashMap<String, Reservation>,
    /// Requests that arrived and wait for their stream, by ticket, with their tokens on arrival
    /// (an arrived request that ends before its stream comes keeps its events for it).
    arrived: FxHashMap<String, (Attached, Vec<u32>)>,
}

impl Moves {
    /// Requests on their way in and the KV tokens reserved for them.
    pub fn loading(&self, block_size: usize) -> (u32, u64) {
        let tokens = self
            .incoming
            .values()
            .map(|r| r.capacity(block_size) as u64)
            .sum();
        (self.incoming.len() as u32, tokens)
    }

    /// Requests being moved out: how many, their computed tokens (the KV they take with them),
    /// and how many of those are not sent yet.
    pub fn leaving(&self, core: &crate::core::EngineCore) -> Leaving {
        let block_size = core.config().block_size;
        let mut leaving = Leaving {
            requests: self.outgoing.len() as u32,
            ..Leaving::default()
        };
        for (&seq, &sent_blocks) in &self.outgoing {
            if let Some(computed) = core.computed_tokens(seq) {
                leaving.tokens += computed as u64;
                leaving.unsent_tokens += unsent_tokens(computed, sent_blocks, block_size);
            }
        }
        leaving
    }

    /// Notes that the blocks of `seq` up to `end` were sent.
    fn sent(&mut self, seq: SeqId, end: usize) {
        if let Some(sent) = self.outgoing.get_mut(&seq) {
            *sent = (*sent).max(end);
        }
    }

    /// Forgets `seq` once it ended or left here.
    pub fn forget(&mut self, seq: SeqId) {
        self.following.remove(&seq);
        self.outgoing.remove(&seq);
    }
}

/// Requests being moved out of an instance, as its status reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Leaving {
    /// How many.
    pub requests: u32,
    /// Their computed tokens.
    pub tokens: u64,
    /// Those of their computed tokens whose KV is not sent yet.
    pub unsent_tokens: u64,
}

/// Computed tokens of a request past its first `sent_blocks` blocks.
fn unsent_tokens(computed: usize, sent_blocks: usize, block_size: usize) -> u64 {
    computed.saturating_sub(sent_blocks.saturating_mul(block_size)) as u64
}

fn unknown_ticket(ticket: &str) -> ApiError {
    ApiError::not_found(format!("No move under way has the ticket `{ticket}`."))
        .with_code("unknown_ticket")
}

impl Instance {
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> MoveCommand) -> Option<T> {
        let (reply, answer) = oneshot::channel();
        self.commands.send(Command::Move(make(reply))).ok()?;
        answer.await.ok()
    }

    /// Picks up to `count` requests to move out (or the one named), in the order `first` says;
    /// only those whose client can follow a move, past their prompt (running, for a `hand_off`),
    /// and not moving already.
    pub async fn pick_moves(
        &self,
        request_id: Option<String>,
        count: usize,
        first: MoveFirst,
        hand_off: bool,
    ) -> Vec<Picked> {
        self.ask(|reply| MoveCommand::Pick {
            request_id,
            count,
            first,
            hand_off,
            reply,
        })
        .await
        .unwrap_or_default()
    }

    /// Exports up to `max_blocks` computed blocks of `seq` from `from_block`, suspending it
    /// first when `suspend` says so (then it says what the request travels as).
    pub async fn export_kv(
        &self,
        seq: SeqId,
        from_block: usize,
        max_blocks: usize,
        suspend: Suspend,
    ) -> Result<Exported, MoveFailure> {
        self.ask(|reply| MoveCommand::Export {
            seq,
            from_block,
            max_blocks,
            suspend,
            reply,
        })
        .await
        .unwrap_or_else(|| Err(MoveFailure::new("shutdown", "the engine is shutting down")))
    }

    /// Gives suspended `seq` up to `to`: its stream ends naming it. False if it is gone.
    pub async fn hand_over(&self, seq: SeqId, to: MigratedTo) -> bool {
        self.ask(|reply| MoveCommand::HandOver { seq, to, reply })
            .await
            .unwrap_or(false)
    }

    /// The move of `seq` failed: it runs on here.
    pub fn give_up_move(&self, seq: SeqId) {
        let _ = self
            .commands
            .send(Command::Move(MoveCommand::GiveUp { seq }));
    }

    /// Whether `seq` is still being moved out: it has neither ended nor been given up.
    pub async fn still_leaving(&self, seq: SeqId) -> bool {
        self.ask(|reply| MoveCommand::Leaving { seq, reply })
            .await
            .unwrap_or(false)
    }

    /// Holds room for a request on its way in; the ticket names the reservation.
    pub async fn reserve_move(&self, ask: ReserveRequest) -> Result<String, ApiError> {
        self.ask(|reply| MoveCommand::Reserve { ask, reply })
            .await
            .unwrap_or_else(|| Err(ApiError::unavailable("The engine is shutting down.")))
    }

    /// Writes a chunk of KV into the reservation `ticket` (grown to hold it).
    pub async fn import_kv(&self, ticket: String, chunk: KvChunk) -> Result<(), ApiError> {
        self.ask(|reply| MoveCommand::Import {
            ticket,
            chunk,
            reply,
        })
        .await
        .unwrap_or_else(|| Err(ApiError::unavailable("The engine is shutting down.")))
    }

    /// Runs `moved` here on the KV of reservation `ticket`.
    pub async fn commit_move(&self, ticket: String, moved: MovedSeq) -> Result<(), ApiError> {
        self.ask(|reply| MoveCommand::Commit {
            ticket,
            moved: Box::new(moved),
            reply,
        })
        .await
        .unwrap_or_else(|| Err(ApiError::unavailable("The engine is shutting down.")))
    }

    /// Gives reservation `ticket` back, or ends the request that arrived under it (its source
    /// could not hand it over after all).
    pub fn cancel_move(&self, ticket: String) {
        let _ = self
            .commands
            .send(Command::Move(MoveCommand::Cancel { ticket }));
    }

    /// The events of the request that moved in under `ticket`, whose prompt and output so far
    /// are `tokens`.
    pub async fn attach(&self, ticket: String, tokens: Vec<u32>) -> Result<Attached, ApiError> {
        self.ask(|reply| MoveCommand::Attach {
            ticket,
            tokens,
            reply,
        })
        .await
        .unwrap_or_else(|| Err(ApiError::unavailable("The engine is shutting down.")))
    }
}

impl Driver {
    /// Gives `ticket` up after [`INCOMING_TIMEOUT`] unless it was taken by then.
    fn expire_later(&self, ticket: String) {
        let commands = self.commands.clone();
        tokio::spawn(async move {
            tokio::time::sleep(INCOMING_TIMEOUT).await;
            if let Some(commands) = commands.upgrade() {
                let _ = commands.send(Command::Move(MoveCommand::Expire { ticket }));
            }
        });
    }

    pub(super) fn handle_move(&mut self, cmd: MoveCommand) {
        match cmd {
            MoveCommand::Pick {
                request_id,
                count,
                first,
                hand_off,
                reply,
            } => {
                let _ = reply.send(self.pick(request_id, count, first, hand_off));
            }
            MoveCommand::Export {
                seq,
                from_block,
                max_blocks,
                suspend,
                reply,
            } => {
                let _ = reply.send(self.export(seq, from_block, max_blocks, suspend));
            }
            MoveCommand::HandOver { seq, to, reply } => {
                let _ = reply.send(self.hand_over(seq, to));
            }
            MoveCommand::GiveUp { seq } => {
                self.moves.outgoing.remove(&seq);
                self.dirty |= self.core.resume(seq);
            }
            MoveCommand::Leaving { seq, reply } => {
                let _ = reply.send(self.moves.outgoing.contains_key(&seq));
            }
            MoveCommand::Reserve { ask, reply } => {
                let answer = self.reserve(ask);
                if let Ok(ticket) = &answer {
                    self.expire_later(ticket.clone());
                }
                let _ = reply.send(answer);
            }
            MoveCommand::Import {
                ticket,
                chunk,
                reply,
            } => {
                let _ = reply.send(self.import(&ticket, chunk));
            }
            MoveCommand::Commit {
                ticket,
                moved,
                reply,
            } => {
                let _ = reply.send(self.commit(ticket, *moved));
            }
            MoveCommand::Cancel { ticket } => self.drop_ticket(&ticket),
            MoveCommand::Expire { ticket } => {
                if self.moves.incoming.contains_key(&ticket)
                    || self.moves.arrived.contains_key(&ticket)
                {
                    tracing::warn!(
                        "{}: move {ticket} was neither committed nor continued in time; given up",
                        self.name
                    );
                }
                self.drop_ticket(&ticket);
            }
            MoveCommand::Attach {
                ticket,
                tokens,
                reply,
            } => {
                let _ = reply.send(self.attach(&ticket, &tokens));
            }
        }
    }

    /// Frees the reservation under `ticket`, or ends the request that arrived under it.
    fn drop_ticket(&mut self, ticket: &str) {
        if let Some(reservation) = self.moves.incoming.remove(ticket) {
            self.core.cancel(reservation);
            self.dirty = true;
        }
        if let Some((arrived, _)) = self.moves.arrived.remove(ticket) {
            self.abort(arrived.seq, FinishReason::Abort);
        }
    }

    fn pick(
        &mut self,
        request_id: Option<String>,
        count: usize,
        first: MoveFirst,
        hand_off: bool,
    ) -> Vec<Picked> {
        let mut picked = Vec::new();
        // A hand-off takes a request still computing its prompt, as soon as it runs.
        let candidates = match hand_off {
            true => self
                .core
                .batcher()
                .running()
                .map(|s| (s.id, s.num_computed))
                .collect(),
            false => self.core.movable(first),
        };
        for (seq, tokens) in candidates {
            if picked.len() >= count {
                break;
            }
            if !self.moves.following.contains(&seq) || self.moves.outgoing.contains_key(&seq) {
                continue;
            }
            let Some(rid) = self.core.batcher().get(seq).map(|s| &s.request_id) else {
                continue;
            };
            if request_id.as_ref().is_some_and(|wanted| wanted != rid) {
                continue;
            }
            picked.push(Picked {
                seq,
                request_id: rid.to_string(),
                tokens,
            });
        }
        for p in &picked {
            self.moves.outgoing.insert(p.seq, 0);
        }
        picked
    }

    fn export(
        &mut self,
        seq: SeqId,
        from_block: usize,
        max_blocks: usize,
        suspend: Suspend,
    ) -> Result<Exported, MoveFailure> {
        let Some(computed) = self.core.computed_tokens(seq) else {
            return Err(match self.core.blocks_of(seq) {
                Some(_) => MoveFailure::new("preempted", "it was preempted (its KV is gone)"),
                None => MoveFailure::new("finished", "it finished first"),
            });
        };
        let block_size = self.core.config().block_size;
        let suspend_now = match suspend {
            Suspend::No => false,
            Suspend::IfRestWithin { copied, force } => {
                force || computed.saturating_sub(copied) <= block_size
            }
            Suspend::Yes => true,
            Suspend::AtFirstToken { copied } => {
                let prompt = self.core.batcher().get(seq).map_or(0, |s| s.prompt_len);
                let step = self.core.config().max_num_batched_tokens;
                computed >= prompt
                    && (copied > 0 || !late_hand_off_copies_first(computed, step, block_size))
            }
        };
        if suspend_now && self.core.suspend(seq, unix_now()) {
            self.dirty = true;
        }
        let backend = self.backend.as_ref().expect("exports run between steps");
        let blocks = self.core.blocks_of(seq).unwrap_or_default();
        let blocks_computed = computed.div_ceil(block_size).min(blocks.len());
        let end = blocks_computed.min(from_block.saturating_add(max_blocks));
        let sent = blocks.get(from_block..end).unwrap_or_default();
        self.moves.sent(seq, end);
        let bytes = backend.export_kv(sent).map_err(|e| {
            let reason = match e {
                KvMoveError::Unsupported => "unsupported",
                _ => "export_failed",
            };
            MoveFailure::new(reason, e.to_string())
        })?;
        let modeled_seconds = backend.modeled_kv_link().map_or(0.0, |link| {
            link.seconds(sent.len() as u64 * backend.kv_block_bytes()) / self.time_scale
        });
        self.metrics.on_kv_moved("out", bytes.len() as u64);
        Ok(Exported {
            first_block: from_block,
            num_blocks: sent.len(),
            bytes,
            computed,
            blocks_computed,
            moved: self.core.in_transit(seq),
            modeled_seconds,
        })
    }

    fn hand_over(&mut self, seq: SeqId, to: MigratedTo) -> bool {
        self.moves.forget(seq);
        if self.core.hand_over(seq, unix_now()).is_none() {
            return false;
        }
        self.dirty = true;
        if let Some(route) = self.routes.remove(&seq) {
            let _ = route.send(SeqEvent::Moved(seq, to));
        }
        true
    }

    fn reserve(&mut self, ask: ReserveRequest) -> Result<String, ApiError> {
        let mismatch = |what: &str| {
            Err(ApiError::invalid_request(format!(
                "This engine cannot take the request in: {what}."
            ))
            .with_code("shape_mismatch"))
        };
        if ask.model != self.model_name {
            return mismatch(&format!(
                "it serves `{}`, not `{}`",
                self.model_name, ask.model
            ));
        }
        if ask.block_size != self.core.config().block_size {
            return mismatch("its KV blocks are of another size");
        }
        if self.kv_block_bytes == 0 {
            return Err(ApiError::invalid_request(
                "This engine's backend cannot take KV from another engine yet.",
            )
            .with_code("unsupported"));
        }
        if ask.kv_block_bytes != self.kv_block_bytes {
            return mismatch("its KV blocks hold another number of bytes (another model shape)");
        }
        if self.moves.incoming.len() >= MAX_INCOMING {
            return Err(
                ApiError::unavailable("This engine takes in no more moves now.")
                    .with_code("too_many_moves"),
            );
        }
        let Some(reservation) = self.core.reserve(ask.tokens) else {
            return Err(
                ApiError::unavailable("This engine has no room for the request.")
                    .with_code("no_room"),
            );
        };
        self.dirty = true;
        let ticket = format!("{}-{:016x}", self.name, rand::random::<u64>());
        self.moves.incoming.insert(ticket.clone(), reservation);
        Ok(ticket)
    }

    fn import(&mut self, ticket: &str, chunk: KvChunk) -> Result<(), ApiError> {
        let block_size = self.core.config().block_size;
        let Some(reservation) = self.moves.incoming.get_mut(ticket) else {
            return Err(unknown_ticket(ticket));
        };
        // No request has more blocks than the longest one allowed.
        let most = self.core.config().max_model_len.div_ceil(block_size);
        let end = chunk
            .first_block
            .checked_add(chunk.num_blocks)
            .filter(|&end| end <= most);
        let Some(end) = end else {
            return Err(ApiError::invalid_request(
                "The KV chunk's blocks lie beyond the longest request this engine takes.",
            ));
        };
        if !self.core.grow_reservation(reservation, end * block_size) {
            return Err(
                ApiError::unavailable("This engine ran out of room for the request.")
                    .with_code("no_room"),
            );
        }
        self.dirty = true;
        let backend = self.backend.as_mut().expect("imports wait for the backend");
        backend
            .import_kv(&reservation.blocks()[chunk.first_block..end], &chunk.bytes)
            .map_err(|e| match e {
                KvMoveError::Device(_) => {
                    ApiError::internal(e.to_string()).with_code("import_failed")
                }
                _ => ApiError::invalid_request(e.to_string()).with_code("shape_mismatch"),
            })?;
        self.metrics.on_kv_moved("in", chunk.bytes.len() as u64);
        Ok(())
    }

    fn commit(&mut self, ticket: String, moved: MovedSeq) -> Result<(), ApiError> {
        let Some(reservation) = self.moves.incoming.remove(&ticket) else {
            return Err(unknown_ticket(&ticket));
        };
        // The handler checked the moved request's counts and ids (`server::migration`).
        let tokens = moved.tokens.clone();
        let seq = match self.core.take_in(moved, reservation, unix_now()) {
            Ok(seq) => seq,
            Err(back) => {
                let (_, reservation) = *back;
                self.core.cancel(reservation);
                return Err(ApiError::invalid_request(
                    "The KV sent does not cover the moved request.",
                ));
            }
        };
        self.dirty = true;
        let (events, receiver) = mpsc::unbounded_channel();
        self.routes.insert(seq, events);
        self.moves.following.insert(seq);
        self.moves.arrived.insert(
            ticket,
            (
                Attached {
                    seq,
                    events: receiver,
                },
                tokens,
            ),
        );
        Ok(())
    }

    fn attach(&mut self, ticket: &str, tokens: &[u32]) -> Result<Attached, ApiError> {
        let Some((arrived, expected)) = self.moves.arrived.remove(ticket) else {
            return Err(unknown_ticket(ticket));
        };
        if expected != tokens {
            self.moves
                .arrived
                .insert(ticket.to_string(), (arrived, expected));
            return Err(ApiError::invalid_request(
                "The prompt does not continue the moved request (its tokens differ).",
            )
            .with_code("ticket_mismatch"));
        }
        Ok(arrived)
    }
}

#[cfg(test)]
mod tests {
    use super::unsent_tokens;

    #[test]
    fn the_unsent_tokens_are_the_computed_ones_past_the_blocks_sent() {
        assert_eq!(unsent_tokens(100, 0, 16), 100);
        assert_eq!(unsent_tokens(100, 4, 16), 36);
        // The last block sent may be partly filled: nothing of it is left.
        assert_eq!(unsent_tokens(100, 7, 16), 0);
        assert_eq!(unsent_tokens(0, 3, 16), 0);
    }
}
