//! Waiting until what a request applied is durable, without hanging while the store refuses
//! writes. Every writing route (events, starts, stops, resumes, approvals, checkpoints)
//! answers only once its journal records are durable; a store that refuses writes (a full
//! disk, a lost connection) would leave that wait open until the store recovers. Here a
//! request is refused with `503 store_unavailable` and `Retry-After` before it applies
//! anything while the store is known to refuse, and answered the same within
//! [`REFUSAL_CHECK`] when the refusal begins during its wait (what it applied stays in memory
//! and is written when the store recovers: the problem says what that was).

use std::time::Duration;

use axum::http::StatusCode;

use crate::error::ApiError;
use crate::state::AppState;

/// How often a request waiting for durability checks whether the store refuses writes.
pub(crate) const REFUSAL_CHECK: Duration = Duration::from_millis(100);

/// `503 store_unavailable` with `Retry-After: 1`.
pub(crate) fn refused(detail: impl Into<String>, hint: impl Into<String>) -> ApiError {
    let mut e =
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", detail).hint(hint);
    e.retry_after = Some(1);
    e
}

/// Refuses the request before it applies anything while the store refuses writes.
pub(crate) fn check(state: &AppState) -> Result<(), ApiError> {
    if state.inner.durable.journal().store_refusing() {
        return Err(refused(
            "the store refuses writes right now; nothing of this request was applied",
            "retry after the `Retry-After` seconds; GET /readyz says when the store takes writes again",
        ));
    }
    Ok(())
}

/// Waits until `id`'s journal records are durable. When the store starts refusing writes
/// meanwhile, answers `503` at once; `applied` says what the request did in memory, which
/// is written when the store recovers, and how to go on without doing it twice.
pub(crate) async fn durable(
    state: &AppState,
    id: &str,
    applied: impl FnOnce() -> (String, String),
) -> Result<(), ApiError> {
    let wait = state.inner.durable.journal().barrier(id);
    until(
        state,
        async { wait.await.map_err(ApiError::internal) },
        applied,
    )
    .await
}

/// Waits until what this process recorded for `id` so far is durable, so that a read of the
/// journal that follows holds every record behind a status a client has seen (the status
/// comes from memory, ahead of the group commit). While the store refuses writes it does not
/// wait, and the read shows what is durable.
pub(crate) async fn settled(state: &AppState, id: &str) {
    if state.inner.durable.journal().store_refusing() {
        return;
    }
    // An error is a store that began refusing meanwhile: the read goes on the same.
    let _ = durable(state, id, || (String::new(), String::new())).await;
}

/// Runs `wait` (which ends once something is durable) unless the store starts refusing
/// writes first: then `503` with `applied`'s detail and hint.
pub(crate) async fn until<T>(
    state: &AppState,
    wait: impl Future<Output = Result<T, ApiError>>,
    applied: impl FnOnce() -> (String, String),
) -> Result<T, ApiError> {
    let journal = state.inner.durable.journal();
    tokio::pin!(wait);
    loop {
        tokio::select! {
            r = &mut wait => return r,
            () = tokio::time::sleep(REFUSAL_CHECK) => {
                if journal.store_refusing() {
                    let (detail, hint) = applied();
                    return Err(refused(detail, hint));
                }
            }
        }
    }
}
