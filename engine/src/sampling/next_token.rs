//! What a step must return for one sampling sequence, so that a backend with its own sampler
//! (the CUDA backend) sends back a token id instead of a whole vocabulary of scores.

use super::{draw_uniform, SamplingParams};
use rustc_hash::FxHashMap;

/// What a sampling sequence needs from a step.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum NextToken {
    /// Every score: log-probabilities were asked for, or the caller samples on the host.
    #[default]
    Scores,
    /// Only the most likely token (greedy, nothing else asked for).
    Argmax,
    /// One draw, which a backend may make itself (a one-entry sparse result is then sampled to
    /// that same token by [`super::sample`]).
    Draw(Box<Draw>),
}

/// A change to one token's score before the draw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adjustment {
    /// The token.
    pub token: u32,
    /// Added first (`logit_bias`).
    pub bias: f32,
    /// Times the token was generated so far (presence and frequency penalties).
    pub generated: u32,
    /// Whether it is in the prompt (repetition penalty).
    pub in_prompt: bool,
}

/// Everything one draw needs, with the same meaning as in the host sampler.
#[derive(Debug, Clone, PartialEq)]
pub struct Draw {
    /// Temperature; at most 1e-5 means argmax after the adjustments.
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 keeps all.
    pub top_k: u32,
    /// Nucleus mass.
    pub top_p: f32,
    /// Drop tokens under this fraction of the most likely one's probability.
    pub min_p: f32,
    /// The draw's uniform number in [0, 1), the one the host sampler would use.
    pub uniform: f64,
    /// Repetition penalty.
    pub repetition_penalty: f32,
    /// Presence penalty.
    pub presence_penalty: f32,
    /// Frequency penalty.
    pub frequency_penalty: f32,
    /// Score changes from biases and penalties, one per touched token.
    pub adjustments: Vec<Adjustment>,
}

impl NextToken {
    /// What the draw of output `position` needs, given the prompt and the tokens generated so far.
    pub fn for_draw(
        params: &SamplingParams,
        prompt: &[u32],
        output: &[u32],
        position: usize,
    ) -> Self {
        if params.logprobs.is_some() {
            return NextToken::Scores;
        }
        if params.argmax_only() {
            return NextToken::Argmax;
        }
        let mut touched: FxHashMap<u32, Adjustment> = FxHashMap::default();
        for &(token, bias) in &params.logit_bias {
            touch(&mut touched, token).bias += bias;
        }
        if params.has_penalties() {
            for &token in output {
                touch(&mut touched, token).generated += 1;
            }
            if params.repetition_penalty != 1.0 {
                for &token in prompt {
                    touch(&mut touched, token).in_prompt = true;
                }
            }
        }
        let mut adjustments: Vec<Adjustment> = touched.into_values().collect();
        adjustments.sort_by_key(|a| a.token);
        NextToken::Draw(Box::new(Draw {
            temperature: params.temperature,
            top_k: params.top_k,
            top_p: params.top_p,
            min_p: params.min_p,
            uniform: draw_uniform(params.seed, position),
            repetition_penalty: params.repetition_penalty,
            presence_penalty: params.presence_penalty,
            frequency_penalty: params.frequency_penalty,
            adjustments,
        }))
    }
}

fn touch(touched: &mut FxHashMap<u32, Adjustment>, token: u32) -> &mut Adjustment {
    touched.entry(token).or_insert(Adjustment {
        token,
        bias: 0.0,
        generated: 0,
        in_prompt: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_needs_the_argmax_and_logprobs_need_every_score() {
        let greedy = SamplingParams::greedy();
        assert_eq!(
            NextToken::for_draw(&greedy, &[1], &[], 0),
            NextToken::Argmax
        );
        let logprobs = SamplingParams {
            logprobs: Some(2),
            ..SamplingParams::greedy()
        };
        assert_eq!(
            NextToken::for_draw(&logprobs, &[1], &[], 0),
            NextToken::Scores
        );
    }

    #[test]
    fn draws_carry_the_host_uniform_and_merged_adjustments() {
        let params = SamplingParams {
            seed: 7,
            repetition_penalty: 1.2,
            frequency_penalty: 0.5,
            logit_bias: vec![(5, 2.0), (9, -1.0)],
            ..Default::default()
        };
        let NextToken::Draw(draw) = NextToken::for_draw(&params, &[3, 5], &[5, 5, 8], 3) else {
            panic!("a draw");
        };
        assert_eq!(draw.uniform, draw_uniform(7, 3));
        let by_token: Vec<(u32, f32, u32, bool)> = draw
            .adjustments
            .iter()
            .map(|a| (a.token, a.bias, a.generated, a.in_prompt))
            .collect();
        assert_eq!(
            by_token,
            vec![
                (3, 0.0, 0, true),
                (5, 2.0, 2, true),
                (8, 0.0, 1, false),
                (9, -1.0, 0, false)
            ]
        );
    }
}
