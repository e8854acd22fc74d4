//! Instance names. Inside the engine an instance is a sequential `u64`; outside it has a
//! name. In-process (`weft run` without a store) the name is the readable `i<n>`: nothing
//! else shares the engine, so the counter tells nobody anything. On a durable node (the
//! server, `--store` runs) names are opaque: `i` and 13 base32 characters of a keyed 64-bit
//! permutation of the id (an 8-round Feistel network over two 32-bit halves), so one tenant
//! cannot count the instances others create. The key is random, made once per store and
//! kept in it (`weft-durable`'s `weft.ids`); ids below `opaque_from` (made before the store
//! had a key) keep their readable names, so old instances still resolve.
//!
//! The permutation hides the counter from anyone without the key; it is not a cipher an
//! analyst with many chosen names could not attack, and names are not secrets (access is
//! checked by tenant).

use std::sync::Arc;

/// The lowercase Crockford base32 alphabet (no `i`, `l`, `o`, `u`).
const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
/// Characters after the `i` of an opaque name (65 bits, the first at most `1`).
const OPAQUE_LEN: usize = 13;
/// Feistel rounds.
const ROUNDS: usize = 8;

/// How an engine names its instances.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct IdNames {
    opaque: Option<Opaque>,
}

#[derive(Clone, PartialEq, Eq)]
struct Opaque {
    round_keys: [u64; ROUNDS],
    from: u64,
}

impl std::fmt::Debug for IdNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.opaque {
            None => f.write_str("IdNames::Readable"),
            Some(o) => write!(f, "IdNames::Opaque {{ from: {} }}", o.from),
        }
    }
}

impl IdNames {
    /// `i1`, `i2`, …: for engines nothing else shares.
    pub const fn readable() -> Self {
        IdNames { opaque: None }
    }

    /// Opaque names under `key` for ids from `from` on (ids below keep `i<n>`).
    pub fn opaque(key: [u8; 32], from: u64) -> Self {
        let mut state = u64::from_le_bytes(key[..8].try_into().unwrap_or_default());
        let mut round_keys = [0u64; ROUNDS];
        for (r, k) in round_keys.iter_mut().enumerate() {
            let chunk = &key[(r % 4) * 8..(r % 4) * 8 + 8];
            state = splitmix(state ^ u64::from_le_bytes(chunk.try_into().unwrap_or_default()));
            *k = state;
        }
        IdNames {
            opaque: Some(Opaque { round_keys, from }),
        }
    }

    /// Are names opaque (for ids from some point on)?
    pub fn is_opaque(&self) -> bool {
        self.opaque.is_some()
    }

    /// The name of instance `id`.
    pub fn name(&self, id: u64) -> Arc<str> {
        match &self.opaque {
            Some(o) if id >= o.from => {
                let mut buf = [0u8; OPAQUE_LEN + 1];
                buf[0] = b'i';
                let mut v = u128::from(o.permute(id));
                for c in buf[1..].iter_mut().rev() {
                    *c = ALPHABET[(v & 31) as usize];
                    v >>= 5;
                }
                Arc::from(std::str::from_utf8(&buf).unwrap_or("i"))
            }
            _ => readable_name(id),
        }
    }

    /// The id a name stands for, if it names one under this scheme (every id has exactly one
    /// name: a readable name of an opaque id, or the reverse, is `None`).
    pub fn parse(&self, name: &str) -> Option<u64> {
        let rest = name.strip_prefix('i')?;
        let readable = || -> Option<u64> {
            if rest.is_empty() || rest.len() > 20 || !rest.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // No leading zeros: `i01` is not `i1`.
            if rest.len() > 1 && rest.starts_with('0') {
                return None;
            }
            rest.parse().ok()
        };
        match &self.opaque {
            None => readable(),
            Some(o) => {
                if rest.len() != OPAQUE_LEN {
                    return readable().filter(|id| *id < o.from);
                }
                let mut v: u128 = 0;
                for b in rest.bytes() {
                    let d = ALPHABET.iter().position(|a| *a == b)?;
                    v = (v << 5) | d as u128;
                }
                let block = u64::try_from(v).ok()?;
                Some(o.unpermute(block)).filter(|id| *id >= o.from)
            }
        }
    }
}

