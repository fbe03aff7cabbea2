//! One request's generation: its choices submitted to the core, and their token events turned
//! into text deltas with stop strings applied. Completions and chat share it; each only shapes
//! the updates into its own response format.

use super::params::GenerationParams;
use crate::batching::SeqId;
use crate::core::{NewSeq, SeqEvent};
use crate::instance::{InFlight, Instance};
use crate::sampling::StopParams;
use crate::tokenizer::IncrementalDecoder;
use futures::stream::{SelectAll, StreamExt};
use futures::FutureExt;
use std::sync::Arc;
use switchyard_protocol::migration::{MigrateRequest, MigratedTo, MoveFirst};
use switchyard_protocol::openai::{ApiError, FinishReason, StopReason, Usage};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// A generated token with its log-probabilities.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    /// The token.
    pub token: u32,
    /// Its log-probability.
    pub logprob: f32,
    /// The most likely alternatives.
    pub top: Vec<(u32, f32)>,
}

/// News about one choice.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceUpdate {
    /// Choice index.
    pub index: u32,
    /// New text.
    pub text: String,
    /// Ids of the tokens generated since the previous update (their text may be held back).
    pub tokens: Vec<u32>,
    /// Log-probabilities of the new tokens (when asked for).
    pub logprobs: Vec<TokenLogprobs>,
    /// Set on the choice's last update.
    pub finish: Option<(FinishReason, Option<StopReason>)>,
    /// Set when the choice moved to another engine (its last update here, with no finish).
    pub moved: Option<MigratedTo>,
}

/// How a request's stream relates to live migration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Moves {
    /// Its client cannot follow a move: it stays here.
    #[default]
    Stay,
    /// Its client (a switchyard gateway) follows a move: it may move.
    Follow,
    /// As `Follow`, and it moves to this decode engine after its first token (prefill/decode
    /// disaggregation); if that fails it goes on here.
    HandOff(String),
    /// It continues a request that moved here under this ticket.
    Continue(String),
}

impl Moves {
    /// Whether the request continues one that moved here.
    pub fn continues(&self) -> bool {
        matches!(self, Moves::Continue(_))
    }
}

/// A finished choice, gathered whole for a non-streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectedChoice {
    /// The whole text.
    pub text: String,
    /// Log-probabilities of every token (when asked for).
    pub logprobs: Vec<TokenLogprobs>,
    /// Why it ended.
    pub finish: Option<(FinishReason, Option<StopReason>)>,
}

struct ChoiceState {
    seq: SeqId,
    prompt: usize,
    decoder: IncrementalDecoder,
    held: String,
    tokens: usize,
    cached_tokens: usize,
    done: bool,
}

type Tagged = futures::stream::Map<
    UnboundedReceiverStream<SeqEvent>,
    Box<dyn FnMut(SeqEvent) -> (usize, SeqEvent) + Send>,
>;

/// A request's choices in flight.
pub struct Generation {
    instance: Arc<Instance>,
    events: SelectAll<Tagged>,
    /// An event taken while looking for a choice's end, to be applied next.
    early: Option<(usize, SeqEvent)>,
    choices: Vec<ChoiceState>,
    prompt_lens: Vec<usize>,
    stop_strings: Vec<String>,
    hold_chars: usize,
    include_stop: bool,
    want_logprobs: bool,
    report_tokens: bool,
    _in_flight: InFlight,
}

