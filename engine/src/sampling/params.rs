//! Validated per-request sampling and stopping parameters.

/// How to pick each next token.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingParams {
    /// 0 picks the most likely token.
    pub temperature: f32,
    /// Nucleus mass, in (0, 1].
    pub top_p: f32,
    /// Keep this many most likely tokens; 0 keeps all.
    pub top_k: u32,
    /// Drop tokens under this fraction of the most likely token's probability.
    pub min_p: f32,
    /// Seed of this choice's draws.
    pub seed: u64,
    /// Subtracted once from tokens already generated.
    pub presence_penalty: f32,
    /// Subtracted per occurrence of tokens already generated.
    pub frequency_penalty: f32,
    /// Divides positive (multiplies negative) scores of tokens in the prompt or output.
    pub repetition_penalty: f32,
    /// Added to the scores of these tokens.
    pub logit_bias: Vec<(u32, f32)>,
    /// Return the chosen token's log-probability and this many alternatives.
    pub logprobs: Option<u32>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            seed: 0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logit_bias: Vec::new(),
            logprobs: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding, nothing else.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..Default::default()
        }
    }

    /// Whether the choice is the most likely token and nothing else is asked for: greedy, with
    /// no log-probabilities, biases or penalties.
    pub fn argmax_only(&self) -> bool {
        (self.temperature <= 1e-5 || self.top_k == 1)
            && self.logprobs.is_none()
            && self.logit_bias.is_empty()
            && !self.has_penalties()
    }

    /// Whether any penalty needs the token history.
    pub fn has_penalties(&self) -> bool {
        self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
            || self.repetition_penalty != 1.0
    }
}

/// When a sequence ends, on the token level (stop strings are the output processor's job).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct StopParams {
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// No stop before this many tokens.
    pub min_tokens: u32,
    /// Do not stop at end-of-sequence tokens.
    pub ignore_eos: bool,
    /// End-of-sequence token ids of the model.
    pub eos_token_ids: Vec<u32>,
    /// Further token ids that end the sequence.
    pub stop_token_ids: Vec<u32>,
}
