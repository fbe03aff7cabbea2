//! The admin key: the endpoints that reveal or change the cluster (the instance list, the
//! gateway's route reload) can be put behind their own key, apart from the clients' API keys.
//! Without `Authorization: Bearer ADMIN_KEY` they answer 401; the key is compared in constant
//! time and never printed.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use std::sync::Arc;
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::secret::Secret;

/// The `--admin-key` flag, shared by the scheduler, the gateway and `serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct AdminArgs {
    /// A key the admin endpoints require as `Authorization: Bearer KEY` (the instance list and
    /// the route reload). Without it they are open, like `/metrics`.
    #[arg(long, env = "SWITCHYARD_ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<Secret>,
}

/// Puts every route of `routes` behind `key`, when there is one.
pub fn admin_only<S: Clone + Send + Sync + 'static>(
    routes: Router<S>,
    key: Option<Secret>,
) -> Router<S> {
    match key {
        Some(key) => {
            routes.route_layer(axum::middleware::from_fn_with_state(Arc::new(key), require))
        }
        None => routes,
    }
}

async fn require(State(key): State<Arc<Secret>>, request: Request, next: Next) -> Response {
    let presented = request.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
    if key.matches_bearer(presented) {
        return next.run(request).await;
    }
    let e = ApiError::unauthorized(
        "This endpoint needs the admin key (send `Authorization: Bearer ADMIN_KEY`).",
        "invalid_admin_key",
    );
    crate::error_response(e)
}
