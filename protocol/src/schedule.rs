//! The schedule API between gateway and scheduler (`POST /v1/schedule`, `/v1/release`,
//! `/v1/report`, `GET /v1/instances`), and the same operations in process.

use serde::{Deserialize, Serialize};

/// What a request will do on the instance it lands on (prefill/decode disaggregation).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum InferStage {
    /// The whole request on one instance.
    #[default]
    Neutral,
    /// Only the prefill.
    Prefill,
    /// Only the decode.
    Decode,
}

impl std::str::FromStr for InferStage {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "neutral" => Ok(InferStage::Neutral),
            "prefill" => Ok(InferStage::Prefill),
            "decode" => Ok(InferStage::Decode),
            other => Err(format!(
                "unknown role {other:?} (expected prefill, decode or neutral)"
            )),
        }
    }
}

impl InferStage {
    /// The name used in metric labels (`infer_type`).
    pub fn as_str(self) -> &'static str {
        match self {
            InferStage::Neutral => "neutral",
            InferStage::Prefill => "prefill",
            InferStage::Decode => "decode",
        }
    }
}

/// Where should this request run?
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ScheduleRequest {
    /// The request id (`x-request-id`), used to release and reconcile it.
    pub request_id: String,
    /// Served model name.
    pub model: String,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Chained hashes of the prompt's full blocks (see [`crate::hashing`]).
    #[serde(default)]
    pub block_hashes: Vec<u64>,
    /// Most tokens it may generate.
    #[serde(default)]
    pub max_tokens: u32,
    /// Lower runs first.
    #[serde(default)]
    pub priority: i64,
    /// Which stage this placement is for.
    #[serde(default)]
    pub infer_stage: InferStage,
    /// Instances not to use (they failed this request already).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// The only instance to use, when the request's state lives there: no other is a
    /// candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<String>,
    /// The stored response (`/v1/responses`) this request continues: it is placed on the
    /// instance holding it, or refused when the scheduler knows no such response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_response_id: Option<String>,
    /// The session it belongs to (OpenAI's `prompt_cache_key`, or an `x-session-id` header):
    /// kept on the session's instance while that is not over its load bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The gateway asking, so its accounting can be reclaimed if it disappears.
    #[serde(default)]
    pub gateway: Option<String>,
    /// Requests of the same gateway that ended since it last asked: released before this one is
    /// placed, instead of each in a `/v1/release` of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<Released>,
}

/// What a client saw of a request, for the scheduler to check its predictions against.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Observed {
    /// Time to first token, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Time per output token after the first, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    /// What became of its prefill/decode hand-off, when its placement asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hand_off: Option<HandOffOutcome>,
    /// Tokens of its answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
}

/// What became of a prefill/decode hand-off: the `outcome` of `scheduler_pd_handoff_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandOffOutcome {
    /// The request moved to its decode instance.
    Done,
    /// It finished on its prefill instance (the decode side could not take it).
    FellBack,
    /// It failed before either.
    Failed,
}

impl HandOffOutcome {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            HandOffOutcome::Done => "done",
            HandOffOutcome::FellBack => "fell_back",
            HandOffOutcome::Failed => "failed",
        }
    }
}

/// A request released along with a placement request: its id (on the wire a bare string, as
/// before) or its id and what its client saw.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(from = "ReleasedWire")]
pub struct Released {
    /// The request id.
    pub request_id: String,
    /// What its client saw, when it finished.
    #[serde(flatten)]
    pub observed: Observed,
}

impl From<&str> for Released {
    fn from(request_id: &str) -> Self {
        Released {
            request_id: request_id.to_string(),
            observed: Observed::default(),
        }
    }
}

/// The two forms a released request takes on the wire.
#[derive(Deserialize)]
#[serde(untagged)]
enum ReleasedWire {
    Id(String),
    Observed {
        request_id: String,
        #[serde(flatten)]
        observed: Observed,
    },
}

impl From<ReleasedWire> for Released {
    fn from(wire: ReleasedWire) -> Self {
        match wire {
            ReleasedWire::Id(request_id) => Released {
                request_id,
                observed: Observed::default(),
            },
            ReleasedWire::Observed {
                request_id,
                observed,
            } => Released {
                request_id,
                observed,
            },
        }
    }
}

/// What kind of engine an instance runs, which decides how its state is read and what its API
/// takes beyond OpenAI's.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// switchyard's engine: state stream and KV events; token-id prompts in completions and chat,
    /// and generated token ids in streams.
    #[default]
    Switchyard,
    /// vLLM: `/metrics` scraped; token-id prompts in completions.
    Vllm,
    /// SGLang: `/metrics` scraped.
    Sglang,
    /// FastDeploy: `/metrics` scraped.
    #[serde(rename = "fastdeploy")]
    FastDeploy,
    /// MindIE: `/metrics` scraped.
    #[serde(rename = "mindie")]
    MindIe,
}

