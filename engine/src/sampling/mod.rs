//! Turning a step's logits into the next token: penalties, bias, temperature, top-k, top-p,
//! min-p, and log-probabilities.
//!
//! The draw for output position `i` comes from a generator seeded by (request seed, `i`) alone,
//! so a request that is preempted and recomputed samples exactly the tokens it would have.

mod logits;
mod next_token;
mod params;
mod sampler;

pub use logits::Logits;
pub use next_token::{Adjustment, Draw, NextToken};
pub use params::{SamplingParams, StopParams};
pub use sampler::{draw_uniform, sample, Sampled};
