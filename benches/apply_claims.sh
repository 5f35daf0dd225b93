#!/usr/bin/env bash
# What a large `apply` costs, and how long another process waits for the store meanwhile.
#
# Usage: benches/apply_claims.sh [BIN] [N...]   (default BIN target/release/cronsole, N 100000)
# Per N: a file of N jobs (`'0 3 1 1 *'`, command `true`) plus one job `a-due`, applied to a new
# store; then, each under `/usr/bin/time -v` (wall, peak RSS) while a probe runs
# `trigger a-due` in a loop (a one-job write: it takes the store lock as a claim does, appends
# one journal line and exits) and records how long each took:
#   - re-apply adding one job;
#   - re-apply changing half the jobs (their command).
# Printed per step: wall, peak RSS, the probe's count / median / max, and the jobs files' sizes.
# The longest probe is the longest another owner waited for the lock (plus the probe's own
# ~tens of ms). Works in $TMPDIR; removes its files at the end.
set -euo pipefail
BIN=${1:-target/release/cronsole}
shift || true
SIZES=${*:-100000}
BIN=$(realpath "$BIN")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cronsole-apply-claims.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

gen() { # gen N FILE [CHANGED] [EXTRA]: CHANGED jobs get another command; EXTRA adds jobs at the end
  awk -v n="$1" -v ch="${3:-0}" -v extra="${4:-0}" 'BEGIN {
    print "jobs:"
    print "  - name: a-due\n    schedule: \"0 3 1 1 *\"\n    command: \"true\""
    for (i = 0; i < n + extra; i++) {
      c = (i < ch) ? "true changed" : "true"
      printf "  - name: j%07d\n    schedule: \"0 3 1 1 *\"\n    command: \"%s\"\n", i, c
    }
  }' > "$2"
}

peak() { sed -n 's/.*Maximum resident set size (kbytes): //p' "$1"; }
wall() { sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$1"; }

# probe STORE OUT: trigger a-due in a loop until $OUT.stop exists; one duration (ms) a line.
probe() {
  while [ ! -e "$2.stop" ]; do
    s=$(date +%s%N)
    "$BIN" trigger a-due --store "$1" > /dev/null 2>&1 || true
    echo $(( ($(date +%s%N) - s) / 1000000 )) >> "$2"
    sleep 0.1
  done
}

step() { # step LABEL FILE STORE DIR
  rm -f "$4/probe" "$4/probe.stop"; touch "$4/probe"
  probe "$3" "$4/probe" & p=$!
  sleep 1
  /usr/bin/time -v -o "$4/t" "$BIN" apply "$2" --store "$3" > /dev/null
  sleep 1
  touch "$4/probe.stop"; wait $p
  stats=$(sort -n "$4/probe" | awk '{a[NR]=$1} END {printf "%d probes, median %d ms, max %d ms", NR, a[int((NR+1)/2)], a[NR]}')
  printf '%-28s wall %s, peak RSS %s KB; probe: %s\n' "$1" "$(wall "$4/t")" "$(peak "$4/t")" "$stats"
}

for n in $SIZES; do
  d="$WORK/$n"; mkdir -p "$d"
  gen "$n" "$d/jobs.yaml"
  echo "== $n jobs ($(du -h "$d/jobs.yaml" | cut -f1) jobs file), load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
  /usr/bin/time -v -o "$d/t" "$BIN" apply "$d/jobs.yaml" --store "$d/store" > /dev/null
  printf '%-28s wall %s, peak RSS %s KB\n' "first apply:" "$(wall "$d/t")" "$(peak "$d/t")"
  gen "$n" "$d/add1.yaml" 0 1
  step "re-apply, one job added:" "$d/add1.yaml" "$d/store" "$d"
  gen "$n" "$d/half.yaml" $((n / 2)) 1
  step "re-apply, half changed:" "$d/half.yaml" "$d/store" "$d"
  echo "store on disk after:         $(du -sh "$d/store" | cut -f1) ($(ls "$d/store" | tr '\n' ' '))"
  rm -rf "$d"
done