/// The chosen instance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScheduleDecision {
    /// Instance id.
    pub instance_id: String,
    /// Base URL of the instance.
    pub endpoint: String,
    /// Prompt tokens the instance is expected to have cached.
    pub cached_tokens: u32,
    /// The most prompt tokens any candidate instance had cached.
    #[serde(default)]
    pub best_cached_tokens: u32,
    /// Predicted time to first token, in milliseconds, when the policy predicts it.
    #[serde(default)]
    pub predicted_ttft_ms: Option<f64>,
    /// Predicted time per output token, in milliseconds, when the policy predicts it.
    #[serde(default)]
    pub predicted_tpot_ms: Option<f64>,
    /// The instance that came second, with its predictions, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_up: Option<RunnerUp>,
    /// The instance's engine kind.
    #[serde(default)]
    pub kind: EngineKind,
    /// With prefill/decode disaggregation: the decode instance the prefill instance hands the
    /// request to after its first token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<HandOff>,
}

/// The decode instance of a disaggregated placement.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HandOff {
    /// Instance id.
    pub instance_id: String,
    /// Base URL of the instance.
    pub endpoint: String,
}

/// The instance a placement would have chosen next.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunnerUp {
    /// Instance id.
    pub instance_id: String,
    /// Predicted time to first token there, in milliseconds.
    pub predicted_ttft_ms: f64,
    /// Predicted time per output token there, in milliseconds.
    pub predicted_tpot_ms: f64,
}

/// Forget a request's dispatch (it finished, failed or was moved).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReleaseRequest {
    /// The request id.
    pub request_id: String,
    /// What its client saw, when it finished.
    #[serde(flatten)]
    pub observed: Observed,
    /// The gateway releasing it (counts as a sign of life).
    #[serde(default)]
    pub gateway: Option<String>,
}

/// Progress of a request, from the gateway.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReportRequest {
    /// The request id.
    pub request_id: String,
    /// Tokens generated so far.
    pub tokens_so_far: u32,
    /// The gateway reporting it (counts as a sign of life).
    #[serde(default)]
    pub gateway: Option<String>,
}

/// A gateway says it is alive (it sends this while idle, so its dispatches are kept).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GatewayHeartbeat {
    /// The gateway's id.
    pub gateway: String,
}

/// Where the scheduler keeps which instance holds each stored response (`/v1/responses` on vLLM
/// or SGLang, which keep one in their own memory): `POST` a [`StoredResponse`] to remember one,
/// `GET {STORED_RESPONSES_PATH}/{id}` to find it.
pub const STORED_RESPONSES_PATH: &str = "/v1/stored_responses";

/// The error code of a follow-up whose stored response the scheduler does not know.
pub const UNKNOWN_RESPONSE: &str = "unknown_response";

/// A stored response and the instance holding it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoredResponse {
    /// The response's id.
    pub response_id: String,
    /// The instance holding it.
    pub instance_id: String,
    /// That instance's URL (in the scheduler's answers; not read when told).
    #[serde(default)]
    pub endpoint: String,
}

/// What a gateway needs of a scheduler running in its own process (`switchyard serve`): placing
/// and releasing requests, the scheduler's metrics and instance list to serve beside its own, and
/// where stored responses live.
/// A remote scheduler is reached over HTTP with the types above instead.
pub trait ScheduleApi: Send + Sync {
    /// Places a request; the error is the one its client gets.
    fn schedule(&self, req: &ScheduleRequest) -> Result<ScheduleDecision, crate::openai::ApiError>;
    /// Forgets a request's dispatch; `observed` is what its client saw, if it finished.
    fn release(&self, request_id: &str, observed: &Observed, gateway: Option<&str>);
    /// The scheduler's metrics, in Prometheus' text format.
    fn render_metrics(&self) -> String;
    /// Its instances, as `GET /v1/instances` lists them.
    fn instances(&self) -> serde_json::Value;
    /// Remembers that stored response `response_id` lives on instance `instance_id`.
    fn remember_response(&self, response_id: &str, instance_id: &str);
    /// Where stored response `response_id` lives, if the scheduler knows.
    fn stored_response(&self, response_id: &str) -> Option<StoredResponse>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_request_is_a_bare_id_or_an_id_with_what_its_client_saw() {
        let req: ScheduleRequest = serde_json::from_str(
            r#"{"request_id": "r", "model": "m", "prompt_tokens": 3,
                "released": ["a", {"request_id": "b", "ttft_ms": 120.5, "tpot_ms": 21,
                "output_tokens": 7}]}"#,
        )
        .unwrap();
        assert_eq!(req.released[0], Released::from("a"));
        assert_eq!(
            req.released[1],
            Released {
                request_id: "b".into(),
                observed: Observed {
                    ttft_ms: Some(120.5),
                    tpot_ms: Some(21.0),
                    hand_off: None,
                    output_tokens: Some(7),
                }
            }
        );
        let again: ScheduleRequest =
            serde_json::from_str(&serde_json::to_string(&req).unwrap()).unwrap();
        assert_eq!(again, req);
        let release: ReleaseRequest = serde_json::from_str(r#"{"request_id": "c"}"#).unwrap();
        assert_eq!(release.observed, Observed::default());
    }
}

/// The scheduler route that answers its [`SchedulerSettings`] (no key needed).
pub const SCHEDULER_SETTINGS_PATH: &str = "/v1/scheduler/settings";

/// What a gateway and its scheduler must agree on; a gateway checks it when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerSettings {
    /// Tokens per block of the prefix hashes the scheduler indexes.
    pub block_size: u32,
}
