//! One instance: its [`Cell`] (shared, addressable) and the loop that owns its marking.
//!
//! Architecture invariant: only the holder of `Cell::core` changes the instance, and it does
//! so only through [`Cell::apply`], one [`Input`] at a time, each followed by "fire everything
//! enabled". Inputs that arrive while another thread holds the loop go to a mailbox that the
//! holder drains before letting go, so there is never a second loop and never a lost input.
//! An immediate firing's result waits in the loop's ready queue as [`Ready::Emit`] (the
//! firing was taken, not recorded as in flight) and is applied and journaled as the
//! `Input::Outcome` it is, in its turn, like any other outcome.
//! There is no task per instance: the loop runs in whichever caller delivers an input
//! (start, ingest, a timer) and, only while actions are pending, in one tokio task that polls
//! them, or in the caller waiting for the instance to settle ([`Waiter`]), which on a runtime
//! of several threads polls them itself while the instance has no task. Idle instances are
//! plain data (passivated) until the routing index wakes them.
//!
//! When that task starts depends on the runtime, as measured (docs/performance.md, tool
//! sources, 2026-11-27, `worker` calls over NATS to two Python workers):
//! - on a runtime of several worker threads, when the first pending action first wakes (the
//!   reply, its timeout): the action is polled with the cell's [`Cell::kick`] waker, which
//!   starts the task on the thread that woke it, or wakes a [`Waiter`] that drives instead.
//!   A task spawned at dispatch would take that thread's next-to-run slot from the connection
//!   task the call just woke, and another thread is woken to steal one of them; started on
//!   the wake, weft adds 33–47 µs to a call at p50 instead of 66–75, with 12,021–15,826
//!   calls/s instead of 10,256–12,340;
//! - on one thread (a current-thread runtime included), at dispatch: there the spawned task
//!   runs before the connection task, which then sends the requests of many starts in one
//!   write instead of one each (2,704 against 23,814 `writev` calls in a run), and a worker
//!   pool answers twice the calls (11,742–15,238 against 5,592–6,043 calls/s).
//!
//! Gated calls start the task at once.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, TryLockError, Weak};
use std::task::{Context, Poll, Waker};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::Value;
use tokio::sync::oneshot;
use weft_core::token::FiringId;
use weft_core::{ActionError, GraphType, Instance, Next, Status, StepId};

use crate::engine::Shared;
use crate::journal_hook::Input;
use crate::outcome::{Awaits, InFlightInfo, Outcome, ResultTokens, StateSnapshot, TraceEntry};
use crate::plans::CompiledPlan;
use crate::repair_loop::stuck_failure;

/// An action's outcome: the result is wrapped in its `Arc` where the tool returns it, so it
/// moves as one pointer until the emitted tokens share it.
pub(crate) type Done = (FiringId, Result<Arc<Value>, ActionError>);
/// A pending action.
pub(crate) type PendingFut = Pin<Box<dyn Future<Output = Done> + Send>>;

/// An outcome waiting in the loop to be applied, oldest first.
pub(crate) enum Ready {
    /// The outcome of a firing recorded as in flight: applied with
    /// [`weft_core::Instance::complete`].
    Outcome(FiringId, Result<Arc<Value>, ActionError>),
    /// The result of a firing the loop took ([`weft_core::Instance::next_taking`]) and
    /// whose immediate tool succeeded: put on the step's emits with
    /// [`weft_core::Instance::emit_taken`], which is what completing it would do.
    Emit {
        firing: FiringId,
        step: StepId,
        correlation: Arc<str>,
        result: Arc<Value>,
    },
}

/// Locks a mutex, ignoring poisoning (tool panics are caught before they can poison).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The waker the pending actions are polled with in the task: a wake that comes while the
/// task polls them is only noted (the task polls again before it returns), any other goes to
/// the task. `FuturesUnordered` wakes its caller whenever it has polled every future and all
/// are still pending (its guard against starving the executor); passed on, that wake makes
/// tokio reschedule the running task as a yield, which also wakes another worker thread. A
/// call that wakes several times before it ends (a command: its output, its end of output,
/// its exit) paid that on each wake (docs/performance.md, tool sources).
#[derive(Default)]
pub(crate) struct Gate {
    polling: std::sync::atomic::AtomicBool,
    woken: std::sync::atomic::AtomicBool,
    task: futures::task::AtomicWaker,
}

impl Gate {
    /// A gate for the task and the waker that goes through it.
    fn new() -> (Arc<Gate>, Waker) {
        let gate = Arc::new(Gate::default());
        let waker = Waker::from(Arc::clone(&gate));
        (gate, waker)
    }

    /// Runs `poll` with `waker` (this gate's) on behalf of the task of `cx`; returns its result
    /// and whether it was woken meanwhile (then the task should poll again).
    fn poll<T>(
        &self,
        waker: &Waker,
        cx: &Context<'_>,
        poll: impl FnOnce(&mut Context<'_>) -> T,
    ) -> (T, bool) {
        self.task.register(cx.waker());
        self.woken.store(false, Ordering::SeqCst);
        self.polling.store(true, Ordering::SeqCst);
        let r = poll(&mut Context::from_waker(waker));
        self.polling.store(false, Ordering::SeqCst);
        (r, self.woken.swap(false, Ordering::SeqCst))
    }
}

impl std::task::Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

/// An instance's pending actions. One is kept as it is; only a second makes a
/// `FuturesUnordered`, whose queue, stub task and task per future are three allocations
/// for the one action a step at a time has pending (docs/performance.md, tool sources).
#[derive(Default)]
pub(crate) enum Pending {
    #[default]
    None,
    One(PendingFut),
    Many(FuturesUnordered<PendingFut>),
}

impl Pending {
    pub(crate) fn push(&mut self, fut: PendingFut) {
        *self = match std::mem::take(self) {
            Pending::None => Pending::One(fut),
            Pending::One(first) => {
                let many = FuturesUnordered::new();
                many.push(first);
                many.push(fut);
                Pending::Many(many)
            }
            Pending::Many(many) => {
                many.push(fut);
                Pending::Many(many)
            }
        };
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Pending::None => true,
            Pending::One(_) => false,
            Pending::Many(many) => many.is_empty(),
        }
    }

