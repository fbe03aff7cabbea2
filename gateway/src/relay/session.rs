//! One request's upstream answer, read event by event and handed to the client: relayed as a
//! stream the moment each event is whole, or assembled into one JSON. When a pool instance's
//! stream breaks, the request resumes on another instance with the prompt plus the tokens
//! already generated, asking only for what is left; the client sees one stream (exact for
//! greedy decoding). When nothing can resume it, a stream ends with an error event and `[DONE]`.
//! When an engine moves a request to another engine (live migration), its stream ends naming
//! the destination and a ticket, and the session continues from the destination's stream, where
//! the request goes on exactly as it would have (its KV and sampling state moved with it).

use crate::metrics::GatewayMetrics;
use crate::relay::assemble::Assembler;
use crate::relay::chunk::{ChunkView, HeadKept};
use crate::relay::observe::RelayObserver;
use crate::shared::{deadline_error, Alarm, Prepared, Route};
use crate::upstream::answer::AnswerBody;
use crate::upstream::engine_request::{Resume, UpstreamRequest};
use crate::upstream::open::{Opened, Opener, PoolAsk, ReleaseOnDrop};
use axum::body::Body;
use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_http::sse::SseSplitter;
use switchyard_protocol::migration::MigratedTo;
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::schedule::{EngineKind, Observed};
use switchyard_text::tokenizer::{IncrementalDecoder, Tokenizer};

/// What the session read next.
pub enum Step {
    /// A chunk's JSON, with what the gateway reads of it.
    Chunk(Bytes, Option<ChunkView>),
    /// The answer is complete.
    Done,
    /// The answer broke off and could not be resumed.
    Failed(ApiError),
}

/// How a session may resume a broken pool stream.
pub struct ResumeWith {
    /// The request as prepared for the pool model.
    pub prepared: Prepared,
    /// The pool model's tokenizer, to recover text an engine held back.
    pub tokenizer: Arc<Tokenizer>,
    /// Most resumptions of one request.
    pub max_resumes: u32,
}

/// Reads one request's answer.
pub struct Session {
    opener: Arc<Opener>,
    metrics: Arc<GatewayMetrics>,
    request_id: String,
    label: String,
    upstream: Arc<UpstreamRequest>,
    deadline: tokio::time::Instant,
    body: AnswerBody,
    splitter: SseSplitter,
    instance: String,
    kind: Option<EngineKind>,
    /// The pool model the answer comes from (`None` from an external endpoint).
    pool_model: Option<String>,
    /// Set when the engine said the request moved: where to continue.
    follow: Option<MigratedTo>,
    release: Option<ReleaseOnDrop>,
    resume: Option<ResumeWith>,
    resumes: u32,
    excluded: Vec<String>,
    generated: Vec<u32>,
    sent_text: String,
    /// Tokens generated before the latest resumption, once resumed.
    resumed_after: Option<usize>,
    last_chunk: Option<Bytes>,
    held: Option<Bytes>,
    /// Choices that ended so far.
    finished: usize,
    /// Set when chunks are read keeping what their assembly into one answer needs: the head
    /// fields kept so far.
    assembly: Option<HeadKept>,
    /// Whether the current upstream has sent a chunk (it is past its prefill).
    upstream_started: bool,
    /// When the current upstream last sent bytes (or was opened).
    last_heard: tokio::time::Instant,
    /// Wakes the session at the stall or deadline check; re-armed only when it fires early or
    /// must fire earlier, not on every chunk, so relaying a chunk touches no timer. It is the
    /// request's one timer, which also timed the opening of its answer.
    alarm: Alarm,
}

