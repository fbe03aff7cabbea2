//! The relay wing: an answer on its way back to the client. [`session`] relays a stream (and
//! resumes it elsewhere when its instance breaks); [`chunk`] reads the SSE chunks it passes on;
//! [`assemble`] builds a non-streamed answer; [`observe`] measures what the client saw, and
//! [`watch`] feeds it from a stream relayed as the instance sent it.

pub mod assemble;
pub mod chunk;
pub mod observe;
pub mod session;
pub mod watch;
