//! The gateway's floor: the types every wing shares (what a request is and where it may go,
//! the model it is prepared for, a breaker's state), the request's one timer and its deadline
//! error. It imports nothing of the wings above it.

pub mod raw_object;

use std::pin::Pin;
use std::sync::Arc;
use switchyard_protocol::model_description::ModelDescription;
use switchyard_protocol::openai::{ApiError, SamplingDefaults};
use switchyard_protocol::secret::Secret;
use switchyard_text::chat_template::ChatTemplate;
use switchyard_text::tokenizer::Tokenizer;
use tokio::time::Sleep;

/// A model the gateway serves, with what preprocessing needs of it.
#[derive(Debug, Clone)]
pub struct ServedModel {
    /// The name clients use.
    pub name: String,
    /// The engines' tokenizer; `None` for engines that take text and whose tokenizer the
    /// gateway was not given: their requests go as the client sent them, placed without
    /// prefix hashes.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// The engines' chat template, if any.
    pub chat_template: Option<Arc<ChatTemplate>>,
    /// Tokens per block of the hashes.
    pub block_size: usize,
    /// The engines' context length, where the gateway knows it: prompts and `max_tokens` that
    /// do not fit are refused here rather than by the engine a request was placed on.
    pub max_model_len: Option<usize>,
    /// The model's defaults for sampling fields a request leaves out, so that the gateway
    /// checks a request exactly as the engines will.
    pub defaults: SamplingDefaults,
}

impl ServedModel {
    /// The model a switchyard engine describes.
    pub fn from_description(d: &ModelDescription) -> Result<Self, String> {
        let tokenizer = Tokenizer::from_json(&d.tokenizer_json, d.eos_token_ids.clone())
            .map_err(|e| e.to_string())?;
        let chat_template = d
            .chat_template
            .as_ref()
            .map(ChatTemplate::from_source)
            .transpose()
            .map_err(|e| format!("chat template: {e}"))?;
        Ok(ServedModel {
            name: d.name.clone(),
            tokenizer: Some(Arc::new(tokenizer)),
            chat_template: chat_template.map(Arc::new),
            block_size: d.block_size,
            max_model_len: Some(d.max_model_len),
            defaults: d.generation_defaults,
        })
    }

    /// A model whose requests the gateway forwards as text, knowing nothing of its tokens.
    pub fn text_only(name: String, block_size: usize) -> Self {
        ServedModel {
            name,
            tokenizer: None,
            chat_template: None,
            block_size,
            max_model_len: None,
            defaults: SamplingDefaults::default(),
        }
    }
}

/// The routes a request can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    Chat,
    /// A pooling model's route (vLLM's, SGLang's): answered whole, relayed as the instance
    /// sent it.
    Whole(Pooling),
    /// `/v1/responses` (vLLM's, SGLang's): relayed as the instance sent it, whole or streamed.
    Responses,
    /// SGLang's native `/generate` (SGLang's and switchyard's engines): placed as the
    /// completion it amounts to, relayed as the instance sent it, whole or streamed.
    Generate,
    /// Anthropic's `/v1/messages` (vLLM's, SGLang's): relayed as the instance sent it, whole or
    /// streamed.
    Messages,
    /// Anthropic's `/v1/messages/count_tokens` (vLLM's): relayed whole as the instance sent it.
    CountTokens,
}

/// The pooling routes, answered whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// `/v1/embeddings`.
    Embeddings,
    /// vLLM's `/classify`.
    Classify,
    /// vLLM's `/pooling`.
    Pooling,
    /// `/v1/rerank` (and vLLM's `/rerank` and `/v2/rerank`).
    Rerank,
    /// `/v1/score` (vLLM's and SGLang's; vLLM's `/score`).
    Score,
}

impl Route {
    /// Whether the answer is relayed as the instance sent it (whole, or a stream the gateway
    /// does not read), and the body goes upstream as the client sent it: no stream to resume.
    pub fn relayed_as_sent(self) -> bool {
        !matches!(self, Route::Completions | Route::Chat)
    }

