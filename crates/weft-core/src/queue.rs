//! [`TokenQueue`]: the tokens waiting on one slot, oldest first, with the first one stored
//! in place.
//!
//! Most slots hold at most one token at a time (a chain moves one token from slot to slot, a
//! broadcast puts one token on each listener's slot), so a `VecDeque` per slot would spend
//! an allocation and a free on nearly every token put (callgrind, W2 fan-out: growing and
//! dropping `VecDeque` slot queues is ~10% of the instructions). The queue keeps its front
//! token inline and only the second and later ones in a `VecDeque`. Its serialized form is a
//! sequence, exactly the `VecDeque`'s, so snapshots read the same either way.

use std::collections::VecDeque;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::token::{Token, TokenId};

/// A FIFO of tokens. Invariant: `rest` is empty whenever `head` is `None`.
#[derive(Debug, Clone, Default)]
pub struct TokenQueue {
    head: Option<Token>,
    rest: VecDeque<Token>,
}

impl TokenQueue {
    /// An empty queue (no allocation).
    pub const fn new() -> Self {
        TokenQueue {
            head: None,
            rest: VecDeque::new(),
        }
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.rest.len()
    }

    /// No tokens?
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// Whether the queue holds nothing on the heap (no token and no buffer), so dropping it
    /// would do nothing.
    pub(crate) fn is_bare(&self) -> bool {
        self.head.is_none() && self.rest.capacity() == 0
    }

    /// The token at `pos` (0 = oldest).
    pub fn get(&self, pos: usize) -> Option<&Token> {
        match pos {
            0 => self.head.as_ref(),
            _ => self.rest.get(pos - 1),
        }
    }

    /// The tokens, oldest first.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            head: self.head.as_ref(),
            rest: self.rest.iter(),
        }
    }

    /// Appends the newest token.
    #[inline]
    pub fn push_back(&mut self, token: Token) {
        if self.head.is_none() {
            self.head = Some(token);
        } else {
            self.rest.push_back(token);
        }
    }

    /// Removes the oldest token.
    #[inline]
    pub fn pop_front(&mut self) -> Option<Token> {
        // The head is moved out once, straight into the result (taking it and then
        // checking it made the compiler stage the token on the stack twice).
        if self.rest.is_empty() {
            self.head.take()
        } else {
            let next = self.rest.pop_front();
            std::mem::replace(&mut self.head, next)
        }
    }

    /// Removes the token at `pos`.
    #[inline]
    pub fn remove(&mut self, pos: usize) -> Option<Token> {
        match pos {
            0 => self.pop_front(),
            _ => self.rest.remove(pos - 1),
        }
    }

    /// [`TokenQueue::remove`] onto the end of `out`; returns whether a token was there.
    #[inline]
    pub fn remove_into(&mut self, pos: usize, out: &mut Vec<Token>) -> bool {
        // The head straight onto `out` when it is the only token (the usual case).
        if pos == 0 && self.rest.is_empty() {
            return self.head.take().map(|t| out.push(t)).is_some();
        }
        self.remove(pos).map(|t| out.push(t)).is_some()
    }

    /// Inserts a token at `pos`, shifting the later ones back; a position past the end
    /// appends (callers pass a `partition_point`, which never is).
    pub fn insert(&mut self, pos: usize, token: Token) {
        if pos == 0 {
            if let Some(old) = self.head.replace(token) {
                self.rest.push_front(old);
            }
        } else if pos > self.len() {
            self.push_back(token);
        } else {
            self.rest.insert(pos - 1, token);
        }
    }

    /// The number of leading tokens for which `pred` holds (the tokens are partitioned by
    /// it, as by `VecDeque::partition_point`).
    pub fn partition_point(&self, mut pred: impl FnMut(&Token) -> bool) -> usize {
        match &self.head {
            Some(h) if pred(h) => 1 + self.rest.partition_point(pred),
            _ => 0,
        }
    }

    /// Position of the token with id `id` (binary search: ids increase along the queue).
    pub fn position(&self, id: TokenId) -> Option<usize> {
        let h = self.head.as_ref()?;
        if h.id == id {
            return Some(0);
        }
        if h.id > id {
            return None;
        }
        let (a, b) = self.rest.as_slices();
        match a.binary_search_by_key(&id, |t| t.id) {
            Ok(i) => Some(1 + i),
            Err(_) => b
                .binary_search_by_key(&id, |t| t.id)
                .ok()
                .map(|i| 1 + a.len() + i),
        }
    }
}

