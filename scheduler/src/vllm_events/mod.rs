//! vLLM's and SGLang's KV cache events, for the exact prefix index: [`wire`] reads their
//! msgpack batches (both generations of the format), [`translate`] turns the engine's blocks
//! into switchyard's block hashes by following each block's tokens and parent. The subscriber
//! that reads them off the engines' ZMQ publishers is in `service::zmq_events`.

pub mod translate;
pub mod wire;

#[cfg(test)]
mod tests;
