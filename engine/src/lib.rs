//! switchyard-engine: one inference instance.
//!
//! A request enters through [`server`] (the OpenAI API), becomes one [`batching::Sequence`] per
//! choice in the [`core`], which plans each step (continuous batching over the paged [`kv`]
//! cache), runs it on a [`backend`] and samples the next tokens ([`sampling`]). The
//! [`instance`] drives the core in real time and publishes [`metrics`], the [`trace`] log, and
//! the state and KV event streams the scheduler reads. [`migration`] is the core's side of moving a
//! running sequence to another engine, [`mover`] the copy over HTTP. [`forward_check`] runs a backend alone,
//! for checking it against a reference and measuring it.

pub mod backend;
pub mod batching;
pub mod config;
pub mod core;
pub mod forward_check;
pub mod instance;
pub mod kv;
pub mod launcher;
pub mod metrics;
pub mod migration;
pub mod model;
pub mod mover;
pub mod sampling;
pub mod server;
pub mod trace;
pub mod vllm_publisher;

pub use switchyard_text::{chat_template, tokenizer};