    /// Whether the answer is generated text relayed as the instance sent it, whose stream the
    /// gateway watches for its token metrics ([`crate::relay::watch`]).
    pub fn watched(self) -> bool {
        matches!(self, Route::Generate | Route::Messages | Route::Responses)
    }

    /// Whether the route is Anthropic's Messages API, whose errors take its own shape.
    pub fn speaks_anthropic(self) -> bool {
        matches!(self, Route::Messages | Route::CountTokens)
    }

    /// The path on the engine.
    pub fn path(self) -> &'static str {
        match self {
            Route::Completions => "/v1/completions",
            Route::Chat => "/v1/chat/completions",
            Route::Whole(Pooling::Embeddings) => "/v1/embeddings",
            Route::Whole(Pooling::Classify) => "/classify",
            Route::Whole(Pooling::Pooling) => "/pooling",
            Route::Whole(Pooling::Rerank) => "/v1/rerank",
            Route::Whole(Pooling::Score) => "/v1/score",
            Route::Responses => "/v1/responses",
            Route::Generate => "/generate",
            Route::Messages => "/v1/messages",
            Route::CountTokens => "/v1/messages/count_tokens",
        }
    }
}

/// A request ready to schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// The served model.
    pub model: String,
    /// Prompt tokens (all prompts of a batch together).
    pub prompt_tokens: u32,
    /// Chained block hashes of the (first) prompt.
    pub block_hashes: Vec<u64>,
    /// Requested `max_tokens`, if any.
    pub max_tokens: u32,
    /// Requested priority.
    pub priority: i64,
    /// The tokenized prompts (completions: each prompt; chat: the rendered conversation);
    /// empty for a model without a tokenizer, whose requests go upstream as sent.
    pub prompt_ids: Vec<Vec<u32>>,
    /// The stored response it continues (`/v1/responses`), whose instance alone may take it.
    pub previous_response_id: Option<String>,
    /// The session it belongs to, kept on one instance while that is within its load bound.
    pub session: Option<String>,
}

impl Prepared {
    /// A request for `model` placed by its size alone: `prompt_tokens` counted or estimated,
    /// no prefix hashes, no prompt ids (its body goes upstream as sent), `max_tokens` asked
    /// (0: unknown).
    pub fn unhashed(model: &ServedModel, prompt_tokens: u32, max_tokens: u32) -> Self {
        Prepared {
            model: model.name.clone(),
            prompt_tokens,
            block_hashes: Vec::new(),
            max_tokens,
            priority: 0,
            prompt_ids: Vec::new(),
            previous_response_id: None,
            session: None,
        }
    }
}

/// An external OpenAI-compatible endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Its name in the config.
    pub name: String,
    /// Base URL, without `/v1/...`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer KEY`.
    pub api_key: Option<Secret>,
    /// The model name to ask for there (default: the client's).
    pub model: Option<String>,
}

/// Where one attempt goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// The internal pool's instances of a served model.
    Pool(String),
    /// An external endpoint.
    External(Arc<Endpoint>),
}

impl Target {
    /// A name for metrics and logs.
    pub fn name(&self) -> &str {
        match self {
            Target::Pool(_) => "pool",
            Target::External(e) => &e.name,
        }
    }
}

/// What to do with one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The configured model name (the `model` label).
    pub label: String,
    /// Targets in the order to try: the weighted pick, then the fallback chain.
    pub attempts: Vec<Target>,
    /// An external endpoint that gets a copy of the request.
    pub mirror: Option<Arc<Endpoint>>,
}

/// A breaker's state, as exported (`gateway_circuit_breaker_state`: 0, 1, 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests flow.
    Closed = 0,
    /// Requests are kept away until the cooldown ends.
    Open = 1,
    /// One probe request is allowed through.
    HalfOpen = 2,
}

/// A request's one timer, re-armed for whatever the request waits on next (an instance's first
/// byte, a backoff, a stalled stream, the deadline) instead of a timer for each wait.
pub type Alarm = Pin<Box<Sleep>>;

/// The error of a request whose `--request-timeout` passed.
pub fn deadline_error() -> ApiError {
    let mut e = ApiError::unavailable("The request's deadline (--request-timeout) passed.")
        .with_code("request_timeout");
    e.status = 504;
    e
}
