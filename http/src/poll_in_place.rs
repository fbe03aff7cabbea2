//! Polling a connection again in place when it wakes itself, instead of yielding its worker.
//!
//! hyper's HTTP/1 dispatcher registers its task's waker with a request body's channel, and the
//! handler, polled inside that same task, wakes that waker when it takes the body. Tokio counts a
//! task woken during its own poll as a yield: the task goes to the back of the run queue and a
//! parked worker is woken to steal it. On every request that costs a futex call and, often, a
//! move of the connection to another core. [`PollInPlace`] polls its future with a waker of its
//! own: a wake that arrives while the future is being polled makes it poll the future again at
//! once (while the task has cooperative budget left), and only a wake from outside a poll reaches
//! the task.

use futures::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// How many times in a row one poll of the task polls the future again for its own wakes before
/// it yields to the scheduler after all, so that a future that always wakes itself still lets
/// other tasks run.
const MOST_POLLS_IN_PLACE: usize = 4;

/// Set while the future is being polled.
const POLLING: u8 = 1;
/// Set when the future was woken since its poll began.
const WOKEN: u8 = 2;

/// A future polled again in place when it wakes itself during a poll.
pub struct PollInPlace<F> {
    future: Pin<Box<F>>,
    signal: Arc<Signal>,
    waker: Waker,
}

/// The future's own waker: records a wake during a poll, and passes any other on to the task.
struct Signal {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.state.fetch_or(WOKEN, Ordering::AcqRel) & POLLING == 0 {
            self.task.wake();
        }
    }
}

impl<F: Future> PollInPlace<F> {
    /// Wraps `future`.
    pub fn new(future: F) -> Self {
        let signal = Arc::new(Signal {
            state: AtomicU8::new(0),
            task: AtomicWaker::new(),
        });
        PollInPlace {
            future: Box::pin(future),
            waker: Waker::from(signal.clone()),
            signal,
        }
    }
}

impl<F: Future> Future for PollInPlace<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.signal.task.register(cx.waker());
        let mut own = Context::from_waker(&this.waker);
        for _ in 0..MOST_POLLS_IN_PLACE {
            this.signal.state.store(POLLING, Ordering::Release);
            let polled = this.future.as_mut().poll(&mut own);
            let state = this.signal.state.swap(0, Ordering::AcqRel);
            if polled.is_ready() || state & WOKEN == 0 {
                return polled;
            }
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts the task's wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Wakes itself on its first `n` polls, then is ready with how many polls it took.
    fn waking_itself(n: usize) -> impl Future<Output = usize> {
        let mut polls = 0;
        std::future::poll_fn(move |cx| {
            polls += 1;
            if polls > n {
                return Poll::Ready(polls);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        })
    }

    #[tokio::test]
    async fn a_wake_during_the_poll_polls_again_in_place() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(count.clone());
        let mut cx = Context::from_waker(&task);
        let mut once = PollInPlace::new(waking_itself(1));
        assert_eq!(Pin::new(&mut once).poll(&mut cx), Poll::Ready(2));
        assert_eq!(count.0.load(Ordering::Relaxed), 0, "the task was not woken");

        let mut always = PollInPlace::new(waking_itself(usize::MAX));
        assert!(Pin::new(&mut always).poll(&mut cx).is_pending());
        assert_eq!(
            count.0.load(Ordering::Relaxed),
            1,
            "after its polls in place it yields, waking the task once"
        );
    }

    #[tokio::test]
    async fn a_wake_from_outside_a_poll_reaches_the_task() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(count.clone());
        let mut cx = Context::from_waker(&task);
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let mut waiting = PollInPlace::new(rx);
        assert!(Pin::new(&mut waiting).poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::Relaxed), 0);
        tx.send(7).unwrap();
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert_eq!(Pin::new(&mut waiting).poll(&mut cx), Poll::Ready(Ok(7)));
    }
}
