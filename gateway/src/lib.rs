//! switchyard-gateway: the OpenAI front door, in three wings over one floor.
//!
//! - [`front`]: a request arrives, is admitted, checked, tokenized and hashed, and given a plan
//!   (pool or external endpoints, fallbacks, a mirror).
//! - [`upstream`]: the scheduler picks an instance, the request is sent there, retried elsewhere
//!   or falls back when it fails before its first byte.
//! - [`relay`]: the answer streams back (resumed elsewhere if its instance breaks), or is
//!   assembled whole; what the client saw is measured and the dispatch released.
//! - [`shared`]: the types the wings share. [`metrics`] counts it all; [`launcher`] starts a
//!   gateway from its flags; [`model_learner`] keeps the models of a gateway started without
//!   `--model` in step with what its engines serve.
//!
//! Dependencies point down: front uses upstream and relay, relay uses upstream, and all of them
//! the floor; nothing below imports what is above it.

pub mod front;
pub mod launcher;
pub mod metrics;
pub mod model_learner;
pub mod relay;
pub mod shared;
pub mod upstream;