    /// The next outcome, as `FuturesUnordered::poll_next` gives it: `Ready(None)` when
    /// nothing is pending.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Done>> {
        match self {
            Pending::None => Poll::Ready(None),
            Pending::One(fut) => match fut.as_mut().poll(cx) {
                Poll::Ready(done) => {
                    *self = Pending::None;
                    Poll::Ready(Some(done))
                }
                Poll::Pending => Poll::Pending,
            },
            Pending::Many(many) => many.poll_next_unpin(cx),
        }
    }
}

/// Work in progress: only exists while actions are pending.
#[derive(Default)]
pub(crate) struct Active {
    pub pending: Pending,
    /// What the task polls `pending` with ([`Gate`]), made at its first poll.
    pub gate: Option<(Arc<Gate>, Waker)>,
    /// Immediate actions waiting for the journal (`Tool::waits_for_journal`), in dispatch
    /// order: the journal mark that must be durable, the firing, its rendered args (`None`:
    /// the step's literal args).
    pub gated: VecDeque<(u64, FiringId, Option<Value>)>,
    pub waker: Option<Waker>,
}

/// The state only the loop touches.
pub(crate) struct Core {
    pub inst: Option<Instance>,
    pub active: Option<Box<Active>>,
    pub waiters: Vec<oneshot::Sender<Outcome>>,
    pub reason: Option<String>,
    pub trace: Option<Vec<TraceEntry>>,
    /// Firing-rate window: (start ms, firings at start).
    pub window: (i64, u64),
    pub last_activity: i64,
    /// The settled status last reported (published, waiters told), if any.
    pub reported: Option<&'static str>,
    /// Reported `waiting` with a timer pending: waiters are told only once it moves.
    pub timer_wait: bool,
    pub registered: bool,
    /// The plan the instance runs now (changes only by a repair, in the loop).
    pub plan: Arc<CompiledPlan>,
    /// Repairs asked for so far.
    pub repairs: u32,
    /// A repair is being made: a paused instance has not settled yet.
    pub repairing: bool,
    /// The compiled revised plan of the `Input::Repair` about to be applied.
    pub next_plan: Option<Arc<CompiledPlan>>,
}

/// One instance, shared between the engine's table, handles, timers and its task.
pub(crate) struct Cell {
    pub id: u64,
    /// This cell, for handing out to timers.
    pub me: Weak<Cell>,
    pub name: Arc<str>,
    pub tenant: Arc<str>,
    /// The name of the plan the instance started with (kept across repairs, for events).
    pub plan_name: Arc<str>,
    /// The plan it runs now, for readers outside the loop (the loop reads `Core::plan`).
    plan: RwLock<Arc<CompiledPlan>>,
    pub engine: Arc<Shared>,
    pub core: Mutex<Core>,
    mailbox: Mutex<Vec<Input>>,
    /// Timers set by this instance that have not fired yet.
    pub timers: AtomicU32,
    /// When each of those timers is next due (epoch ms), by timer id: what a `waiting`
    /// instance reports it waits for.
    pub timer_due: Mutex<std::collections::BTreeMap<u64, i64>>,
    /// How deep in `plan.run` children this instance is (0: started from outside); journaled
    /// with its start, so a recovered child has the same depth.
    pub depth: AtomicU32,
    /// The instance's key-value context (`context.get` / `context.put`).
    pub kv: Mutex<Option<Box<serde_json::Map<String, Value>>>>,
    /// Restored only: idempotency key → timer id of timers set by firings still in flight.
    pub timer_keys: Mutex<std::collections::BTreeMap<String, u64>>,
    /// Approvals of firings still in flight, by idempotency key, with whoever waits on them.
    pub approvals: Mutex<std::collections::BTreeMap<String, crate::approvals::Live>>,
    /// Whether a firing of this instance ever asked for an approval (so an outcome looks
    /// at `approvals` only then).
    pub asked_approval: std::sync::atomic::AtomicBool,
    /// The count against the plan's `limits` (`budget.rs`).
    pub budget: Mutex<crate::budget::Budget>,
    /// The operator's quota counters it charges (made at its first charge).
    pub quota_keys: std::sync::OnceLock<crate::quota::QuotaKeys>,
    /// Told when the instance is resumed or stopped: calls waiting over a budget
    /// (`quota.rs`, `OnExceeded::Pause`) then try again or give up.
    pub resumed: tokio::sync::Notify,
    /// Set when the instance is stopped, for those waiters (which may run under the loop's
    /// lock, so they cannot read the status).
    pub stopped: std::sync::atomic::AtomicBool,
    /// The instance's task exists (spawned and not yet finished). Cleared by the task under
    /// the loop's lock as it finishes; set by whoever spawns it ([`Cell::spawn_task`]).
    task_live: std::sync::atomic::AtomicBool,
    /// The waker pending actions are first polled with ([`Cell::kick`]), made once.
    kick: std::sync::OnceLock<Waker>,
    /// A waiter ready to drive the instance ([`Waiter`]), with its token: a kick wakes it
    /// instead of starting the task.
    driver: Mutex<Option<(u64, Waker)>>,
    /// A kick woke the driver, which has not yet taken up the work: a driver that goes away
    /// meanwhile starts the task.
    kicked: std::sync::atomic::AtomicBool,
}