impl Generation {
    /// Submits `n` choices for each prompt; on refusal, whatever was submitted is aborted. With
    /// `report_tokens`, every generated token makes an update, even while its text is held back.
    /// `moves` says whether the choices may move to another engine, or continue one that moved
    /// here (one prompt, one choice: the prompt is the moved request's tokens so far).
    pub async fn start(
        instance: &Arc<Instance>,
        request_id: &str,
        prompts: Vec<(Vec<u32>, u32)>,
        params: &GenerationParams,
        report_tokens: bool,
        moves: Moves,
    ) -> Result<Generation, ApiError> {
        let mut generation = Generation {
            instance: instance.clone(),
            events: SelectAll::new(),
            early: None,
            choices: Vec::new(),
            prompt_lens: prompts.iter().map(|p| p.0.len()).collect(),
            hold_chars: params
                .stop_strings
                .iter()
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(1)
                - 1,
            stop_strings: params.stop_strings.clone(),
            include_stop: params.include_stop_str,
            want_logprobs: params.sampling.logprobs.is_some(),
            report_tokens,
            _in_flight: instance.track(),
        };
        if params.unsent_tokens > 0 {
            let [(prompt, _)] = &prompts[..] else {
                return Err(ApiError::invalid_request(
                    "Unsent tokens continue exactly one prompt.",
                ));
            };
            if params.unsent_tokens > prompt.len() {
                return Err(ApiError::invalid_request(format!(
                    "{} unsent tokens is more than the prompt's {}.",
                    params.unsent_tokens,
                    prompt.len()
                )));
            }
        }
        if let Moves::Continue(ticket) = moves {
            let [(prompt, _)] = &prompts[..] else {
                return Err(ApiError::invalid_request(
                    "A moved request continues with exactly one prompt.",
                ));
            };
            if params.n != 1 {
                return Err(ApiError::invalid_param(
                    "n",
                    "A moved request has one choice.",
                ));
            }
            let attached = instance.attach(ticket, prompt.clone()).await?;
            generation.push_choice(attached.seq, 0, prompt, params, attached.events);
            return Ok(generation);
        }
        let hand_off_to = match &moves {
            Moves::HandOff(to) => Some(to.clone()),
            _ => None,
        };
        let follows = matches!(moves, Moves::Follow | Moves::HandOff(_));
        for (p, (prompt, max_tokens)) in prompts.into_iter().enumerate() {
            for i in 0..params.n {
                let mut sampling = params.sampling.clone();
                sampling.seed = sampling.seed.wrapping_add(i as u64);
                let (sender, receiver) = mpsc::unbounded_channel();
                let seq = instance
                    .add(
                        NewSeq {
                            request_id: request_id.to_string(),
                            prompt: prompt.clone(),
                            sampling,
                            stop: StopParams {
                                max_tokens,
                                ..params.stop.clone()
                            },
                            priority: params.priority,
                        },
                        sender,
                        follows,
                    )
                    .await
                    .map_err(|e| {
                        ApiError::rate_limited(format!("The engine is overloaded: {e}."), 1)
                    })?;
                generation.push_choice(seq, p, &prompt, params, receiver);
            }
        }
        if let Some(destination) = hand_off_to {
            hand_off(instance, request_id, destination);
        }
        Ok(generation)
    }

    /// Follows sequence `seq` of prompt number `p` as the next choice.
    fn push_choice(
        &mut self,
        seq: SeqId,
        p: usize,
        prompt: &[u32],
        params: &GenerationParams,
        events: mpsc::UnboundedReceiver<SeqEvent>,
    ) {
        let index = self.choices.len();
        self.choices.push(ChoiceState {
            seq,
            prompt: p,
            decoder: IncrementalDecoder::continuing(
                prompt,
                params.unsent_tokens,
                params.skip_special_tokens,
            ),
            held: String::new(),
            tokens: 0,
            cached_tokens: 0,
            done: false,
        });
        let tag: Box<dyn FnMut(SeqEvent) -> (usize, SeqEvent) + Send> =
            Box::new(move |e| (index, e));
        self.events
            .push(UnboundedReceiverStream::new(events).map(tag));
    }

    /// Number of choices.
    pub fn num_choices(&self) -> usize {
        self.choices.len()
    }

