//! The journal's hash chain (the tamper-evident causal chain of seed 002).
//!
//! Each record stores `prev_hash` and `hash = SHA-256(prev_hash ‖ seq ‖ kind ‖ body ‖ at_ms)`
//! with an unambiguous encoding (fixed-width big-endian integers, length-prefixed strings), so
//! no two different records hash alike by shifting bytes between fields. The first record of
//! an instance chains to [`GENESIS`]. Backends compute hashes inside the append transaction
//! from the instance's stored head, so concurrent appenders cannot fork a chain; [`Verifier`]
//! is the one implementation of the checks that every backend's `verify` uses.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::types::Record;

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Hash(pub [u8; 32]);

/// The `prev_hash` of an instance's first record.
pub const GENESIS: Hash = Hash([0; 32]);

impl Hash {
    /// Computes a record's hash from its fields.
    pub fn of_record(prev: &Hash, seq: u64, kind: &str, body: &[u8], at_ms: i64) -> Hash {
        let mut h = Sha256::new();
        h.update(prev.0);
        h.update(seq.to_be_bytes());
        h.update((kind.len() as u64).to_be_bytes());
        h.update(kind.as_bytes());
        h.update((body.len() as u64).to_be_bytes());
        h.update(body);
        h.update(at_ms.to_be_bytes());
        Hash(h.finalize().into())
    }

    /// Reads a hash from a stored byte string (`None` unless exactly 32 bytes).
    pub fn from_slice(bytes: &[u8]) -> Option<Hash> {
        <[u8; 32]>::try_from(bytes).ok().map(Hash)
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 15)]));
        }
        s
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Option<Hash> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            out[i] = u8::try_from(hi * 16 + lo).ok()?;
        }
        Some(Hash(out))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.to_hex())
    }
}

impl Serialize for Hash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Hash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Hash::from_hex(&s).ok_or_else(|| serde::de::Error::custom("expected 64 hex digits"))
    }
}

/// What is wrong at the first bad record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum ChainFault {
    /// The record's content does not hash to its stored hash: it was altered.
    Altered,
    /// The record's `prev_hash` is not the previous record's hash: a record before it was
    /// replaced, removed or moved.
    BrokenLink,
    /// A sequence number is missing (a record was deleted) or out of order.
    Gap {
        /// The sequence number that should have come next.
        expected: u64,
    },
    /// The journal ends before (or after) the instance's recorded head: trailing records
    /// were deleted, or the head was tampered with.
    HeadMismatch {
        /// The last sequence number the head records.
        head_seq: u64,
    },
}

/// The first place where a journal's chain breaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("instance {instance}: journal chain broken at seq {seq}: {}", describe(.reason))]
pub struct ChainError {
    /// The instance whose journal is broken.
    pub instance: String,
    /// The sequence number of the first bad record (or where one is missing).
    pub seq: u64,
    /// What is wrong there.
    pub reason: ChainFault,
}

fn describe(f: &ChainFault) -> String {
    match f {
        ChainFault::Altered => "record content does not match its hash (altered)".into(),
        ChainFault::BrokenLink => {
            "prev_hash does not match the previous record (replaced, removed or reordered)".into()
        }
        ChainFault::Gap { expected } => format!("expected seq {expected} (missing or reordered)"),
        ChainFault::HeadMismatch { head_seq } => {
            format!("journal does not end at the recorded head seq {head_seq} (tail removed)")
        }
    }
}

/// What a successful verification covered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// The instance.
    pub instance: String,
    /// First sequence number checked (1, or the first one kept after compaction).
    pub from_seq: u64,
    /// Last sequence number checked (0 for an empty journal).
    pub to_seq: u64,
    /// How many records were checked.
    pub records: u64,
    /// Hash of the last record (the chain head), [`GENESIS`] for an empty journal.
    pub head: Hash,
}

/// Checks records fed in sequence order, starting from a base (seq, hash): (0, GENESIS) for
/// a full journal, or the compaction point.
#[derive(Debug)]
pub struct Verifier {
    instance: String,
    from_seq: u64,
    last_seq: u64,
    last_hash: Hash,
    records: u64,
}

