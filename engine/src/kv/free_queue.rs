//! A doubly linked queue of block ids kept in two arrays, so that a block can leave from the
//! middle in O(1) when a prefix-cache hit takes it back.

const NONE: u32 = u32::MAX;

/// Free blocks in eviction order: the front is handed out (and evicted) first.
#[derive(Debug)]
pub(crate) struct FreeQueue {
    prev: Vec<u32>,
    next: Vec<u32>,
    queued: Vec<bool>,
    head: u32,
    tail: u32,
    len: usize,
}

impl FreeQueue {
    /// A queue holding every block `0..n` in ascending order.
    pub(crate) fn full(n: usize) -> Self {
        let mut queue = FreeQueue {
            prev: vec![NONE; n],
            next: vec![NONE; n],
            queued: vec![false; n],
            head: NONE,
            tail: NONE,
            len: 0,
        };
        for id in 0..n as u32 {
            queue.push_back(id);
        }
        queue
    }

    /// Number of queued blocks.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether `id` is queued.
    pub(crate) fn contains(&self, id: u32) -> bool {
        self.queued[id as usize]
    }

    /// Queues `id` last (evicted after everything already queued).
    pub(crate) fn push_back(&mut self, id: u32) {
        debug_assert!(!self.queued[id as usize]);
        let i = id as usize;
        self.prev[i] = self.tail;
        self.next[i] = NONE;
        if self.tail == NONE {
            self.head = id;
        } else {
            self.next[self.tail as usize] = id;
        }
        self.tail = id;
        self.queued[i] = true;
        self.len += 1;
    }

    /// Takes the first block.
    pub(crate) fn pop_front(&mut self) -> Option<u32> {
        let id = self.head;
        if id == NONE {
            return None;
        }
        self.remove(id);
        Some(id)
    }

    /// Takes `id` out of the queue, wherever it is.
    pub(crate) fn remove(&mut self, id: u32) {
        let i = id as usize;
        debug_assert!(self.queued[i]);
        let (prev, next) = (self.prev[i], self.next[i]);
        if prev == NONE {
            self.head = next;
        } else {
            self.next[prev as usize] = next;
        }
        if next == NONE {
            self.tail = prev;
        } else {
            self.prev[next as usize] = prev;
        }
        self.queued[i] = false;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_removal() {
        let mut q = FreeQueue::full(4);
        q.remove(1);
        q.push_back(1);
        q.remove(2);
        assert_eq!(q.len(), 3);
        assert_eq!(q.pop_front(), Some(0));
        assert_eq!(q.pop_front(), Some(3));
        assert_eq!(q.pop_front(), Some(1));
        assert_eq!(q.pop_front(), None);
        assert!(!q.contains(2));
    }
}
