//! The journal's hash chain (the tamper-evident causal chain of seed 002).
//!
//! Each record stores `prev_hash` and `hash = SHA-256(prev_hash ‖ seq ‖ kind ‖ body ‖ at_ms)`
//! with an unambiguous encoding (fixed-width big-endian integers, length-prefixed strings), so
//! no two different records hash alike by shifting bytes between fields. The first record of
//! an instance chains to [`GENESIS`]. Backends compute hashes inside the append transaction
//! from the instance's stored head, so concurrent appenders cannot fork a chain; [`Verifier`]
//! is the one implementation of the checks that every backend's `verify` uses.
//!
//! ## Two modes, chosen per store
//! [`Chaining::Plain`] (the default) is the SHA-256 chain: it finds any record altered,
//! removed or moved by someone who does not also rewrite every hash after it. A store opened
//! with a [`ChainKey`] the first time it is written is **keyed** for good:
//! `hash = HMAC-SHA256(key, same encoding)`, the key held outside the database, so a chain
//! rewritten without the key fails. The mode and the key's fingerprint ([`ChainKey::id`]) are
//! stored with the schema and checked on every open ([`Chaining::resolve`]): a store never
//! mixes modes, a wrong key is refused, and a keyed store opened without its key can be read
//! but neither written nor verified ([`Chaining::KeyedWithoutKey`]).
//!
//! ## What the chain is tied to
//! A chain cut back at its end, with its head moved back onto the new last record, is an
//! intact chain. So `verify` also compares the head with what the store wrote beside the
//! journal ([`Verifier::check_recorded`]): the head seq the instance record's status was set
//! at, and the latest snapshot; a journal ending before either is [`ChainFault::TailMissing`].

use std::fmt;
use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::types::Record;

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Hash(pub [u8; 32]);

/// The `prev_hash` of an instance's first record.
pub const GENESIS: Hash = Hash([0; 32]);

/// Feeds a record's fields to a hash or MAC in the chain's encoding.
fn feed(mut update: impl FnMut(&[u8]), prev: &Hash, seq: u64, kind: &str, body: &[u8], at_ms: i64) {
    update(&prev.0);
    update(&seq.to_be_bytes());
    update(&(kind.len() as u64).to_be_bytes());
    update(kind.as_bytes());
    update(&(body.len() as u64).to_be_bytes());
    update(body);
    update(&at_ms.to_be_bytes());
}

impl Hash {
    /// Computes a record's hash from its fields (the plain SHA-256 chain).
    pub fn of_record(prev: &Hash, seq: u64, kind: &str, body: &[u8], at_ms: i64) -> Hash {
        let mut h = Sha256::new();
        feed(|b| h.update(b), prev, seq, kind, body, at_ms);
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

/// The shortest key [`ChainKey::new`] takes, in bytes (`openssl rand -hex 32` gives 64).
pub const MIN_KEY_BYTES: usize = 32;

/// The secret of a keyed chain: HMAC-SHA256 keyed with it, held outside the database
/// (`journal.hmac_key_file`, `WEFT_JOURNAL_HMAC_KEY`). Its bytes are never shown.
#[derive(Clone)]
pub struct ChainKey {
    /// The MAC keyed once; each record clones it.
    mac: Arc<Hmac<Sha256>>,
    id: i64,
}

impl fmt::Debug for ChainKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChainKey(id {:016x})", self.id)
    }
}

impl ChainKey {
    /// A key from its bytes (at least [`MIN_KEY_BYTES`]); `None` when too short.
    pub fn new(key: &[u8]) -> Option<ChainKey> {
        if key.len() < MIN_KEY_BYTES {
            return None;
        }
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).ok()?;
        let mut probe = mac.clone();
        probe.update(b"weft journal key id");
        let out = probe.finalize().into_bytes();
        let mut id = [0u8; 8];
        id.copy_from_slice(&out[..8]);
        Some(ChainKey {
            mac: Arc::new(mac),
            id: i64::from_be_bytes(id),
        })
    }

    /// A key as configured: the text of a key file or of the environment variable, with
    /// surrounding whitespace (a trailing newline) removed. `Err` says why it is refused.
    pub fn parse(text: &str) -> Result<ChainKey, String> {
        let t = text.trim();
        ChainKey::new(t.as_bytes()).ok_or_else(|| {
            format!(
                "the journal HMAC key has {} bytes, at least {MIN_KEY_BYTES} are needed (make one with `openssl rand -hex 32`)",
                t.len()
            )
        })
    }

    /// The key's fingerprint, stored with the schema so that a different key is refused
    /// (a MAC of a fixed text: it tells nothing about the key).
    pub fn id(&self) -> i64 {
        self.id
    }

    fn record(&self, prev: &Hash, seq: u64, kind: &str, body: &[u8], at_ms: i64) -> Hash {
        let mut m = (*self.mac).clone();
        feed(|b| m.update(b), prev, seq, kind, body, at_ms);
        Hash(m.finalize().into_bytes().into())
    }
}