/// Wakes an instance whose task may not exist yet: starts it ([`Cell::spawn_task`]).
struct Kick(Weak<Cell>);

impl std::task::Wake for Kick {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(cell) = self.0.upgrade() else { return };
        {
            let d = lock(&cell.driver);
            if let Some((_, w)) = &*d {
                cell.kicked.store(true, Ordering::SeqCst);
                w.wake_by_ref();
                return;
            }
        }
        cell.spawn_task();
    }
}

thread_local! {
    /// Set while this thread runs an instance's loop or task. A waiter made there (a
    /// `plan.run` child's, polled by its parent's loop) leaves its instance to the instance's
    /// own task rather than drive it under the parent's lock.
    static IN_LOOP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the thread as in a loop ([`IN_LOOP`]) until dropped.
struct InLoop(bool);

impl InLoop {
    fn enter() -> InLoop {
        InLoop(IN_LOOP.replace(true))
    }
}

impl Drop for InLoop {
    fn drop(&mut self) {
        IN_LOOP.set(self.0);
    }
}

/// Tells waiters apart in [`Cell::driver`].
static WAITER_TOKENS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Someone waiting for an instance to settle ([`crate::InstanceHandle::wait`]) who, on a
/// runtime of several threads, drives the instance meanwhile: while the instance has no
/// task, the first wake of a pending action (its [`Cell::kick`]) wakes the waiter instead of
/// starting a task, and the waiter polls the actions and applies their outcomes itself, as
/// the task would ([`Cell::poll_task`]), until the instance settles. A call then costs no
/// task and no hand-over from the task to the waiter, and its outcome is applied on the
/// thread that read the reply, right after it, not on an idle one woken to steal a new task
/// (weft's own time of an `http` call, p99: 27–34 µs before, 12–19 after; docs/performance.md,
/// tool sources). A waiter that goes away while it holds the drive, or after a kick it had not
/// yet taken up, starts the task, so no action is left unpolled. One kept but not polled
/// holds its instance's calls up until it is polled or dropped, as any future does its work.
pub(crate) struct Waiter {
    cell: Arc<Cell>,
    rx: oneshot::Receiver<Outcome>,
    token: u64,
    /// Whether it may drive (made outside any loop, on a runtime of several threads).
    drives: bool,
    /// It holds the drive: `task_live` is set on its behalf, as for the task.
    holding: bool,
    /// Its waker is or was in [`Cell::driver`].
    slotted: bool,
}

impl Cell {
    /// A waiter for the instance to settle, or its outcome if it has settled.
    pub(crate) fn waiter(self: &Arc<Self>) -> Result<Waiter, Box<Outcome>> {
        let rx = self.with_core(|g| {
            if Cell::settled(g) {
                return Err(Box::new(self.outcome(g)));
            }
            let (tx, rx) = oneshot::channel();
            g.waiters.push(tx);
            Ok(rx)
        })?;
        let drives = !IN_LOOP.get()
            && crate::engine::lazy_tasks(self.engine.runtime().as_ref())
            && tokio::runtime::Handle::try_current().is_ok();
        Ok(Waiter {
            cell: Arc::clone(self),
            rx,
            token: WAITER_TOKENS.fetch_add(1, Ordering::Relaxed),
            drives,
            holding: false,
            slotted: false,
        })
    }
}

impl Waiter {
    /// Puts `w` in the cell's driver slot (a kick wakes it).
    fn offer(&mut self, w: &Waker) {
        let mut d = lock(&self.cell.driver);
        match &mut *d {
            Some((t, old)) if *t == self.token => {
                if !old.will_wake(w) {
                    *old = w.clone();
                }
            }
            _ => *d = Some((self.token, w.clone())),
        }
        self.slotted = true;
    }

    fn closed(&self) -> Outcome {
        self.cell.with_core(|g| self.cell.outcome(g))
    }
}

impl Future for Waiter {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let this = &mut *self;
        // At most one claim of the drive per poll: a claim that finds nothing pending lets
        // go at once, and the next wake (a kick, the outcome) polls again.
        for claim in [true, false] {
            if this.holding && this.cell.poll_task(cx).is_ready() {
                this.holding = false;
            }
            match this.rx.try_recv() {
                Ok(o) => return Poll::Ready(o),
                Err(oneshot::error::TryRecvError::Closed) => return Poll::Ready(this.closed()),
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            if this.holding {
                // `poll_task` left `cx`'s waker with the actions.
                return Poll::Pending;
            }
            if !this.drives || !claim {
                break;
            }
            this.offer(cx.waker());
            this.cell.kicked.store(false, Ordering::SeqCst);
            if this.cell.task_live.swap(true, Ordering::AcqRel) {
                // The task runs: it drives, and the outcome wakes this waiter.
                break;
            }
            this.holding = true;
        }
        match Pin::new(&mut this.rx).poll(cx) {
            Poll::Ready(Ok(o)) => Poll::Ready(o),
            Poll::Ready(Err(_)) => Poll::Ready(this.closed()),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.slotted {
            let mut d = lock(&self.cell.driver);
            if d.as_ref().is_some_and(|(t, _)| *t == self.token) {
                *d = None;
            }
        }
        if self.holding {
            self.cell.task_live.store(false, Ordering::Release);
            self.cell.spawn_task();
        } else if self.slotted && self.cell.kicked.swap(false, Ordering::SeqCst) {
            self.cell.spawn_task();
        }
    }
}

impl Cell {
    pub(crate) fn new(
        id: u64,
        tenant: Arc<str>,
        plan: Arc<CompiledPlan>,
        engine: Arc<Shared>,
        trace: bool,
    ) -> Arc<Cell> {
        Arc::new_cyclic(|me| Cell {
            id,
            me: me.clone(),
            name: engine.ids().name(id),
            tenant,
            plan_name: Arc::clone(&plan.name),
            plan: RwLock::new(Arc::clone(&plan)),
            engine,
            core: Mutex::new(Core {
                inst: None,
                active: None,
                waiters: Vec::new(),
                reason: None,
                trace: trace.then(Vec::new),
                window: (i64::MIN / 2, 0),
                last_activity: 0,
                reported: None,
                timer_wait: false,
                registered: false,
                plan,
                repairs: 0,
                repairing: false,
                next_plan: None,
            }),
            mailbox: Mutex::new(Vec::new()),
            timers: AtomicU32::new(0),
            timer_due: Mutex::new(std::collections::BTreeMap::new()),
            depth: AtomicU32::new(0),
            kv: Mutex::new(None),
            timer_keys: Mutex::new(std::collections::BTreeMap::new()),
            approvals: Mutex::new(std::collections::BTreeMap::new()),
            asked_approval: std::sync::atomic::AtomicBool::new(false),
            budget: Mutex::new(crate::budget::Budget::default()),
            quota_keys: std::sync::OnceLock::new(),
            resumed: tokio::sync::Notify::new(),
            stopped: std::sync::atomic::AtomicBool::new(false),
            task_live: std::sync::atomic::AtomicBool::new(false),
            kick: std::sync::OnceLock::new(),
            driver: Mutex::new(None),
            kicked: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether the instance's task exists. Stable while the loop's lock is held, except
    /// that a [`Cell::kick`] may start it.
    pub(crate) fn task_live(&self) -> bool {
        self.task_live.load(Ordering::Acquire)
    }

    /// The waker a tool's future is first polled with at dispatch: while the instance has
    /// no task, its wake starts the task, on the thread that wakes it. It never takes the
    /// loop's lock (a future may wake it while being polled under that lock).
    pub(crate) fn kick(&self) -> &Waker {
        self.kick
            .get_or_init(|| Waker::from(Arc::new(Kick(self.me.clone()))))
    }

    /// Starts the instance's task unless it exists.
    pub(crate) fn spawn_task(self: &Arc<Self>) {
        if self.task_live.swap(true, Ordering::AcqRel) {
            return;
        }
        match self.engine.runtime() {
            Some(h) => {
                let cell = Arc::clone(self);
                h.spawn(async move { std::future::poll_fn(|cx| cell.poll_task(cx)).await });
            }
            None => {
                self.task_live.store(false, Ordering::Release);
                tracing::error!(weft.instance = %self.name, message = "Actions are pending but no tokio runtime is available");
            }
        }
    }

    /// The plan the instance runs now (outside the loop; the loop reads `Core::plan`).
    pub(crate) fn plan(&self) -> Arc<CompiledPlan> {
        Arc::clone(&self.plan.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The id of `event` in the instance's current plan (read in place: no `Arc` clone).
    pub(crate) fn event_id(&self, event: &str) -> Option<weft_core::EventId> {
        self.with_plan(|p| p.net.event_id(event))
    }

    /// Runs `f` on the instance's current plan, read in place (no `Arc` clone); a repair
    /// swapping the plan waits meanwhile.
    pub(crate) fn with_plan<R>(&self, f: impl FnOnce(&Arc<CompiledPlan>) -> R) -> R {
        f(&self.plan.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Swaps the plan (a repair, applied by the loop).
    pub(crate) fn set_plan(&self, core: &mut Core, plan: Arc<CompiledPlan>) {
        *self.plan.write().unwrap_or_else(|e| e.into_inner()) = Arc::clone(&plan);
        core.plan = plan;
    }

    /// Queues an input for whoever holds the loop (the caller holds it, and lets go with
    /// [`Cell::release`], which applies it).
    pub(crate) fn enqueue(&self, input: Input) {
        lock(&self.mailbox).push(input);
    }

    /// Delivers an input: runs the loop here if it is free, else leaves the input for the
    /// thread that holds it.
    pub(crate) fn submit(self: &Arc<Self>, input: Input) {
        match self.core.try_lock() {
            Ok(mut g) => {
                self.run(&mut g, input);
                self.release(g);
            }
            Err(TryLockError::Poisoned(p)) => {
                let mut g = p.into_inner();
                self.run(&mut g, input);
                self.release(g);
            }
            Err(TryLockError::WouldBlock) => {
                lock(&self.mailbox).push(input);
                if let Ok(g) = self.core.try_lock() {
                    self.release(g);
                }
            }
        }
    }

    /// Reads (or briefly changes) the instance under its loop lock. Inputs that arrive
    /// meanwhile wait in the mailbox for whoever holds the lock, so the reader drains them
    /// before letting go ([`Cell::release`]): a reader never strands an input.
    pub(crate) fn with_core<T>(self: &Arc<Self>, f: impl FnOnce(&mut Core) -> T) -> T {
        let mut g = lock(&self.core);
        let r = f(&mut g);
        self.release(g);
        r
    }

    /// Drains the mailbox, then lets go of the loop (re-taking it if an input slipped in).
    pub(crate) fn release<'a>(self: &'a Arc<Self>, mut g: MutexGuard<'a, Core>) {
        loop {
            let batch = std::mem::take(&mut *lock(&self.mailbox));
            if batch.is_empty() {
                drop(g);
                if lock(&self.mailbox).is_empty() {
                    return;
                }
                match self.core.try_lock() {
                    Ok(ng) => {
                        g = ng;
                        continue;
                    }
                    Err(_) => return,
                }
            }
            for input in batch {
                self.run(&mut g, input);
            }
        }
    }

    /// Applies `input`, then every action outcome that is ready at once, then settles.
    pub(crate) fn run(self: &Arc<Self>, core: &mut Core, input: Input) {
        let _in_loop = InLoop::enter();
        // Room for the outcomes of a whole fan-out (one allocation instead of growing), if
        // any step can be ready at once.
        let mut ready: VecDeque<Ready> = VecDeque::with_capacity(core.plan.ready_room);
        if matches!(
            input,
            Input::Token { .. } | Input::Timer { .. } | Input::Outcome { .. }
        ) {
            self.check_rate(core);
        }
        // The plan is taken once per batch (not per input) and taken again only if an input
        // changed it (a repair).
        // Outcomes ready at once share the input's clock reading (no second one).
        let now = match &input {
            Input::Start { now, .. }
            | Input::Token { now, .. }
            | Input::Timer { now, .. }
            | Input::Outcome { now, .. } => Some(*now),
            _ => None,
        };
        let plan = Arc::clone(&core.plan);
        self.apply_on(core, &plan, input, &mut ready);
        self.finish(core, plan, ready, now);
    }

    /// Applies the outcomes in `ready` (and those they make ready at once), then settles.
    pub(crate) fn run_ready(self: &Arc<Self>, core: &mut Core, ready: VecDeque<Ready>) {
        let plan = Arc::clone(&core.plan);
        self.finish(core, plan, ready, None);
    }

    /// The rest of [`Cell::run`]: every outcome ready at once, then [`Cell::after`].
    fn finish(
        self: &Arc<Self>,
        core: &mut Core,
        mut plan: Arc<CompiledPlan>,
        mut ready: VecDeque<Ready>,
        now: Option<i64>,
    ) {
        // One clock reading per batch: outcomes that were ready at once share it.
        let now = match now {
            _ if ready.is_empty() => 0,
            Some(now) => now,
            None => self.engine.clock.now_ms(),
        };
        let taking = self.taking(core);
        while let Some(r) = ready.pop_front() {
            self.check_rate(core);
            if !Arc::ptr_eq(&plan, &core.plan) {
                plan = Arc::clone(&core.plan);
            }
            match r {
                Ready::Outcome(firing, result) => {
                    if self.engine.journal.is_none() {
                        // Nothing to record: applied without building its `Input`.
                        self.complete(core, &plan, firing, result, now, &mut ready);
                        self.drain_taking(core, &plan, &mut ready, taking);
                        continue;
                    }
                    self.apply_on(
                        core,
                        &plan,
                        Input::Outcome {
                            firing,
                            result,
                            now,
                        },
                        &mut ready,
                    );
                }
                Ready::Emit {
                    firing,
                    step,
                    correlation,
                    result,
                } => {
                    if let Some(j) = &self.engine.journal {
                        // Journaled as the outcome it is: replay completes the firing.
                        let input = Input::Outcome {
                            firing,
                            result: Ok(Arc::clone(&result)),
                            now,
                        };
                        j.record(&self.tenant, &self.name, &input);
                    }
                    if let Some(i) = core.inst.as_mut() {
                        i.emit_taken(&plan.net, firing, step, correlation, result, now);
                    }
                    self.drain_taking(core, &plan, &mut ready, taking);
                }
            }
        }
        self.after(core);
    }

    /// The one place an instance changes: journal the input, apply it, fire what is enabled.
    pub(crate) fn apply(
        self: &Arc<Self>,
        core: &mut Core,
        input: Input,
        ready: &mut VecDeque<Ready>,
    ) {
        let plan = Arc::clone(&core.plan);
        self.apply_on(core, &plan, input, ready);
    }

    /// [`Cell::apply`] with the instance's current plan (`core.plan`) held by the caller.
    fn apply_on(
        self: &Arc<Self>,
        core: &mut Core,
        plan: &Arc<CompiledPlan>,
        input: Input,
        ready: &mut VecDeque<Ready>,
    ) {
        if let Some(j) = &self.engine.journal {
            j.record(&self.tenant, &self.name, &input);
        }
        let net = &*plan.net;
        match input {
            Input::Start { input, now, .. } => {
                core.inst = Some(Instance::start(net, &self.name, input, now));
                core.last_activity = now;
                self.publish(
                    "plan.started",
                    || serde_json::json!({"plan": &*self.plan_name}),
                );
            }
            Input::Token {
                event,
                payload,
                correlation,
                now,
            } => {
                if let Some(i) = core.inst.as_mut() {
                    let _ = i.add_token(net, event, payload, correlation.as_deref(), now);
                }
                core.last_activity = now;
            }
            Input::Timer {
                id,
                event,
                payload,
                now,
                next_due_ms,
                ..
            } => {
                match next_due_ms {
                    Some(due) => {
                        lock(&self.timer_due).insert(id, due);
                    }
                    None => {
                        lock(&self.timer_due).remove(&id);
                        self.timers.fetch_sub(1, Ordering::AcqRel);
                    }
                }
                if let Some(i) = core.inst.as_mut() {
                    let _ = i.add_token(net, event, payload, None, now);
                }
                core.last_activity = now;
            }
            Input::Outcome {
                firing,
                result,
                now,
            } => self.complete(core, plan, firing, result, now, ready),
            Input::Pause { reason } => {
                if let Some(i) = core.inst.as_mut() {
                    i.pause(reason);
                }
                return;
            }
            Input::Resume => {
                if let Some(i) = core.inst.as_mut() {
                    i.resume(net);
                    core.window = (self.engine.clock.now_ms(), i.fired);
                }
                self.resumed.notify_waiters();
            }
            // Recorded by the tool services (services.rs), never submitted to the loop.
            Input::TimerSet { .. }
            | Input::ContextPut { .. }
            | Input::ApprovalRequested { .. }
            | Input::ApprovalDecided { .. }
            | Input::Charged { .. }
            | Input::PolicyDecided { .. } => return,
            Input::Stop { reason } => {
                if let Some(i) = core.inst.as_mut()
                    && !i.status.is_terminal()
                {
                    i.stop();
                    core.reason = Some(reason);
                }
                self.stopped.store(true, Ordering::Release);
                self.resumed.notify_waiters();
                if let Some(a) = core.active.take()
                    && let Some(w) = &a.waker
                {
                    w.wake_by_ref();
                }
                return;
            }
            Input::Repair(r) => {
                self.apply_repair(core, plan, &r);
                // Fire on the revised plan from here on.
                let revised = Arc::clone(&core.plan);
                self.drain(core, &revised, ready);
                return;
            }
            Input::RepairFailed { reason } => {
                core.repairing = false;
                if let Some(i) = core.inst.as_mut() {
                    i.fail_with(reason.clone());
                }
                self.publish(
                    "plan.repair.failed",
                    || serde_json::json!({"reason": reason}),
                );
                return;
            }
        }
        self.drain(core, plan, ready);
    }

    /// Fires every enabled step of `plan` (the instance's current plan, held by the
    /// caller); outcomes that are ready at once go to `ready`.
    fn drain(
        self: &Arc<Self>,
        core: &mut Core,
        plan: &Arc<CompiledPlan>,
        ready: &mut VecDeque<Ready>,
    ) {
        let taking = self.taking(core);
        self.drain_taking(core, plan, ready, taking);
    }

    /// Whether immediate actions are taken ([`Cell::call_taken`]) rather than recorded as
    /// in flight: unless something reads the firing between its dispatch and its outcome
    /// (a trace, a bus subscriber).
    fn taking(&self, core: &Core) -> bool {
        core.trace.is_none() && !self.engine.bus.wants()
    }

    /// [`Cell::drain`] with [`Cell::taking`] decided by the caller (once for the outcomes of
    /// a turn: a subscriber that arrives meanwhile sees the firings of the next one).
    fn drain_taking(
        self: &Arc<Self>,
        core: &mut Core,
        plan: &Arc<CompiledPlan>,
        ready: &mut VecDeque<Ready>,
        taking: bool,
    ) {
        let take: &[bool] = if taking { &plan.takes } else { &[] };
        loop {
            let Some(next) = core
                .inst
                .as_mut()
                .and_then(|i| i.next_taking(&plan.net, take))
            else {
                return;
            };
            match next {
                Next::Fired(fired) => self.dispatch(core, plan, fired, ready),
                Next::Taken(taken) => self.call_taken(core, plan, taken, ready),
            }
        }
    }

    /// Pauses a reactive instance that fires faster than the configured limit.
    fn check_rate(self: &Arc<Self>, core: &mut Core) {
        let Some(limit) = self.engine.max_firings_per_sec else {
            return;
        };
        if core.plan.net.graph_type != GraphType::Reactive {
            return;
        }
        let Some(inst) = core.inst.as_ref() else {
            return;
        };
        if inst.status != Status::Running {
            return;
        }
        let now = self.engine.clock.now_ms();
        if now.saturating_sub(core.window.0) >= 1000 {
            core.window = (now, inst.fired);
            return;
        }
        if inst.fired - core.window.1 > limit {
            let reason = format!(
                "firing-rate limit: more than {limit} firings within one second (a runaway loop?); resume to continue"
            );
            tracing::warn!(weft.instance = %self.name, message = "Paused by the firing-rate limit");
            let mut none = VecDeque::new();
            self.apply(core, Input::Pause { reason }, &mut none);
        }
    }

    /// After a batch of inputs: settle, report a settled status once, keep the engine's
    /// table and routing index in step, and start the task if actions are pending.
    pub(crate) fn after(self: &Arc<Self>, core: &mut Core) {
        let plan = Arc::clone(&core.plan);
        let net = &*plan.net;
        let Some(inst) = core.inst.as_mut() else {
            return;
        };
        let timer_pending = self.timers.load(Ordering::Acquire) > 0;
        let mut status = inst.settle_with(net, timer_pending).clone();
        if status == Status::Stuck && self.engine.repair_stuck && !core.repairing {
            let waiting = inst.waiting(net);
            self.request_repair(core, stuck_failure(&waiting));
            if let Some(i) = core.inst.as_ref() {
                status = i.status.clone();
            }
        }
        let name = status.name();
        let terminal = status.is_terminal();
        let settled = match status {
            Status::Running => false,
            Status::Stuck | Status::Waiting | Status::Paused { .. } => !core.repairing,
            _ => true,
        };
        // A pending timer will move a waiting instance by itself: it is reported
        // (`plan.waiting`, with the deadline) but its waiters wait on.
        core.timer_wait = status == Status::Waiting && timer_pending;
        if !settled {
            core.reported = None;
        } else if core.reported != Some(name) {
            core.reported = Some(name);
            let ty = match name {
                "completed" => "plan.completed",
                "waiting" => "plan.waiting",
                "stuck" => "plan.stuck",
                "failed" => "plan.failed",
                "paused" => "plan.paused",
                _ => "plan.stopped",
            };
            if name == "stuck" {
                self.publish_guard_errors(core);
            }
            self.publish(ty, || self.status_data(core));
        }
        if Cell::settled(core) && !core.waiters.is_empty() {
            let o = self.outcome(core);
            // The last waiter (usually the only one) takes the outcome itself, uncopied.
            let last = core.waiters.pop();
            for w in core.waiters.drain(..) {
                let _ = w.send(o.clone());
            }
            if let Some(w) = last {
                let _ = w.send(o);
            }
        }
        if terminal {
            if let Some(a) = core.active.take()
                && let Some(w) = &a.waker
            {
                w.wake_by_ref();
            }
            if core.registered {
                core.registered = false;
                self.engine.unregister(self, &core.plan);
            }
            if let Some(j) = &self.engine.journal {
                j.idle(&self.tenant, &self.name);
            }
            return;
        }
        if !core.registered {
            core.registered = true;
            self.engine.register_cell(self, &core.plan);
        }
        if let Some(j) = &self.engine.journal
            && core
                .active
                .as_ref()
                .is_none_or(|a| a.pending.is_empty() || !a.gated.is_empty())
        {
            // Nothing in flight: no dispatch will make the journal durable, so say so. Gated
            // calls wait for it: write it now rather than when the task first polls.
            j.idle(&self.tenant, &self.name);
        }
        // Pending actions start the task as they are kept (`push_pending`: at once, or on
        // their first wake); gated calls need it now, to be called once the journal is
        // durable.
        if core.active.as_ref().is_some_and(|a| !a.gated.is_empty()) {
            self.spawn_task();
        }
    }

    /// The instance's task: calls gated actions once the journal is durable, polls pending
    /// actions and applies their outcomes. Also run by a [`Waiter`] that holds the drive.
    fn poll_task(self: &Arc<Self>, cx: &mut Context<'_>) -> Poll<()> {
        let _in_loop = InLoop::enter();
        let mut g = lock(&self.core);
        let mut budget = 64u32;
        loop {
            let Some(a) = g.active.as_mut() else {
                self.task_live.store(false, Ordering::Release);
                self.release(g);
                return Poll::Ready(());
            };
            if !a.gated.is_empty() && self.run_gated(&mut g, cx) {
                budget = budget.saturating_sub(1);
                if budget == 0 {
                    cx.waker().wake_by_ref();
                    self.release(g);
                    return Poll::Pending;
                }
                continue;
            }
            let Some(a) = g.active.as_mut() else {
                self.task_live.store(false, Ordering::Release);
                self.release(g);
                return Poll::Ready(());
            };
            let (gate, waker) = a.gate.get_or_insert_with(Gate::new);
            let (polled, woken) = gate.poll(waker, cx, |gx| a.pending.poll_next(gx));
            match polled {
                // Woken while polled (`FuturesUnordered`'s yield, or an action's wake): poll
                // again here rather than be rescheduled.
                Poll::Pending if woken => {
                    budget = budget.saturating_sub(1);
                    if budget == 0 {
                        cx.waker().wake_by_ref();
                        self.release(g);
                        return Poll::Pending;
                    }
                }
                Poll::Ready(Some((firing, result))) => {
                    let now = self.engine.clock.now_ms();
                    self.run(
                        &mut g,
                        Input::Outcome {
                            firing,
                            result,
                            now,
                        },
                    );
                    budget = budget.saturating_sub(1);
                    if budget == 0 {
                        cx.waker().wake_by_ref();
                        self.release(g);
                        return Poll::Pending;
                    }
                }
                Poll::Ready(None) if a.gated.is_empty() => {
                    g.active = None;
                    self.task_live.store(false, Ordering::Release);
                    self.release(g);
                    return Poll::Ready(());
                }
                // Only gated calls left: the journal wakes the task.
                Poll::Ready(None) | Poll::Pending => {
                    a.waker = Some(cx.waker().clone());
                    self.release(g);
                    return Poll::Pending;
                }
            }
        }
    }

    /// A stuck instance whose guards fail to evaluate says so: one `plan.step.error` per
    /// such step (`"guard": true`), before `plan.stuck`, whose `waiting` carries the errors.
    fn publish_guard_errors(&self, core: &Core) {
        if !self.engine.bus.wants() {
            return;
        }
        let Some(i) = &core.inst else { return };
        for w in i.waiting(&core.plan.net) {
            if let Some(e) = w.guard_error {
                self.publish("plan.step.error", || {
                    serde_json::json!({"step": w.step, "guard": true,
                        "error": {"code": "guard_error", "message": e}})
                });
            }
        }
    }

    fn status_data(&self, core: &Core) -> Value {
        let mut d = serde_json::json!({"plan": &*self.plan_name});
        if let Some(i) = &core.inst {
            d["status"] = serde_json::to_value(&i.status).unwrap_or(Value::Null);
            if matches!(i.status, Status::Stuck | Status::Waiting) {
                d["waiting"] =
                    serde_json::to_value(i.waiting(&core.plan.net)).unwrap_or(Value::Null);
            }
            if let Some(a) = self.awaits(core) {
                d["awaits"] = serde_json::to_value(a).unwrap_or(Value::Null);
            }
        }
        if let Some(r) = &core.reason {
            d["reason"] = Value::from(r.as_str());
        }
        d
    }

    /// What a `waiting` instance waits for: the input events that could enable a step and
    /// when its pending timers are due (`None` for any other status).
    fn awaits(&self, core: &Core) -> Option<Awaits> {
        let i = core.inst.as_ref().filter(|i| i.status == Status::Waiting)?;
        let mut timers_due_ms: Vec<i64> = lock(&self.timer_due).values().copied().collect();
        timers_due_ms.sort_unstable();
        Some(Awaits {
            events: i.awaited_events(&core.plan.net),
            timers_due_ms,
        })
    }

    /// Has the instance settled (and been reported), with nothing that will move it by
    /// itself (a `waiting` instance's pending timer)?
    pub(crate) fn settled(core: &Core) -> bool {
        core.reported.is_some() && !core.timer_wait
    }

    /// The outcome as it stands.
    pub(crate) fn outcome(&self, core: &Core) -> Outcome {
        let net = &*core.plan.net;
        let Some(inst) = &core.inst else {
            return Outcome {
                instance: String::from(&*self.name),
                status: Status::Running,
                reason: None,
                results: Vec::new(),
                waiting: Vec::new(),
                awaits: None,
                trace: None,
            };
        };
        Outcome {
            instance: String::from(&*self.name),
            status: inst.status.clone(),
            reason: core.reason.clone(),
            // What `Instance::results` returns, read in place (no token is copied).
            results: net
                .events
                .iter()
                .enumerate()
                .filter(|(_, e)| e.is_output)
                .filter_map(|(i, e)| {
                    let slot = *net.event_slots[i].first()?;
                    let toks = &inst.marking.slots[slot as usize].tokens;
                    (!toks.is_empty()).then(|| ResultTokens {
                        event: e.name.clone(),
                        payloads: toks.iter().map(|t| Arc::clone(&t.payload)).collect(),
                    })
                })
                .collect(),
            waiting: if matches!(inst.status, Status::Stuck | Status::Waiting) {
                inst.waiting(net)
            } else {
                Vec::new()
            },
            awaits: self.awaits(core),
            trace: core.trace.clone(),
        }
    }

    /// A live snapshot.
    pub(crate) fn snapshot(&self, core: &Core) -> StateSnapshot {
        let net = &*core.plan.net;
        let (status, marking, waiting, in_flight, fired) = match &core.inst {
            Some(i) => (
                i.status.clone(),
                i.marking.counts_by_event(net),
                i.waiting(net),
                i.in_flight
                    .iter()
                    .map(|(f, inf)| InFlightInfo {
                        firing: *f,
                        step: net.step(inf.step).name.clone(),
                        attempt: inf.attempt,
                    })
                    .collect(),
                i.fired,
            ),
            None => (Status::Running, Vec::new(), Vec::new(), Vec::new(), 0),
        };
        StateSnapshot {
            instance: self.name.to_string(),
            tenant: self.tenant.to_string(),
            plan: self.plan_name.to_string(),
            status,
            reason: core.reason.clone(),
            marking,
            waiting,
            awaits: self.awaits(core),
            in_flight,
            fired,
            awaiting_approval: self.awaits_approval(),
            usage: self.counted().then(|| self.usage()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};

    use futures::StreamExt;
    use futures::stream::FuturesUnordered;

    use super::{Done, Gate, Pending, PendingFut};

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `FuturesUnordered`'s wake after polling its one pending future stays with the gate
    /// (noted, not passed to the task); a wake outside the poll reaches the task.
    #[test]
    fn a_gate_keeps_the_wakes_of_a_poll_and_passes_the_others_on() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(Arc::clone(&count));
        let cx = Context::from_waker(&task);
        let (gate, waker) = Gate::new();

        let mut set: FuturesUnordered<std::future::Pending<()>> = FuturesUnordered::new();
        set.push(std::future::pending());
        let (r, woken) = gate.poll(&waker, &cx, |gx| set.poll_next_unpin(gx));
        assert_eq!(r, Poll::Pending);
        assert!(woken, "the set woke its caller");
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "and the task was not woken"
        );

        // Polled again with nothing ready, the set stays quiet.
        let (r, woken) = gate.poll(&waker, &cx, |gx| set.poll_next_unpin(gx));
        assert_eq!(r, Poll::Pending);
        assert!(!woken);

        waker.wake_by_ref();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "a wake between polls reaches the task"
        );
    }

    /// An action's future whose outcome comes from a channel, for firing `n`.
    fn action(n: u64) -> (futures::channel::oneshot::Sender<()>, PendingFut) {
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        let fut: PendingFut = Box::pin(async move {
            let _ = rx.await;
            let done: Done = (n, Ok(Arc::new(n.into())));
            done
        });
        (tx, fut)
    }

    fn firing(p: Poll<Option<Done>>) -> Poll<Option<u64>> {
        p.map(|o| o.map(|(f, _)| f))
    }

    /// One pending action is kept as it is; a second, pushed after the first was polled,
    /// joins it in a set; each outcome comes out once, in the order they finish, then
    /// `Ready(None)`, and every wake reaches the poller.
    #[test]
    fn pending_actions_finish_once_each_in_the_order_they_finish() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let mut pending = Pending::default();
        assert!(pending.is_empty());
        assert_eq!(firing(pending.poll_next(&mut cx)), Poll::Ready(None));

        let (tx1, f1) = action(1);
        pending.push(f1);
        assert!(matches!(pending, Pending::One(_)));
        assert!(!pending.is_empty());
        assert_eq!(firing(pending.poll_next(&mut cx)), Poll::Pending);

        let (tx2, f2) = action(2);
        pending.push(f2);
        assert!(matches!(pending, Pending::Many(_)));
        assert_eq!(firing(pending.poll_next(&mut cx)), Poll::Pending);

        let before = count.0.load(Ordering::SeqCst);
        tx2.send(()).unwrap();
        assert!(
            count.0.load(Ordering::SeqCst) > before,
            "the wake reached the poller"
        );
        assert_eq!(firing(pending.poll_next(&mut cx)), Poll::Ready(Some(2)));
        assert_eq!(firing(pending.poll_next(&mut cx)), Poll::Pending);
        tx1.send(()).unwrap();
        assert_eq!(firing(pending.poll_next(&mut cx)), Poll::Ready(Some(1)));
        assert!(pending.is_empty());
        assert_eq!(firing(pending.poll_next(&mut cx)), Poll::Ready(None));

        // Alone again, an action is kept as it is, and its wake reaches the poller too.
        let (tx3, f3) = action(3);
        let mut one = Pending::default();
        one.push(f3);
        assert_eq!(firing(one.poll_next(&mut cx)), Poll::Pending);
        let before = count.0.load(Ordering::SeqCst);
        tx3.send(()).unwrap();
        assert!(count.0.load(Ordering::SeqCst) > before);
        assert_eq!(firing(one.poll_next(&mut cx)), Poll::Ready(Some(3)));
        assert!(one.is_empty() && matches!(one, Pending::None));
    }
}
