//! Latency statistics: every request's latency in microseconds is kept (a few million `u32`
//! at most) and sorted once at the end, so percentiles are exact, not bucketed.

use serde::Serialize;

/// Exact latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: usize,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// Nearest-rank percentile of sorted `v`; `per_mille` is the percentile × 10 (990 = p99).
fn rank(v: &[u32], per_mille: usize) -> u32 {
    if v.is_empty() {
        return 0;
    }
    let n = v.len();
    // Nearest rank: the smallest value with at least p% of the samples at or below it
    // (integer arithmetic, so p99.9 of 1..=1000 is 999, not a float rounding away).
    let r = (per_mille * n).div_ceil(1000);
    v[r.clamp(1, n) - 1]
}

/// Percentiles of `micros` (sorted in place).
pub fn latency(micros: &mut [u32]) -> Latency {
    micros.sort_unstable();
    let ms = |us: u32| f64::from(us) / 1000.0;
    let sum: u64 = micros.iter().map(|&u| u64::from(u)).sum();
    Latency {
        count: micros.len(),
        mean_ms: if micros.is_empty() {
            0.0
        } else {
            sum as f64 / micros.len() as f64 / 1000.0
        },
        p50_ms: ms(rank(micros, 500)),
        p90_ms: ms(rank(micros, 900)),
        p99_ms: ms(rank(micros, 990)),
        p999_ms: ms(rank(micros, 999)),
        max_ms: ms(micros.last().copied().unwrap_or(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u32> = (1..=1000).rev().map(|i| i * 1000).collect();
        let l = latency(&mut v);
        assert_eq!(l.count, 1000);
        assert_eq!(l.p50_ms, 500.0);
        assert_eq!(l.p99_ms, 990.0);
        assert_eq!(l.p999_ms, 999.0);
        assert_eq!(l.max_ms, 1000.0);
        assert!((l.mean_ms - 500.5).abs() < 1e-9);
    }

    #[test]
    fn empty_and_single() {
        assert_eq!(latency(&mut []).max_ms, 0.0);
        let l = latency(&mut [1500]);
        assert_eq!((l.p50_ms, l.p99_ms, l.max_ms), (1.5, 1.5, 1.5));
    }
}
