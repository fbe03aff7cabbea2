//! switchyard-scheduler: decides which engine instance takes each request.
//!
//! - [`cms`]: every instance's description and latest status.
//! - [`lrs`]: what this scheduler dispatched that engines have not reported yet.
//! - [`prefix_index`]: which instance holds which prefix block.
//!
//! Every function here takes the time as an argument and never reads a clock, so the same code
//! runs behind the HTTP service and under the cluster simulator's virtual clock.

pub mod cms;
pub mod lrs;
pub mod prefix_index;