    /// The next update with news, or `None` once every choice has finished. A choice's end
    /// that has already arrived rides on its last token's update, as in vLLM, rather than
    /// making an update (and a streamed chunk) of its own.
    pub async fn next(&mut self) -> Option<ChoiceUpdate> {
        let mut update = self.next_event_update().await?;
        if update.finish.is_none() {
            match self.events.next().now_or_never() {
                Some(Some((index, SeqEvent::Finished(f)))) if index == update.index as usize => {
                    if let Some(end) = self.apply(index, SeqEvent::Finished(f)) {
                        update.text.push_str(&end.text);
                        update.finish = end.finish;
                    }
                }
                Some(Some(other)) => self.early = Some(other),
                _ => {}
            }
        }
        Some(update)
    }

    /// The update the next events make, one event at a time.
    async fn next_event_update(&mut self) -> Option<ChoiceUpdate> {
        loop {
            if self.choices.iter().all(|c| c.done) {
                return None;
            }
            let event = match self.early.take() {
                Some(event) => Some(event),
                None => self.events.next().await,
            };
            let Some((index, event)) = event else {
                // The core went away: end the unfinished choices with an error.
                let index = self.choices.iter().position(|c| !c.done)?;
                self.choices[index].done = true;
                return Some(ChoiceUpdate {
                    index: index as u32,
                    text: String::new(),
                    tokens: Vec::new(),
                    logprobs: Vec::new(),
                    finish: Some((FinishReason::Error, None)),
                    moved: None,
                });
            };
            if let Some(update) = self.apply(index, event) {
                return Some(update);
            }
        }
    }

    fn apply(&mut self, index: usize, event: SeqEvent) -> Option<ChoiceUpdate> {
        let tokenizer = self.instance.tokenizer.clone();
        let choice = &mut self.choices[index];
        if choice.done {
            if let SeqEvent::Finished(f) = event {
                choice.cached_tokens = f.cached_tokens;
            }
            return None;
        }
        let mut update = ChoiceUpdate {
            index: index as u32,
            text: String::new(),
            tokens: Vec::new(),
            logprobs: Vec::new(),
            finish: None,
            moved: None,
        };
        match event {
            SeqEvent::Token(_, sampled) => {
                choice.tokens += 1;
                update.tokens.push(sampled.token);
                if self.want_logprobs {
                    update.logprobs.push(TokenLogprobs {
                        token: sampled.token,
                        logprob: sampled.logprob.unwrap_or(0.0),
                        top: sampled.top,
                    });
                }
                let delta = choice.decoder.push(&tokenizer, sampled.token);
                choice.held.push_str(&delta);
                if let Some((end, stop)) =
                    find_stop(&choice.held, &self.stop_strings, self.include_stop)
                {
                    update.text = choice.held[..end].to_string();
                    choice.held.clear();
                    choice.done = true;
                    update.finish = Some((FinishReason::Stop, Some(StopReason::Text(stop))));
                    self.instance.abort(choice.seq, FinishReason::Stop);
                } else {
                    let keep_from = split_keeping_chars(&choice.held, self.hold_chars);
                    update.text = choice.held[..keep_from].to_string();
                    choice.held.drain(..keep_from);
                }
            }
            SeqEvent::Finished(f) => {
                choice.done = true;
                choice.cached_tokens = f.cached_tokens;
                update.text = std::mem::take(&mut choice.held);
                update.finish = Some((f.reason, f.stop_token.map(StopReason::Token)));
            }
            // Text held back stays unsent: the gateway reads it from the token ids it saw, as
            // it does when it resumes a broken stream.
            SeqEvent::Moved(_, to) => {
                choice.done = true;
                update.moved = Some(to);
            }
        }
        let news = !update.text.is_empty()
            || update.finish.is_some()
            || update.moved.is_some()
            || !update.logprobs.is_empty()
            || (self.report_tokens && !update.tokens.is_empty());
        news.then_some(update)
    }

