//! Process measurements for benchmark reports (Linux `/proc/self/status`).

/// A `kB` field of `/proc/self/status` in MiB (`VmHWM` = peak RSS, `VmRSS` = current).
pub fn status_mib(field: &str) -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return 0.0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Peak resident set size in MiB.
pub fn peak_rss_mib() -> f64 {
    status_mib("VmHWM")
}

/// Current resident set size in MiB.
pub fn rss_mib() -> f64 {
    status_mib("VmRSS")
}

/// The median of `xs` (sorted copy; mean of the middle two for even lengths).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