/// How a store's records are hashed (see the module docs).
#[derive(Clone, Debug, Default)]
pub enum Chaining {
    /// The plain SHA-256 chain.
    #[default]
    Plain,
    /// HMAC-SHA256 under the key.
    Keyed(ChainKey),
    /// The store is keyed but was opened without its key: it can be read, not written to
    /// or verified.
    KeyedWithoutKey,
}

/// The plain chain, for [`crate::Store::chaining`]'s default.
pub static PLAIN: Chaining = Chaining::Plain;

/// How a store records its mode: the key's fingerprint ([`ChainKey::id`]) under this name
/// in its metadata table; no entry is the plain chain.
pub const KEY_ID_META: &str = "journal_hmac_key_id";

impl Chaining {
    /// The record hash under this mode; `chain_keyed` without the key.
    pub fn record(
        &self,
        prev: &Hash,
        seq: u64,
        kind: &str,
        body: &[u8],
        at_ms: i64,
    ) -> crate::Result<Hash> {
        match self {
            Chaining::Plain => Ok(Hash::of_record(prev, seq, kind, body, at_ms)),
            Chaining::Keyed(k) => Ok(k.record(prev, seq, kind, body, at_ms)),
            Chaining::KeyedWithoutKey => Err(crate::Error::ChainKeyed {
                message: "this store's journal is keyed (HMAC-SHA256) and no key was given: it cannot be written or verified".into(),
            }),
        }
    }

    /// Whether records are MACs.
    pub fn is_keyed(&self) -> bool {
        !matches!(self, Chaining::Plain)
    }

    /// Decides a store's mode when it opens, from the key fingerprint it stored (`None`:
    /// plain), the key configured and whether its journal is still empty. Returns the mode
    /// and, when the store becomes keyed now, the fingerprint to store.
    ///
    /// - no key stored, none given: plain;
    /// - no key stored, a key given: an empty journal becomes keyed; a journal with records
    ///   is refused (`chain_key_mismatch`), so a store never mixes modes and a downgrade
    ///   (the fingerprint deleted) does not go unnoticed by a node that has the key;
    /// - a key stored and given: it must be the same key (`chain_key_mismatch`);
    /// - a key stored, none given: [`Chaining::KeyedWithoutKey`].
    pub fn resolve(
        stored: Option<i64>,
        key: Option<&ChainKey>,
        journal_empty: bool,
    ) -> crate::Result<(Chaining, Option<i64>)> {
        match (stored, key) {
            (None, None) => Ok((Chaining::Plain, None)),
            (None, Some(k)) if journal_empty => Ok((Chaining::Keyed(k.clone()), Some(k.id()))),
            (None, Some(_)) => Err(crate::Error::ChainKeyMismatch {
                message: "a journal HMAC key is configured but this store's journal is plain SHA-256 and already has records; a key applies to a new store (remove journal.hmac_key_file / WEFT_JOURNAL_HMAC_KEY for this one, or start a new store)".into(),
            }),
            (Some(id), Some(k)) if id == k.id() => Ok((Chaining::Keyed(k.clone()), None)),
            (Some(_), Some(_)) => Err(crate::Error::ChainKeyMismatch {
                message: "the configured journal HMAC key is not the key this store's journal was written with (its fingerprint differs); give the original key".into(),
            }),
            (Some(_), None) => Ok((Chaining::KeyedWithoutKey, None)),
        }
    }
}

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
    /// The journal (and its head) ends before a point the store recorded beside it: the
    /// tail was cut off and the head moved back onto the new last record.
    TailMissing {
        /// The seq the witness was written at.
        recorded_seq: u64,
        /// What recorded it.
        witness: Witness,
    },
    /// The latest snapshot names a record hash that is not the journal's at its seq.
    SnapshotMismatch {
        /// The snapshot's seq.
        snapshot_seq: u64,
    },
}

/// What else the store wrote that a journal must reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Witness {
    /// The instance record: its status was last set when the head was at `recorded_seq`.
    InstanceRecord,
    /// The latest snapshot, taken after record `recorded_seq`.
    Snapshot,
}