impl Verifier {
    /// Starts after `base_seq`, whose hash is `base_hash`.
    pub fn new(instance: &str, base_seq: u64, base_hash: Hash) -> Self {
        Verifier {
            instance: instance.to_string(),
            from_seq: base_seq + 1,
            last_seq: base_seq,
            last_hash: base_hash,
            records: 0,
        }
    }

    /// Sequence number the next record must have.
    pub fn next_seq(&self) -> u64 {
        self.last_seq + 1
    }

    fn fail(&self, seq: u64, reason: ChainFault) -> ChainError {
        ChainError {
            instance: self.instance.clone(),
            seq,
            reason,
        }
    }

    /// Checks the next record.
    pub fn push(&mut self, r: &Record) -> Result<(), ChainError> {
        let expected = self.next_seq();
        if r.seq != expected {
            return Err(self.fail(r.seq.min(expected), ChainFault::Gap { expected }));
        }
        if Hash::of_record(&r.prev_hash, r.seq, &r.kind, &r.body, r.at_ms) != r.hash {
            return Err(self.fail(r.seq, ChainFault::Altered));
        }
        if r.prev_hash != self.last_hash {
            return Err(self.fail(r.seq, ChainFault::BrokenLink));
        }
        self.last_seq = r.seq;
        self.last_hash = r.hash;
        self.records += 1;
        Ok(())
    }

    /// Ends the check against the instance's recorded head (`None` when the store keeps no
    /// head for it, e.g. nothing was ever appended).
    pub fn finish(self, head: Option<(u64, Hash)>) -> Result<VerifyReport, ChainError> {
        let (head_seq, head_hash) = head.unwrap_or((0, GENESIS));
        if head_seq != self.last_seq {
            let at = self.last_seq.min(head_seq) + 1;
            return Err(self.fail(at, ChainFault::HeadMismatch { head_seq }));
        }
        if head_seq > 0 && head_hash != self.last_hash {
            return Err(self.fail(head_seq, ChainFault::HeadMismatch { head_seq }));
        }
        Ok(VerifyReport {
            instance: self.instance,
            from_seq: self.from_seq,
            to_seq: self.last_seq,
            records: self.records,
            head: self.last_hash,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: u64) -> Vec<Record> {
        let mut prev = GENESIS;
        (1..=n)
            .map(|seq| {
                let body = format!("{{\"n\":{seq}}}").into_bytes();
                let hash = Hash::of_record(&prev, seq, "k", &body, 7);
                let r = Record {
                    seq,
                    kind: "k".into(),
                    body,
                    at_ms: 7,
                    prev_hash: prev,
                    hash,
                };
                prev = hash;
                r
            })
            .collect()
    }

    fn check(records: &[Record], head: Option<(u64, Hash)>) -> Result<VerifyReport, ChainError> {
        let mut v = Verifier::new("i", 0, GENESIS);
        for r in records {
            v.push(r)?;
        }
        v.finish(head)
    }

    #[test]
    fn intact_chain_verifies() {
        let c = chain(4);
        let head = Some((4, c[3].hash));
        assert_eq!(check(&c, head).unwrap().records, 4);
    }

    #[test]
    fn detects_alteration_gap_swap_and_tail_loss() {
        let c = chain(4);
        let head = Some((4, c[3].hash));
        let mut altered = c.clone();
        altered[1].body = b"{}".to_vec();
        assert_eq!(
            check(&altered, head).unwrap_err().reason,
            ChainFault::Altered
        );
        let mut gap = c.clone();
        gap.remove(1);
        assert_eq!(check(&gap, head).unwrap_err().seq, 2);
        let mut swapped = c.clone();
        swapped.swap(1, 2);
        let (a, b) = (swapped[1].seq, swapped[2].seq);
        swapped[1].seq = b;
        swapped[2].seq = a;
        assert_eq!(check(&swapped, head).unwrap_err().seq, 2);
        let tail = &c[..3];
        assert_eq!(
            check(tail, head).unwrap_err().reason,
            ChainFault::HeadMismatch { head_seq: 4 }
        );
    }

    #[test]
    fn hex_round_trips() {
        let h = Hash::of_record(&GENESIS, 1, "a", b"b", 2);
        assert_eq!(Hash::from_hex(&h.to_hex()), Some(h));
        assert_eq!(Hash::from_hex("zz"), None);
    }
}
