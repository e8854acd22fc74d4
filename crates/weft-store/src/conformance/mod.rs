//! The conformance suite every backend runs (STYLE §2, after Restate's loglet tests).
//!
//! A backend's test file says `weft_store::conformance_tests!(my_factory);` where
//! `my_factory` is an `async fn() -> Option<Fixture>` that makes a fresh, isolated, empty
//! store (or returns `None`, after printing why, to skip, e.g. when no PostgreSQL is
//! configured). The macro expands one `#[tokio::test]` per case; each case runs in its own
//! task so the fixture's cleanup (dropping a schema, removing a directory) runs even when
//! the case panics, and the panic is re-raised afterwards.

// Test support: a failing assertion or unexpected error must panic the test.
#![allow(clippy::unwrap_used)]

mod cases_journal;
mod cases_state;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::Store;

pub use cases_journal::*;
pub use cases_state::*;

/// A boxed cleanup future.
pub type Cleanup = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A fresh store for one case, and how to dispose of it.
pub struct Fixture {
    /// The store under test.
    pub store: Arc<dyn Store>,
    cleanup: Option<Box<dyn FnOnce() -> Cleanup + Send>>,
}

impl Fixture {
    /// A fixture with nothing to clean up (or whose cleanup happens on drop).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Fixture {
            store,
            cleanup: None,
        }
    }

    /// A fixture whose `cleanup` runs after the case, pass or fail.
    pub fn with_cleanup(
        store: Arc<dyn Store>,
        cleanup: impl FnOnce() -> Cleanup + Send + 'static,
    ) -> Self {
        Fixture {
            store,
            cleanup: Some(Box::new(cleanup)),
        }
    }
}

/// Runs one case against a fresh fixture from `factory`.
pub async fn run_case<F, FFut, C, CFut>(factory: F, name: &str, case: C)
where
    F: FnOnce() -> FFut,
    FFut: Future<Output = Option<Fixture>>,
    C: FnOnce(Arc<dyn Store>) -> CFut,
    CFut: Future<Output = ()> + Send + 'static,
{
    let Some(fixture) = factory().await else {
        eprintln!("conformance case `{name}` skipped");
        return;
    };
    let Fixture { store, cleanup } = fixture;
    let outcome = tokio::spawn(case(store.clone())).await;
    drop(store);
    if let Some(cleanup) = cleanup {
        cleanup().await;
    }
    if let Err(e) = outcome {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
        panic!("conformance case `{name}` was cancelled: {e}");
    }
}

/// Expands one `#[tokio::test]` per conformance case for a backend factory
/// (`async fn() -> Option<Fixture>`).
#[macro_export]
macro_rules! conformance_tests {
    ($factory:path) => {
        $crate::conformance_tests!(@cases $factory;
            append_assigns_contiguous_seqs_and_chains,
            empty_append_changes_nothing,
            append_rejects_empty_kind,
            read_from_seq_with_limit,
            journals_are_per_instance,
            binary_and_large_bodies_round_trip,
            verify_reports_intact_chains,
            concurrent_appends_to_many_instances,
            concurrent_appends_to_one_instance,
            snapshots_latest_and_hash_checked,
            truncate_needs_snapshot_and_verify_starts_at_base,
            plans_versioned_with_status,
            tools_versioned_per_tenant,
            instances_created_listed_and_paged,
            instance_conflicts_and_missing,
            timers_due_in_order,
            effects_recorded_once,
            effects_deleted_by_key_range,
            leases_exclusive_until_expiry,
            write_batch_creates_appends_and_sets_status,
            appends_fenced_by_lease_epoch,
            write_batch_fenced_per_instance,
            write_batch_fenced_many_instances,
            bulk_leases_acquire_and_renew,
            timers_listed_by_keyset_pages,
            compaction_fenced_by_lease_epoch,
            bulk_release_of_leases,
            load_many_gives_snapshot_and_tail,
            status_changes_record_the_chain_head,
            shared_counters_add_and_expire,
            shared_counters_concurrent_adds,
        );
    };
    (@cases $factory:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::conformance::run_case(
                    $factory,
                    stringify!($case),
                    $crate::conformance::$case,
                )
                .await;
            }
        )*
    };
}
