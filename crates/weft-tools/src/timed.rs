//! Timing every tool call at one link of the chain: [`TimeCalls`] wraps each tool in
//! [`Timed`], which tells a [`CallTimer`] when a call starts and when it ends, whichever way
//! the runtime calls the tool (a future, [`Tool::call_inline`], [`Tool::call_now`]). The
//! server's metrics (steps fired, action latency) and `weft bench tools` (weft's own time per
//! call) are two timers of this one wrapper.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::{BoxFuture, InlineArgs, InlineContext, Interceptor, Needs, Tool, ToolContext};
use crate::{ToolError, ToolSpec};

/// What a [`Timed`] tool reports of each of its calls.
pub trait CallTimer: Send + Sync + 'static {
    /// What the timer is, for people (`weft config` prints it as the link's description).
    fn describe(&self) -> String;

    /// A call starts: the wrapped tool is about to be called.
    fn started(&self) {}

    /// The call that started at `since` has ended: its future is ready, or the inline call
    /// returned (successful or not).
    fn ended(&self, since: Instant);
}

/// The interceptor that wraps every tool in [`Timed`] with one shared timer.
pub struct TimeCalls<T>(pub Arc<T>);

impl<T: CallTimer> Interceptor for TimeCalls<T> {
    fn describe(&self) -> String {
        self.0.describe()
    }

    fn wrap(&self, tool: Arc<dyn Tool>) -> Arc<dyn Tool> {
        Arc::new(Timed {
            inner: tool,
            timer: Arc::clone(&self.0),
        })
    }
}

/// A tool whose calls are timed by a [`CallTimer`]; otherwise the tool it wraps: the same
/// spec, needs and immediacy, so the runtime keeps its inline fast paths.
pub struct Timed<T> {
    inner: Arc<dyn Tool>,
    timer: Arc<T>,
}

impl<T: CallTimer> Timed<T> {
    fn timed<R>(&self, f: impl FnOnce() -> R) -> R {
        self.timer.started();
        let t = Instant::now();
        let out = f();
        self.timer.ended(t);
        out
    }
}

impl<T: CallTimer> Tool for Timed<T> {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }
    fn profile_needs(&self) -> Option<Needs> {
        self.inner.profile_needs()
    }
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        self.timer.started();
        let t = Instant::now();
        let fut = self.inner.call(ctx, args);
        let timer = Arc::clone(&self.timer);
        Box::pin(async move {
            let out = fut.await;
            timer.ended(t);
            out
        })
    }
    fn is_immediate(&self) -> bool {
        self.inner.is_immediate()
    }
    fn waits_for_journal(&self) -> bool {
        self.inner.waits_for_journal()
    }
    fn call_inline(
        &self,
        ctx: InlineContext<'_>,
        args: InlineArgs<'_>,
    ) -> Result<Value, ToolError> {
        self.timed(|| self.inner.call_inline(ctx, args))
    }
    fn call_now(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        self.timed(|| self.inner.call_now(ctx, args))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    /// Counts starts and keeps each ended call's duration.
    #[derive(Default)]
    struct Log {
        started: Mutex<u32>,
        ended: Mutex<Vec<Duration>>,
    }

    impl CallTimer for Log {
        fn describe(&self) -> String {
            "log".into()
        }
        fn started(&self) {
            *self.started.lock().expect("lock") += 1;
        }
        fn ended(&self, since: Instant) {
            self.ended.lock().expect("lock").push(since.elapsed());
        }
    }

    const PAUSE: Duration = Duration::from_millis(30);

    /// Immediate and waits for the journal; inline calls take [`PAUSE`], and a call's future
    /// is ready at its second poll.
    struct Slow(ToolSpec);

    impl Tool for Slow {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        fn call(&self, _: ToolContext, a: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
            let mut polled = false;
            let mut a = Some(a);
            Box::pin(std::future::poll_fn(move |_| {
                if std::mem::replace(&mut polled, true) {
                    Poll::Ready(Ok(a.take().unwrap_or_default()))
                } else {
                    Poll::Pending
                }
            }))
        }
        fn is_immediate(&self) -> bool {
            true
        }
        fn waits_for_journal(&self) -> bool {
            true
        }
        fn profile_needs(&self) -> Option<Needs> {
            Some(Needs::nothing("fixed"))
        }
        fn call_now(&self, _: ToolContext, a: Value) -> Result<Value, ToolError> {
            std::thread::sleep(PAUSE);
            Ok(a)
        }
    }

    /// Every way of calling the tool is timed once, from before the call until its result;
    /// the wrapper keeps the tool's spec, needs and flags and passes its results on.
    #[test]
    fn every_call_is_timed_from_start_to_result() {
        let log = Arc::new(Log::default());
        let link = TimeCalls(Arc::clone(&log));
        assert_eq!(link.describe(), "log");
        let t = link.wrap(Arc::new(Slow(ToolSpec::new(
            "slow",
            crate::Effect::Pure,
            true,
        ))));
        assert_eq!(t.spec().name, "slow");
        assert!(t.is_immediate() && t.waits_for_journal());
        assert_eq!(t.profile_needs(), Some(Needs::nothing("fixed")));
        let ended = || log.ended.lock().expect("lock").clone();

        let mut fut = t.call(ToolContext::detached("s"), json!(1));
        assert_eq!(*log.started.lock().expect("lock"), 1, "started when called");
        let mut cx = Context::from_waker(Waker::noop());
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        std::thread::sleep(PAUSE);
        assert!(ended().is_empty(), "a pending call has not ended");
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(json!(1))));
        assert_eq!(ended().len(), 1, "ended when its future is ready");

        assert_eq!(
            t.call_now(ToolContext::detached("s"), json!(2)),
            Ok(json!(2))
        );
        let build = |_: Vec<(Arc<str>, Arc<Value>)>| ToolContext::detached("s");
        let inline = t.call_inline(
            InlineContext::new(Vec::new(), &build),
            InlineArgs::Owned(json!(3)),
        );
        assert_eq!(inline, Ok(json!(3)));

        assert_eq!(*log.started.lock().expect("lock"), 3);
        let ended = ended();
        assert_eq!(ended.len(), 3, "each call ended once: {ended:?}");
        assert!(
            ended.iter().all(|d| *d >= PAUSE),
            "each call is timed until its result: {ended:?}"
        );
    }
}
