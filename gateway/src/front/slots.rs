//! A fixed number of slots for requests in flight, and a bounded priority queue of requests
//! waiting for one. A freed slot goes to the waiter with the lowest priority value (vLLM's
//! convention: lower is more urgent), first come first served among equals. A waiter that gives
//! up (timed out, or its client left) never strands a slot handed to it.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

struct Waiter {
    priority: i64,
    seq: u64,
    wake: oneshot::Sender<Slot>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Waiter {}

impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiter {
    /// The heap's top is the lowest priority value, then the earliest arrival.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.priority, other.seq).cmp(&(self.priority, self.seq))
    }
}

struct State {
    free: usize,
    waiters: BinaryHeap<Waiter>,
    next_seq: u64,
}

/// Slots and their wait queue.
pub struct Slots {
    state: Arc<Mutex<State>>,
    queue_size: usize,
}

/// A slot held; freed (or handed to the next waiter) when dropped.
pub struct Slot {
    state: Arc<Mutex<State>>,
    /// Whether dropping it frees the slot (not so for one that could not be handed over).
    armed: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.armed {
            release(&self.state);
        }
    }
}

fn release(state: &Arc<Mutex<State>>) {
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    while let Some(waiter) = s.waiters.pop() {
        let slot = Slot {
            state: state.clone(),
            armed: true,
        };
        match waiter.wake.send(slot) {
            Ok(()) => return,
            // The waiter left: the slot stays here, for the next waiter or the free count.
            Err(mut slot) => slot.armed = false,
        }
    }
    s.free += 1;
}

/// Why no slot was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoSlot {
    /// The queue is full.
    QueueFull,
    /// The wait ran out.
    TimedOut,
}

impl Slots {
    /// `count` slots and room for `queue_size` waiters.
    pub fn new(count: usize, queue_size: usize) -> Self {
        Slots {
            state: Arc::new(Mutex::new(State {
                free: count,
                waiters: BinaryHeap::new(),
                next_seq: 0,
            })),
            queue_size,
        }
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .waiters
            .len()
    }

    /// A slot, at once or after waiting at most `timeout` in the queue at `priority`.
    pub async fn acquire(&self, priority: i64, timeout: Duration) -> Result<Slot, NoSlot> {
        let receiver = {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if s.free > 0 {
                s.free -= 1;
                return Ok(Slot {
                    state: self.state.clone(),
                    armed: true,
                });
            }
            s.waiters.retain(|w| !w.wake.is_closed());
            if s.waiters.len() >= self.queue_size {
                return Err(NoSlot::QueueFull);
            }
            let (wake, receiver) = oneshot::channel();
            let seq = s.next_seq;
            s.next_seq += 1;
            s.waiters.push(Waiter {
                priority,
                seq,
                wake,
            });
            receiver
        };
        let mut ticket = Ticket { receiver };
        match tokio::time::timeout(timeout, &mut ticket.receiver).await {
            Ok(Ok(slot)) => Ok(slot),
            _ => ticket.take().ok_or(NoSlot::TimedOut),
        }
    }
}

/// A place in the queue; a slot that arrives as the waiter leaves is freed, not lost.
struct Ticket {
    receiver: oneshot::Receiver<Slot>,
}

impl Ticket {
    /// Closes the place and takes a slot that was handed over meanwhile.
    fn take(&mut self) -> Option<Slot> {
        self.receiver.close();
        self.receiver.try_recv().ok()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        drop(self.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn freed_slots_go_to_the_most_urgent_waiter_first() {
        let slots = Arc::new(Slots::new(1, 8));
        let held = slots.acquire(0, Duration::from_secs(1)).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, priority) in [("late-normal", 5), ("urgent", -1), ("later-normal", 5)] {
            let (queue, order) = (slots.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let slot = queue
                    .acquire(priority, Duration::from_secs(5))
                    .await
                    .unwrap();
                order.lock().unwrap().push(name);
                drop(slot);
            }));
            while slots.waiting() < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            ["urgent", "late-normal", "later-normal"]
        );
        assert!(slots.acquire(0, Duration::ZERO).await.is_ok(), "all freed");
    }

    #[tokio::test]
    async fn full_queues_and_timeouts_refuse_and_leave_no_slot_behind() {
        let slots = Arc::new(Slots::new(1, 1));
        let held = slots.acquire(0, Duration::ZERO).await.unwrap();
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire(0, Duration::from_secs(5)).await.map(drop) })
        };
        while slots.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            slots.acquire(0, Duration::from_secs(1)).await.err(),
            Some(NoSlot::QueueFull)
        );
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(
            slots.acquire(0, Duration::from_millis(10)).await.err(),
            Some(NoSlot::TimedOut),
            "a waiter that left frees its place"
        );
        drop(held);
        let again = slots.acquire(0, Duration::ZERO).await;
        assert!(again.is_ok(), "the slot came back");
    }
}