impl Session {
    /// A session over an opened answer; `resume` when the request may resume elsewhere;
    /// `alarm` is the request's timer.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        opener: Arc<Opener>,
        metrics: Arc<GatewayMetrics>,
        request_id: String,
        label: String,
        upstream: Arc<UpstreamRequest>,
        deadline: tokio::time::Instant,
        opened: Opened,
        resume: Option<ResumeWith>,
        alarm: Alarm,
    ) -> Self {
        let resume = resume.filter(|_| upstream.resumable());
        Session {
            opener,
            metrics,
            request_id,
            label,
            upstream,
            deadline,
            body: opened.response.body,
            splitter: SseSplitter::default(),
            instance: opened.instance.clone(),
            kind: opened.kind,
            pool_model: opened.pool_model,
            follow: None,
            excluded: vec![opened.instance],
            release: opened.release,
            resume,
            resumes: 0,
            generated: Vec::new(),
            sent_text: String::new(),
            resumed_after: None,
            last_chunk: None,
            held: None,
            finished: 0,
            assembly: None,
            upstream_started: false,
            last_heard: tokio::time::Instant::now(),
            alarm,
        }
    }

    /// Reads a chunk, keeping what assembly needs if the answer is being assembled.
    fn read(&mut self, data: &[u8]) -> Option<ChunkView> {
        match &mut self.assembly {
            Some(kept) => {
                let view = ChunkView::parse_for_assembly(data, *kept)?;
                kept.add(&view);
                Some(view)
            }
            None => ChunkView::parse(data),
        }
    }

    /// The next step that is already here, without waiting for the upstream.
    pub fn ready(&mut self) -> Option<Step> {
        if let Some(held) = self.held.take() {
            let view = self.read(&held);
            return Some(Step::Chunk(held, view));
        }
        while let Some(event) = self.splitter.next_event() {
            if event.is_done() {
                return Some(Step::Done);
            }
            self.generated.extend_from_slice(&event.token_ids);
            if let Some(to) = event.migrated {
                self.follow = Some(to);
                return None;
            }
            let Some(data) = event.data else { continue };
            let Some(data) = self.rewrite_resumed(data) else {
                continue;
            };
            self.upstream_started = true;
            let view = self.read(&data);
            if let Some(view) = &view {
                self.finished += view
                    .choices
                    .iter()
                    .filter(|c| c.finish_reason.is_some())
                    .count();
                if self.resume.is_some() && !view.choices.is_empty() {
                    if let Some(c) = view.choices.first() {
                        self.sent_text.push_str(c.new_text());
                    }
                    self.last_chunk = Some(data.clone());
                }
            }
            return Some(Step::Chunk(data, view));
        }
        None
    }

    /// When the session must next look up: the stall check of a watched upstream, or the
    /// request's deadline.
    fn due(&self) -> tokio::time::Instant {
        if self.watched_for_stalls() {
            let idle = self.opener.stream_idle_timeout();
            self.deadline.min(self.last_heard + idle)
        } else {
            self.deadline
        }
    }

    /// The next step of the answer.
    pub async fn next(&mut self) -> Step {
        loop {
            if let Some(step) = self.ready() {
                return step;
            }
            if let Some(to) = self.follow.take() {
                if let Err(e) = self.follow_move(to).await {
                    return Step::Failed(e);
                }
                continue;
            }
            let due = self.due();
            if due < self.alarm.deadline() {
                self.alarm.as_mut().reset(due);
            }
            let read = tokio::select! {
                biased;
                item = self.body.next() => Some(item),
                () = self.alarm.as_mut() => None,
            };
            let broken = match read {
                None => {
                    let due = self.due();
                    if tokio::time::Instant::now() < due {
                        self.alarm.as_mut().reset(due);
                        continue;
                    }
                    if due >= self.deadline {
                        return Step::Failed(deadline_error());
                    }
                    let idle = self.opener.stream_idle_timeout();
                    format!("{} sent nothing for {idle:?}", self.instance)
                }
                Some(Some(Ok(bytes))) => {
                    self.last_heard = tokio::time::Instant::now();
                    self.splitter.push(&bytes);
                    continue;
                }
                // Every choice ended: only the usage chunk or `[DONE]` was lost.
                Some(_) if self.all_finished() => return Step::Done,
                Some(Some(Err(e))) => format!("the stream from {} broke: {e}", self.instance),
                Some(None) => format!("{} ended its stream early", self.instance),
            };
            if let Err(e) = self.resume_elsewhere(&broken).await {
                return Step::Failed(e);
            }
            self.last_heard = tokio::time::Instant::now();
        }
    }

    /// Whether the upstream's silence for the stream idle timeout breaks its stream: a
    /// switchyard engine's always (it sends keep-alives while a request waits or prefills), other
    /// pool engines' once their first chunk came; an external endpoint has only the deadline.
    fn watched_for_stalls(&self) -> bool {
        let pinged = self.kind == Some(EngineKind::Switchyard);
        pinged || (self.kind.is_some() && self.upstream_started)
    }

    fn all_finished(&self) -> bool {
        self.finished >= self.upstream.choices() && !self.splitter.has_partial()
    }

    /// Re-issues the request on another instance after its stream broke with `why`.
    async fn resume_elsewhere(&mut self, why: &str) -> Result<(), ApiError> {
        tracing::warn!("{}: {why}", self.request_id);
        self.opener.on_broken(&self.instance);
        let failed = |metrics: &GatewayMetrics, label: &str, message: String| {
            metrics.on_continuation(label, "failed");
            Err(ApiError::bad_gateway(message))
        };
        // Text sent without token ids cannot be resumed exactly.
        let ids_cover_text = !self.generated.is_empty() || self.sent_text.is_empty();
        let resumable = self.kind == Some(EngineKind::Switchyard)
            && ids_cover_text
            && self
                .resume
                .as_ref()
                .is_some_and(|r| self.resumes < r.max_resumes);
        let Some(resume) = self.resume.as_ref().filter(|_| resumable) else {
            return failed(
                &self.metrics,
                &self.label,
                format!("The answer broke off: {why}."),
            );
        };
        self.splitter = SseSplitter::default();
        self.upstream_started = false;
        self.release = None;
        let (held, unsent) = self.unseen_text();
        let opener = self.opener.clone();
        let opened = opener
            .open_pool(
                PoolAsk {
                    request_id: &self.request_id,
                    label: &self.label,
                    prepared: &resume.prepared,
                    upstream: &self.upstream,
                    resume: Some(Resume {
                        generated: &self.generated,
                        unsent,
                    }),
                    exclude: self.excluded.clone(),
                    deadline: self.deadline,
                },
                &mut self.alarm,
            )
            .await;
        let opened = match opened {
            Err(_) if tokio::time::Instant::now() >= self.deadline => {
                return failed(
                    &self.metrics,
                    &self.label,
                    "The request's deadline passed while resuming.".into(),
                )
            }
            Err(e) => {
                return failed(
                    &self.metrics,
                    &self.label,
                    format!(
                        "The answer broke off ({why}) and could not resume: {}",
                        e.body.error.message
                    ),
                )
            }
            Ok(o) if !o.is_success() || o.kind != Some(EngineKind::Switchyard) => {
                let status = o.response.status;
                return failed(&self.metrics, &self.label, format!("The answer broke off ({why}) and the instance to resume on answered {status}."));
            }
            Ok(o) => o,
        };
        tracing::info!(
            "{}: resuming on {} after {} tokens",
            self.request_id,
            opened.instance,
            self.generated.len()
        );
        self.metrics.on_continuation(&self.label, "resumed");
        self.resumes += 1;
        self.resumed_after = Some(self.generated.len());
        self.instance = opened.instance.clone();
        self.excluded.push(opened.instance);
        self.kind = opened.kind;
        self.body = opened.response.body;
        self.release = opened.release;
        self.held = self.held_chunk(held);
        Ok(())
    }

    /// Continues the answer on the engine the request moved to; if that fails, resumes it
    /// elsewhere by recomputation, as a broken stream.
    async fn follow_move(&mut self, to: MigratedTo) -> Result<(), ApiError> {
        let (held, unsent) = self.unseen_text();
        let opened = match (&self.pool_model, self.upstream.prompt()) {
            (Some(model), Some(_)) => {
                let resume = Resume {
                    generated: &self.generated,
                    unsent,
                };
                let body = self
                    .upstream
                    .for_pool(model, EngineKind::Switchyard, Some(resume));
                self.opener
                    .open_moved(
                        &to.destination,
                        &to.ticket,
                        &self.upstream,
                        &self.request_id,
                        body,
                        unsent,
                    )
                    .await
            }
            _ => Err(std::io::Error::other(
                "the request cannot continue from its tokens",
            )),
        };
        let from = std::mem::replace(&mut self.instance, to.destination.clone());
        self.excluded.push(to.destination.clone());
        let answer = match opened {
            Ok(answer) if answer.is_success() => answer,
            Ok(answer) => {
                let why = format!(
                    "{from} moved the request to {} and that answered {} to its continuation",
                    to.destination, answer.status
                );
                return self.resume_elsewhere(&why).await;
            }
            Err(e) => {
                let why = format!(
                    "{from} moved the request to {}, which could not be reached: {e}",
                    to.destination
                );
                return self.resume_elsewhere(&why).await;
            }
        };
        tracing::info!(
            "{}: moved from {from} to {} after {} tokens",
            self.request_id,
            to.destination,
            self.generated.len()
        );
        self.metrics.on_continuation(&self.label, "migrated");
        if let Some(release) = self.release.as_mut() {
            release.moved();
        }
        self.splitter = SseSplitter::default();
        self.resumed_after = Some(self.generated.len());
        self.kind = Some(EngineKind::Switchyard);
        self.body = answer.body;
        self.last_heard = tokio::time::Instant::now();
        self.held = self.held_chunk(held);
        Ok(())
    }

    /// The answer ended whole, and its client saw `observed`: the scheduler compares it with
    /// its predictions for the instance, unless the request resumed elsewhere on the way.
    fn finished(&mut self, observed: Observed) {
        if let (Some(release), None) = (self.release.as_mut(), self.resumed_after) {
            release.finished(observed);
        }
    }

    /// What the client has not seen of the generated tokens' text, when the answer goes on
    /// elsewhere: the whole text the last engine held back (while it could have been the start
    /// of a stop string), and how many of the last tokens end in an unfinished character, which
    /// the next engine sends with its first text ([`Resume::unsent`]).
    fn unseen_text(&self) -> (String, usize) {
        let (Some(resume), Some(prompt)) = (self.resume.as_ref(), self.upstream.prompt()) else {
            return (String::new(), 0);
        };
        let Some((whole, unsent)) =
            IncrementalDecoder::whole_text(&resume.tokenizer, prompt, &self.generated, true)
        else {
            return (String::new(), 0);
        };
        let held = whole
            .strip_prefix(self.sent_text.as_str())
            .unwrap_or_default();
        (held.to_string(), unsent)
    }

    /// A chunk with `held`, text the last instance generated but had not sent, shaped as its
    /// last chunk was; `None` when there is none.
    fn held_chunk(&mut self, held: String) -> Option<Bytes> {
        if held.is_empty() {
            return None;
        }
        let mut chunk: Value = serde_json::from_slice(self.last_chunk.as_ref()?).ok()?;
        let choice = match self.upstream.route() {
            Route::Chat => json!({"index": 0, "delta": {"content": held}, "finish_reason": null}),
            // Completions (the routes relayed as sent never make a chunk here).
            _ => json!({"index": 0, "text": held, "finish_reason": null}),
        };
        chunk["choices"] = json!([choice]);
        if let Some(map) = chunk.as_object_mut() {
            map.remove("usage");
        }
        self.sent_text.push_str(&held);
        Some(Bytes::from(chunk.to_string()))
    }

    /// After a resumption: usage counts the whole request again, and the new instance's opening
    /// role chunk is dropped.
    fn rewrite_resumed(&self, data: Bytes) -> Option<Bytes> {
        let (Some(before), Some(resume)) = (self.resumed_after, &self.resume) else {
            return Some(data);
        };
        let Ok(mut chunk) = serde_json::from_slice::<Value>(&data) else {
            return Some(data);
        };
        if let Some(delta) = chunk["choices"][0].get("delta") {
            let opening = delta.get("role").is_some()
                && delta["content"].as_str().unwrap_or_default().is_empty()
                && chunk["choices"][0]["finish_reason"].is_null();
            if opening {
                return None;
            }
        }
        if let Some(usage) = chunk.get_mut("usage").filter(|u| u.is_object()) {
            let prompt = resume.prepared.prompt_tokens as u64;
            let completion = usage["completion_tokens"].as_u64().unwrap_or(0) + before as u64;
            usage["prompt_tokens"] = prompt.into();
            usage["completion_tokens"] = completion.into();
            usage["total_tokens"] = (prompt + completion).into();
        }
        Some(Bytes::from(chunk.to_string()))
    }
}

