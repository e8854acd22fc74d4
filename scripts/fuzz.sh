#!/usr/bin/env bash
# Fuzzes the parsers hostile input reaches first (fuzz/: plan, cel, pnml, cloudevents, schema) with
# cargo-fuzz and libFuzzer, on the pinned stable toolchain: RUSTC_BOOTSTRAP=1 lets it take the
# -Z flags cargo-fuzz passes (coverage instrumentation, AddressSanitizer).
#   scripts/fuzz.sh [seconds per target, default 60] [target …, default all]
# The committed seeds (fuzz/corpus/<target>) are read, never written: new inputs go to a
# scratch corpus under the fuzz target dir. A crash, a hang (over 10 s for one input) or an
# input using over 2 GiB fails the script and leaves the input under $work/artifacts/<target>/
# (reproduce: scripts/fuzz.sh … prints the `cargo fuzz run <target> <file>` line).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(plan cel pnml cloudevents schema)

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz (crates.io)" >&2
  cargo install cargo-fuzz --version 0.13.2 --locked
fi

export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${WEFT_FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$HOME/.cache/weft-target}/fuzz}"
work="$CARGO_TARGET_DIR/work"
mkdir -p "$work"

cd fuzz
# Debug assertions on: an arithmetic overflow is a finding too. The targets need only
# weft-core and weft-analysis (the CloudEvents reader is in the core), not the server.
flags=(--debug-assertions)
if ! cargo fuzz build "${flags[@]}" >"$work/build.log" 2>&1; then
  tail -40 "$work/build.log" >&2
  echo "fuzz: the fuzz targets did not build (log: $work/build.log)" >&2
  exit 1
fi

status=0
for t in "${targets[@]}"; do
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
  echo "fuzz: $t for ${secs}s" >&2
  if ! cargo fuzz run "${flags[@]}" "$t" "$work/corpus/$t" "corpus/$t" -- \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
      -artifact_prefix="$work/artifacts/$t/" -print_final_stats=1 >"$work/$t.log" 2>&1; then
    tail -40 "$work/$t.log" >&2
    echo "fuzz: $t found a failing input in $work/artifacts/$t/ (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run ${flags[*]} $t <file>)" >&2
    status=1
  else
    grep -E '^(stat::number_of_executed_units|stat::new_units_added|#[0-9]+ +DONE)' "$work/$t.log" | tr '\n' ' ' >&2 || true
    echo >&2
  fi
done
exit $status
