//! The byte format of a journal log batch: the records one group commit appended to one log
//! partition, stored as a single blob (see `journal`'s module docs for why).
//!
//! A batch is a sequence of records, each:
//! `instance_len: u32, instance, seq: u64, at_ms: i64, kind_len: u32, kind, body_len: u32,
//! body, prev_hash: [u8; 32], hash: [u8; 32]`, integers little-endian. Decoding never trusts
//! the bytes: a length past the end, a negative or zero seq or text that is not UTF-8 is
//! `store_corrupt`, never a panic.

use weft_store::{Error, Hash, NewRecord, Record, Result};

/// One record of a batch, borrowed from the batch's bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogRecord<'a> {
    pub instance: &'a str,
    pub seq: u64,
    pub at_ms: i64,
    pub kind: &'a str,
    pub body: &'a [u8],
    pub prev: Hash,
    pub hash: Hash,
}

impl LogRecord<'_> {
    /// The owned record.
    pub(crate) fn to_record(self) -> Record {
        Record {
            seq: self.seq,
            kind: self.kind.to_string(),
            body: self.body.to_vec(),
            at_ms: self.at_ms,
            prev_hash: self.prev,
            hash: self.hash,
        }
    }
}

fn len_u32(n: usize, what: &str) -> Result<[u8; 4]> {
    u32::try_from(n).map(u32::to_le_bytes).map_err(|_| {
        Error::invalid(format!(
            "a journal record's {what} is too large ({n} bytes)"
        ))
    })
}

/// Appends one record to a batch's bytes.
pub(crate) fn encode(
    out: &mut Vec<u8>,
    instance: &str,
    seq: u64,
    rec: &NewRecord,
    prev: &Hash,
    hash: &Hash,
) -> Result<()> {
    let (il, kl, bl) = (
        len_u32(instance.len(), "instance id")?,
        len_u32(rec.kind.len(), "kind")?,
        len_u32(rec.body.len(), "body")?,
    );
    out.reserve(4 + instance.len() + 16 + 4 + rec.kind.len() + 4 + rec.body.len() + 64);
    out.extend_from_slice(&il);
    out.extend_from_slice(instance.as_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&rec.at_ms.to_le_bytes());
    out.extend_from_slice(&kl);
    out.extend_from_slice(rec.kind.as_bytes());
    out.extend_from_slice(&bl);
    out.extend_from_slice(&rec.body);
    out.extend_from_slice(&prev.0);
    out.extend_from_slice(&hash.0);
    Ok(())
}

/// The records of a batch, in the order they were appended.
pub(crate) fn decode(bytes: &[u8]) -> Records<'_> {
    Records { rest: bytes }
}

/// Iterator over a batch's records ([`decode`]); stops after the first error.
pub(crate) struct Records<'a> {
    rest: &'a [u8],
}

fn damaged(what: &str) -> Error {
    Error::Corrupt {
        message: format!("a journal log batch is damaged: {what}"),
    }
}

impl<'a> Records<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            self.rest = &[];
            return Err(damaged("it ends inside a record"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = u32::from_le_bytes(self.array()?) as usize;
        self.take(n)
    }

    fn text(&mut self, what: &str) -> Result<&'a str> {
        let b = self.bytes()?;
        std::str::from_utf8(b).map_err(|_| {
            self.rest = &[];
            damaged(&format!("a record's {what} is not UTF-8"))
        })
    }

    fn record(&mut self) -> Result<LogRecord<'a>> {
        let instance = self.text("instance id")?;
        let seq = u64::from_le_bytes(self.array()?);
        if seq == 0 || i64::try_from(seq).is_err() {
            self.rest = &[];
            return Err(damaged(&format!("sequence number {seq}")));
        }
        let at_ms = i64::from_le_bytes(self.array()?);
        let kind = self.text("kind")?;
        let body = self.bytes()?;
        let prev = Hash(self.array()?);
        let hash = Hash(self.array()?);
        Ok(LogRecord {
            instance,
            seq,
            at_ms,
            kind,
            body,
            prev,
            hash,
        })
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<LogRecord<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            None
        } else {
            Some(self.record())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: &str, body: &[u8], at_ms: i64) -> NewRecord {
        NewRecord {
            kind: kind.into(),
            body: body.to_vec(),
            at_ms,
        }
    }

    #[test]
    fn records_come_back_as_encoded() -> Result<()> {
        let mut b = Vec::new();
        let h1 = Hash([1; 32]);
        let h2 = Hash([2; 32]);
        encode(
            &mut b,
            "i7",
            1,
            &rec("started", b"{}", -5),
            &Hash([0; 32]),
            &h1,
        )?;
        encode(&mut b, "é", u64::MAX >> 1, &rec("k", b"", 9), &h1, &h2)?;
        let got: Vec<LogRecord<'_>> = decode(&b).collect::<Result<_>>()?;
        assert_eq!(got.len(), 2);
        assert_eq!(
            (
                got[0].instance,
                got[0].seq,
                got[0].at_ms,
                got[0].kind,
                got[0].body
            ),
            ("i7", 1, -5, "started", &b"{}"[..])
        );
        assert_eq!((got[0].prev, got[0].hash), (Hash([0; 32]), h1));
        assert_eq!(
            (got[1].instance, got[1].seq, got[1].kind, got[1].body.len()),
            ("é", u64::MAX >> 1, "k", 0)
        );
        assert_eq!((got[1].prev, got[1].hash), (h1, h2));
        assert_eq!(decode(&[]).count(), 0);
        Ok(())
    }

    #[test]
    fn every_truncation_and_bad_field_is_a_clear_error() -> Result<()> {
        let mut b = Vec::new();
        encode(
            &mut b,
            "i",
            3,
            &rec("k", b"body", 1),
            &Hash([0; 32]),
            &Hash([1; 32]),
        )?;
        for cut in 1..b.len() {
            let out: Vec<Result<LogRecord<'_>>> = decode(&b[..cut]).collect();
            assert_eq!(out.len(), 1, "cut at {cut}");
            let e = out.into_iter().next().and_then(Result::err);
            assert_eq!(e.map(|e| e.code()), Some("store_corrupt"), "cut at {cut}");
        }
        // A length far past the end.
        let mut long = b.clone();
        long[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&long).next().is_some_and(|r| r.is_err()));
        // Seq 0, and an instance id that is not UTF-8.
        let mut zero = b.clone();
        zero[5..13].copy_from_slice(&0u64.to_le_bytes());
        assert!(decode(&zero).next().is_some_and(|r| r.is_err()));
        let mut bad = b.clone();
        bad[4] = 0xff;
        let out: Vec<_> = decode(&bad).collect();
        assert_eq!(out.len(), 1);
        assert!(out[0].is_err());
        Ok(())
    }
}