/// The stream's last event.
const DONE: &[u8] = b"data: [DONE]\n\n";

/// Appends one SSE event carrying `data`.
fn put_frame(out: &mut BytesMut, data: &[u8]) {
    out.reserve(data.len() + 8);
    out.put_slice(b"data: ");
    out.put_slice(data);
    out.put_slice(b"\n\n");
}

/// Relay work of one request, for `request_postprocess_duration_milliseconds`.
struct WorkTimer {
    metrics: Arc<GatewayMetrics>,
    label: String,
    spent: Duration,
}

impl Drop for WorkTimer {
    fn drop(&mut self) {
        self.metrics
            .on_postprocessed(&self.label, self.spent.as_secs_f64() * 1000.0);
    }
}

/// The client's stream: each chunk as it is whole, the usage chunk only if asked for, and an
/// error event before `[DONE]` if the answer broke off.
pub fn stream_body(mut session: Session, mut observer: RelayObserver) -> Body {
    let include_usage = session.upstream.wants_stream_usage();
    let mut timer = WorkTimer {
        metrics: session.metrics.clone(),
        label: session.label.clone(),
        spent: Duration::ZERO,
    };
    let events = async_stream::stream! {
        let mut step = session.next().await;
        loop {
            // Everything already here goes out in one write.
            let started = Instant::now();
            let mut out = BytesMut::new();
            let mut ended = false;
            loop {
                match step {
                    Step::Chunk(data, view) => {
                        let skip = view.as_ref().is_some_and(|v| {
                            observer.observe(v, started);
                            v.is_usage_only() && !include_usage
                        });
                        if !skip {
                            put_frame(&mut out, &data);
                        }
                    }
                    Step::Done => {
                        session.finished(observer.observed(Instant::now()));
                        out.put_slice(DONE);
                        ended = true;
                    }
                    Step::Failed(e) => {
                        put_frame(&mut out, &serde_json::to_vec(&e.body).unwrap_or_default());
                        out.put_slice(DONE);
                        ended = true;
                    }
                }
                match session.ready() {
                    Some(next) if !ended => step = next,
                    _ => break,
                }
            }
            timer.spent += started.elapsed();
            if !out.is_empty() {
                yield Ok::<Bytes, std::convert::Infallible>(out.freeze());
            }
            if ended {
                break;
            }
            step = session.next().await;
        }
    };
    Body::from_stream(events)
}