impl ChainFault {
    /// A stable code for the fault (`record_altered`, `link_broken`, `record_missing`,
    /// `head_mismatch`, `tail_missing`, `snapshot_mismatch`).
    pub fn code(&self) -> &'static str {
        match self {
            ChainFault::Altered => "record_altered",
            ChainFault::BrokenLink => "link_broken",
            ChainFault::Gap { .. } => "record_missing",
            ChainFault::HeadMismatch { .. } => "head_mismatch",
            ChainFault::TailMissing { .. } => "tail_missing",
            ChainFault::SnapshotMismatch { .. } => "snapshot_mismatch",
        }
    }

    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            ChainFault::Altered | ChainFault::BrokenLink | ChainFault::Gap { .. } => {
                "the journal was changed outside weft: restore the store from a backup taken before the change; do not resume the instance from this journal"
            }
            ChainFault::HeadMismatch { .. } | ChainFault::TailMissing { .. } => {
                "records at the end of the journal were removed outside weft: restore the store from a backup; replaying or resuming now would rebuild an older state"
            }
            ChainFault::SnapshotMismatch { .. } => {
                "the snapshot or the record it names was changed outside weft: restore the store from a backup"
            }
        }
    }
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
        ChainFault::TailMissing {
            recorded_seq,
            witness,
        } => {
            let what = match witness {
                Witness::InstanceRecord => "the instance record's status was set",
                Witness::Snapshot => "the latest snapshot was taken",
            };
            format!("the journal ends before seq {recorded_seq}, where {what} (tail removed)")
        }
        ChainFault::SnapshotMismatch { snapshot_seq } => format!(
            "the snapshot at seq {snapshot_seq} names another record hash than the journal's"
        ),
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
    /// Whether the chain is keyed (HMAC-SHA256) rather than plain SHA-256.
    #[serde(default)]
    pub keyed: bool,
    /// The hash of the record a [`Verifier::watch`] asked for, once seen.
    #[serde(skip)]
    pub watched: Option<(u64, Hash)>,
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
    chaining: Chaining,
    /// A seq whose hash to keep (a snapshot's), and the hash once seen.
    watch: Option<(u64, Option<Hash>)>,
}

impl Verifier {
    /// Starts after `base_seq`, whose hash is `base_hash` (the plain chain).
    pub fn new(instance: &str, base_seq: u64, base_hash: Hash) -> Self {
        Verifier::with_chaining(instance, base_seq, base_hash, Chaining::Plain)
    }

    /// [`Verifier::new`] for a store's mode. The caller refuses
    /// [`Chaining::KeyedWithoutKey`] first; records pushed under it fail as altered.
    pub fn with_chaining(
        instance: &str,
        base_seq: u64,
        base_hash: Hash,
        chaining: Chaining,
    ) -> Self {
        Verifier {
            instance: instance.to_string(),
            from_seq: base_seq + 1,
            last_seq: base_seq,
            last_hash: base_hash,
            records: 0,
            chaining,
            watch: None,
        }
    }

    /// Keeps the hash of record `seq` for [`Verifier::check_recorded`].
    pub fn watch(&mut self, seq: u64) {
        let at_base = (seq + 1 == self.from_seq).then_some(self.last_hash);
        self.watch = Some((seq, at_base));
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
        let hash = self
            .chaining
            .record(&r.prev_hash, r.seq, &r.kind, &r.body, r.at_ms)
            .ok();
        if hash != Some(r.hash) {
            return Err(self.fail(r.seq, ChainFault::Altered));
        }
        if r.prev_hash != self.last_hash {
            return Err(self.fail(r.seq, ChainFault::BrokenLink));
        }
        if let Some((seq, seen)) = &mut self.watch
            && *seq == r.seq
        {
            *seen = Some(r.hash);
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
            keyed: self.chaining.is_keyed(),
            watched: self.watch.and_then(|(seq, h)| h.map(|h| (seq, h))),
        })
    }

    /// Checks a verified chain against what the store recorded beside it: `status_seq`,
    /// the head seq when the instance record's status was last set, and the latest
    /// `snapshot` (`(seq, hash)`, [`Verifier::watch`]ed before the records were pushed).
    /// Read both *before* the head, so a live writer moving on meanwhile is no mismatch.
    pub fn check_recorded(
        report: &VerifyReport,
        status_seq: Option<u64>,
        snapshot: Option<(u64, Hash)>,
    ) -> Result<(), ChainError> {
        let fail = |seq, reason| ChainError {
            instance: report.instance.clone(),
            seq,
            reason,
        };
        let end = report.to_seq;
        for (recorded, witness) in [
            (status_seq, Witness::InstanceRecord),
            (snapshot.map(|(s, _)| s), Witness::Snapshot),
        ] {
            if let Some(recorded_seq) = recorded.filter(|&s| s > end) {
                return Err(fail(
                    end + 1,
                    ChainFault::TailMissing {
                        recorded_seq,
                        witness,
                    },
                ));
            }
        }
        if let Some((seq, hash)) = snapshot
            && let Some((w, seen)) = report.watched
            && w == seq
            && seen != hash
        {
            return Err(fail(
                seq,
                ChainFault::SnapshotMismatch { snapshot_seq: seq },
            ));
        }
        Ok(())
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
