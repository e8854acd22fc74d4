//! The timer service: one task and one ordered map of due times for the whole engine (not a
//! task per timer), so a million instances with reminders cost a map entry each.
//!
//! Entries hold a weak reference to their instance: a timer whose instance has ended is
//! dropped when it comes due. Idle expiry of reactive instances uses the same service.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;
use tokio::sync::Notify;
use weft_core::EventId;

use crate::cell::{Cell, lock};
use crate::engine::Shared;

/// What happens when a timer comes due.
pub(crate) enum TimerKind {
    /// Put a token on `event`; repeat on `cron` at most `remaining` more times.
    Event {
        event: EventId,
        data: Value,
        cron: Option<String>,
        remaining: Option<u32>,
    },
    /// Check whether a reactive instance has been idle too long.
    Expire,
}

pub(crate) struct TimerEntry {
    pub id: u64,
    pub cell: Weak<Cell>,
    pub kind: TimerKind,
}

#[derive(Default)]
struct State {
    due: BTreeMap<(i64, u64), TimerEntry>,
    task: bool,
}

/// The service.
#[derive(Default)]
pub(crate) struct Timers {
    state: Mutex<State>,
    notify: Notify,
    next: AtomicU64,
}

impl Timers {
    pub(crate) fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Makes sure ids handed out from now on are above `id` (restored timers keep theirs).
    pub(crate) fn reserve(&self, id: u64) {
        self.next.fetch_max(id, Ordering::Relaxed);
    }

    /// Schedules `entry` at `due_ms`; starts the service task if needed.
    pub(crate) fn add(
        &self,
        engine: &Arc<Shared>,
        due_ms: i64,
        entry: TimerEntry,
    ) -> Result<(), String> {
        let mut st = lock(&self.state);
        if !st.task {
            let Some(h) = engine.runtime() else {
                return Err("timers need a tokio runtime".to_string());
            };
            st.task = true;
            let weak = Arc::downgrade(engine);
            h.spawn(run(weak));
        }
        st.due.insert((due_ms, entry.id), entry);
        drop(st);
        self.notify.notify_one();
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.state).due.len()
    }
}

async fn run(engine: Weak<Shared>) {
    loop {
        let Some(e) = engine.upgrade() else { return };
        let now = e.clock.now_ms();
        let (due, next) = {
            let mut st = lock(&e.timers.state);
            let mut due = Vec::new();
            while let Some(entry) = st.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let at = entry.key().0;
                due.push((at, entry.remove()));
            }
            let next = st.due.first_key_value().map(|(k, _)| k.0);
            if due.is_empty() && next.is_none() {
                st.task = false;
                return;
            }
            (due, next)
        };
        if !due.is_empty() {
            for (at, entry) in due {
                fire(&e, entry, at, now);
            }
            continue;
        }
        let wait = next.map_or(0, |n| (n - now).max(1) as u64);
        let sleep = e.clock.sleep(wait);
        // `sleep` counts from the clock's time when it was made: if the clock moved since
        // `now` was read (a manual clock advanced meanwhile), the wait is too long. Look again.
        if e.clock.now_ms() != now {
            continue;
        }
        // Holding `e` while asleep keeps the engine alive as long as timers are due.
        let notified = e.timers.notify.notified();
        tokio::select! {
            _ = sleep => {}
            _ = notified => {}
        }
    }
}

/// Fires a timer that was due at `due` (`now - due` is its lateness: large when weft was
/// down at the due time). A cron timer's next occurrence is computed here and travels in
/// the `Timer` input, so the journal re-arms it in the same record.
fn fire(engine: &Arc<Shared>, entry: TimerEntry, due: i64, now: i64) {
    let Some(cell) = entry.cell.upgrade() else {
        return;
    };
    match entry.kind {
        TimerKind::Expire => cell.check_idle(now),
        TimerKind::Event {
            event,
            data,
            cron,
            remaining,
        } => {
            let again = match (&cron, &engine.cron) {
                (Some(expr), Some(next)) if remaining.is_none_or(|r| r > 1) => next(expr, now),
                _ => None,
            };
            if !cell.is_live() {
                cell.timers.fetch_sub(1, Ordering::AcqRel);
                return;
            }
            if let Some(next) = again {
                let _ = engine.timers.add(
                    engine,
                    next,
                    TimerEntry {
                        id: entry.id,
                        cell: Arc::downgrade(&cell),
                        kind: TimerKind::Event {
                            event,
                            data: data.clone(),
                            cron,
                            remaining: remaining.map(|r| r - 1),
                        },
                    },
                );
            }
            // The loop counts the timer off when it applies its last firing (`Cell::apply`),
            // so the instance is never seen settled between the count and the token.
            cell.submit(crate::journal_hook::Input::Timer {
                id: entry.id,
                event,
                payload: data,
                now,
                late_ms: now.saturating_sub(due).max(0),
                next_due_ms: again,
            });
        }
    }
}