    /// Runs every choice to its end.
    pub async fn collect(&mut self) -> Vec<CollectedChoice> {
        let mut choices = vec![
            CollectedChoice {
                text: String::new(),
                logprobs: Vec::new(),
                finish: None,
            };
            self.num_choices()
        ];
        while let Some(update) = self.next().await {
            let choice = &mut choices[update.index as usize];
            choice.text.push_str(&update.text);
            choice.logprobs.extend(update.logprobs);
            if update.finish.is_some() {
                choice.finish = update.finish;
            }
        }
        choices
    }

    /// Token counts so far (prompts once each, all choices' output).
    pub fn usage(&self) -> Usage {
        let prompt: usize = self.prompt_lens.iter().sum();
        let completion: usize = self.choices.iter().map(|c| c.tokens).sum();
        let mut cached = vec![0usize; self.prompt_lens.len()];
        for c in &self.choices {
            cached[c.prompt] = cached[c.prompt].max(c.cached_tokens);
        }
        Usage::new(
            prompt as u64,
            completion as u64,
            cached.iter().sum::<usize>() as u64,
        )
    }

    /// Which prompt a choice belongs to.
    pub fn prompt_of(&self, index: u32) -> usize {
        self.choices[index as usize].prompt
    }

    /// A choice's prompt tokens, and how many of them the prefix cache served (known once the
    /// choice has finished; 0 before).
    pub fn prompt_tokens_of(&self, index: u32) -> (usize, usize) {
        let choice = &self.choices[index as usize];
        (self.prompt_lens[choice.prompt], choice.cached_tokens)
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        for c in self.choices.iter().filter(|c| !c.done) {
            self.instance.abort(c.seq, FinishReason::Abort);
        }
    }
}

/// Hands request `request_id` to the decode engine at `destination`, without waiting: its KV
/// is copied as its prompt is computed, and it moves at its first token; if that fails it goes
/// on here.
fn hand_off(instance: &Arc<Instance>, request_id: &str, destination: String) {
    let instance = instance.clone();
    let ask = MigrateRequest {
        destination,
        request_id: Some(request_id.to_string()),
        requests: 1,
        reason: Some("pd".into()),
        first: MoveFirst::LeastKv,
        hand_off: true,
    };
    tokio::spawn(async move {
        let answer = crate::mover::migrate(&instance, &ask).await;
        for failed in &answer.failed {
            let here = match failed.reason.as_str() {
                "finished" => "it ended here",
                _ => "it goes on here",
            };
            tracing::info!(
                "{}: the hand-off of {} to {} failed ({}); {here}",
                instance.info.name,
                ask.request_id.as_deref().unwrap_or_default(),
                ask.destination,
                failed.message
            );
        }
    });
}

/// The earliest stop string in `text`: where the emitted text ends, and the stop string.
fn find_stop(text: &str, stops: &[String], include: bool) -> Option<(usize, String)> {
    stops
        .iter()
        .filter_map(|s| text.find(s.as_str()).map(|at| (at, s)))
        .min_by_key(|(at, _)| *at)
        .map(|(at, s)| (if include { at + s.len() } else { at }, s.clone()))
}

/// Byte index before the last `keep` characters of `text`.
fn split_keeping_chars(text: &str, keep: usize) -> usize {
    if keep == 0 {
        return text.len();
    }
    text.char_indices()
        .rev()
        .nth(keep - 1)
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_search_and_hold_back() {
        let stops = vec!["END".to_string(), "x".to_string()];
        assert_eq!(find_stop("abcENDx", &stops, false), Some((3, "END".into())));
        assert_eq!(find_stop("abcENDx", &stops, true), Some((6, "END".into())));
        assert_eq!(find_stop("abc", &stops, false), None);
        assert_eq!(split_keeping_chars("héllo", 2), 4);
        assert_eq!(split_keeping_chars("hi", 5), 0);
        assert_eq!(split_keeping_chars("hi", 0), 2);
    }
}