impl Opaque {
    fn round(&self, r: usize, half: u32) -> u32 {
        (splitmix(u64::from(half) ^ self.round_keys[r]) >> 32) as u32
    }

    fn permute(&self, id: u64) -> u64 {
        let (mut l, mut r) = ((id >> 32) as u32, id as u32);
        for k in 0..ROUNDS {
            (l, r) = (r, l ^ self.round(k, r));
        }
        (u64::from(l) << 32) | u64::from(r)
    }

    fn unpermute(&self, block: u64) -> u64 {
        let (mut l, mut r) = ((block >> 32) as u32, block as u32);
        for k in (0..ROUNDS).rev() {
            (l, r) = (r ^ self.round(k, l), l);
        }
        (u64::from(l) << 32) | u64::from(r)
    }
}

/// SplitMix64's finaliser: a bijective mix of 64 bits.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `i<id>` (one allocation: digits written on the stack).
fn readable_name(id: u64) -> Arc<str> {
    let mut buf = [0u8; 21];
    let mut i = buf.len();
    let mut n = id;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    i -= 1;
    buf[i] = b'i';
    match std::str::from_utf8(&buf[i..]) {
        Ok(s) => Arc::from(s),
        Err(_) => Arc::from(format!("i{id}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> [u8; 32] {
        std::array::from_fn(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
    }

    #[test]
    fn readable_names_round_trip_and_refuse_other_spellings() {
        let n = IdNames::readable();
        for id in [0, 1, 9, 10, 4_294_967_297, u64::MAX] {
            let name = n.name(id);
            assert_eq!(name.as_ref(), format!("i{id}"));
            assert_eq!(n.parse(&name), Some(id));
        }
        for bad in [
            "",
            "i",
            "1",
            "i01",
            "i-1",
            "i1a",
            "x1",
            "i99999999999999999999",
        ] {
            assert_eq!(n.parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn opaque_names_are_distinct_fixed_width_non_monotonic_and_round_trip() {
        let n = IdNames::opaque(key(1), 1);
        let names: Vec<Arc<str>> = (1..=2000).map(|id| n.name(id)).collect();
        let distinct: std::collections::HashSet<&str> = names.iter().map(|s| s.as_ref()).collect();
        assert_eq!(distinct.len(), names.len());
        for (k, name) in names.iter().enumerate() {
            assert_eq!(name.len(), 1 + OPAQUE_LEN, "{name}");
            assert!(name.starts_with('i'));
            assert_eq!(n.parse(name), Some(k as u64 + 1), "{name}");
        }
        // Consecutive ids do not give ordered names: about half the neighbours go down.
        let down = names.windows(2).filter(|w| w[1] < w[0]).count();
        assert!((600..1400).contains(&down), "{down} of 1999 decreasing");
        // Nor names sharing a long prefix.
        let shared = names
            .windows(2)
            .filter(|w| w[0].as_bytes()[..6] == w[1].as_bytes()[..6])
            .count();
        assert!(shared < 20, "{shared} neighbours share 6 characters");
        // The extremes round-trip too; another key gives other names.
        for id in [1, 2, u32::MAX as u64, 1 << 32, u64::MAX] {
            assert_eq!(n.parse(&n.name(id)), Some(id));
        }
        assert_ne!(IdNames::opaque(key(2), 1).name(1), n.name(1));
    }

    #[test]
    fn opaque_names_refuse_readable_spellings_except_below_from() {
        let n = IdNames::opaque(key(3), 5);
        assert_eq!(n.name(4).as_ref(), "i4");
        assert_eq!(n.parse("i4"), Some(4));
        assert_eq!(n.parse("i5"), None);
        assert_eq!(n.parse("i6"), None);
        assert_ne!(n.name(5).as_ref(), "i5");
        // Out-of-alphabet characters, a 66th bit, the wrong length: not names.
        for bad in [
            "iiiiiiiiiiiiii",
            "izzzzzzzzzzzzz",
            "i0000000000000"[..13].as_ref(),
        ] {
            assert_eq!(n.parse(bad), None, "{bad}");
        }
        // An opaque name of an id below `from` does not resolve (one name per id).
        let o = IdNames::opaque(key(3), 0);
        assert_eq!(n.parse(&o.name(4)), None);
    }
}