/// Iterator over a [`TokenQueue`], oldest first.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    head: Option<&'a Token>,
    rest: std::collections::vec_deque::Iter<'a, Token>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Token;

    fn next(&mut self) -> Option<&'a Token> {
        match self.head.take() {
            Some(h) => Some(h),
            None => self.rest.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::from(self.head.is_some()) + self.rest.len();
        (n, Some(n))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.rest.next_back().or_else(|| self.head.take())
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a TokenQueue {
    type Item = &'a Token;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl std::ops::Index<usize> for TokenQueue {
    type Output = Token;

    fn index(&self, pos: usize) -> &Token {
        match self.get(pos) {
            Some(t) => t,
            None => panic!("token position {pos} out of range ({} queued)", self.len()),
        }
    }
}

impl FromIterator<Token> for TokenQueue {
    fn from_iter<I: IntoIterator<Item = Token>>(iter: I) -> Self {
        let mut q = TokenQueue::new();
        for t in iter {
            q.push_back(t);
        }
        q
    }
}

impl PartialEq for TokenQueue {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Serialize for TokenQueue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for TokenQueue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(VecDeque::<Token>::deserialize(d)?.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::token::Origin;

    fn tok(id: TokenId) -> Token {
        Token {
            id,
            event: 0,
            payload: Arc::new(json!({"n": id})),
            correlation: Arc::from("root"),
            origin: Origin::Input,
            created_at: 0,
        }
    }

    fn ids(q: &TokenQueue) -> Vec<TokenId> {
        q.iter().map(|t| t.id).collect()
    }

    /// Every operation agrees with a `VecDeque` doing the same, over a scripted mix that
    /// crosses the inline/spilled boundary in both directions.
    #[test]
    fn behaves_like_a_vecdeque() {
        let mut q = TokenQueue::new();
        let mut m: VecDeque<Token> = VecDeque::new();
        let mut next = 0;
        // 0 push, 1 pop, 2 remove(step % len), 3 insert at the partition point,
        // 4 remove_into(step % len) (or from an empty queue).
        let script = [
            0, 0, 1, 1, 1, 0, 0, 0, 2, 0, 1, 2, 2, 0, 0, 0, 0, 3, 1, 2, 1, 1, 1, 1, 4, 0, 4, 0, 0,
            4, 4, 4, 4,
        ];
        let mut out = Vec::new();
        for (step, op) in script.into_iter().enumerate() {
            match op {
                0 => {
                    next += 2;
                    q.push_back(tok(next));
                    m.push_back(tok(next));
                }
                1 => assert_eq!(q.pop_front(), m.pop_front()),
                2 if !m.is_empty() => {
                    let at = step % m.len();
                    assert_eq!(q.remove(at), m.remove(at));
                }
                4 => {
                    let at = if m.is_empty() { 0 } else { step % m.len() };
                    let before = out.len();
                    let taken = q.remove_into(at, &mut out);
                    assert_eq!(taken, !m.is_empty());
                    if taken {
                        assert_eq!(out.len(), before + 1);
                        assert_eq!(out.last(), m.remove(at).as_ref());
                    }
                }
                3 => {
                    let id = next - 3;
                    let at = m.partition_point(|t| t.id < id);
                    assert_eq!(q.partition_point(|t| t.id < id), at);
                    q.insert(at, tok(id));
                    m.insert(at, tok(id));
                }
                _ => {}
            }
            assert_eq!(q.len(), m.len());
            assert_eq!(q.is_empty(), m.is_empty());
            assert_eq!(ids(&q), m.iter().map(|t| t.id).collect::<Vec<_>>());
            assert_eq!(
                q.iter().rev().map(|t| t.id).collect::<Vec<_>>(),
                m.iter().rev().map(|t| t.id).collect::<Vec<_>>()
            );
            for (i, t) in m.iter().enumerate() {
                assert_eq!(q.get(i), Some(t));
                assert_eq!(q.position(t.id), Some(i));
            }
            assert_eq!(q.get(m.len()), None);
            assert_eq!(q.position(next + 1), None);
        }
    }

    /// Inserting at the front of a queue whose head is taken moves the head back.
    #[test]
    fn insert_at_front_keeps_order() {
        let mut q: TokenQueue = [tok(5), tok(7)].into_iter().collect();
        q.insert(0, tok(3));
        assert_eq!(ids(&q), [3, 5, 7]);
        q.insert(3, tok(9));
        assert_eq!(ids(&q), [3, 5, 7, 9]);
        // Past the end: appended, no panic.
        q.insert(99, tok(11));
        assert_eq!(ids(&q), [3, 5, 7, 9, 11]);
        assert_eq!(q.position(1), None);
        assert_eq!(q.position(6), None);
    }

    /// The serialized form is the `VecDeque`'s, both ways.
    #[test]
    fn serializes_as_a_sequence() {
        let q: TokenQueue = [tok(1), tok(2), tok(3)].into_iter().collect();
        let d: VecDeque<Token> = [tok(1), tok(2), tok(3)].into_iter().collect();
        let a = serde_json::to_value(&q).expect("queue");
        assert_eq!(a, serde_json::to_value(&d).expect("deque"));
        let back: TokenQueue = serde_json::from_value(a).expect("read back");
        assert_eq!(back, q);
        let empty: TokenQueue = serde_json::from_value(json!([])).expect("empty");
        assert!(empty.is_empty() && empty.is_bare());
    }
}