/// The whole answer as one JSON, or the error that ended it.
pub async fn collect(
    mut session: Session,
    mut observer: RelayObserver,
) -> Result<Vec<u8>, ApiError> {
    session.assembly = Some(HeadKept::default());
    let mut assembler = Assembler::new(session.upstream.route());
    let mut timer = WorkTimer {
        metrics: session.metrics.clone(),
        label: session.label.clone(),
        spent: Duration::ZERO,
    };
    loop {
        let step = session.next().await;
        let started = Instant::now();
        match step {
            Step::Chunk(data, view) => {
                let Some(view) = view else {
                    return Err(ApiError::bad_gateway(format!(
                        "The upstream sent a chunk that is not a completion chunk: {}",
                        String::from_utf8_lossy(&data[..data.len().min(200)])
                    )));
                };
                if let Some(error) = &view.error {
                    let error: Value = serde_json::from_str(error.get()).unwrap_or_default();
                    let message = error["message"].as_str().unwrap_or("unknown error");
                    return Err(ApiError::bad_gateway(format!(
                        "The upstream failed: {message}"
                    )));
                }
                observer.observe(&view, started);
                assembler.push(view);
            }
            Step::Done => {
                session.finished(observer.observed(Instant::now()));
                let out = assembler.finish();
                timer.spent += started.elapsed();
                return Ok(out);
            }
            Step::Failed(e) => return Err(e),
        }
        timer.spent += started.elapsed();
    }
}
