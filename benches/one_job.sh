#!/usr/bin/env bash
# One-job operator edits against the number of jobs in a file store: what `trigger`, `pause`,
# `resume`, `describe`, `cancel`, `backfill` and `retry` of ONE job cost, and a re-apply that
# changes one job, at each N. The goal is a cost that does not grow with N (the edit reads and
# writes that job's record only).
#
# Usage: benches/one_job.sh BIN [N...]   (default N: 1000 100000 1000000)
#   BIN2=path   also time a second binary on the same stores, alternating per command (A B A B…)
#   REPS=3      runs per command (the median wall and CPU are printed, and the largest peak RSS)
#   STORE_1000000=DIR   use a copy of a store this script's generator filled (skips the apply)
# Jobs: `j0000000`… (`'0 3 1 1 *'`, command `true`), plus `a-fail` (command `false`): it is
# triggered and run once by `run --for 3s` so `retry` has a failed run to retry. The store lives
# in $TMPDIR (1.2 GB at 1 000 000 jobs; removed at the end). Each command's wall time, user+sys
# CPU and peak RSS come from /usr/bin/time. The load average is printed with each block: the
# machine these figures come from is shared.
set -euo pipefail
BIN=$(realpath "$1")
shift || true
SIZES=${*:-1000 100000 1000000}
REPS=${REPS:-3}
BIN2=${BIN2:+$(realpath "$BIN2")}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cronsole-one-job.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

gen() { # gen N FILE [SUFFIX]: SUFFIX changes j0000000's command (a one-job re-apply)
  awk -v n="$1" -v sfx="${3:-}" 'BEGIN {
    print "budget: null\njobs:"
    print "  - name: a-fail\n    schedule: \"0 3 1 1 *\"\n    command: \"false\"\n    max_retries: 1"
    for (i = 0; i < n; i++) {
      c = (i == 0 && sfx != "") ? "true " sfx : "true"
      printf "  - name: j%07d\n    schedule: \"0 3 1 1 *\"\n    command: \"%s\"\n", i, c
    }
  }' > "$2"
}

# timed LABEL BIN BEFORE AFTER ARGS...: REPS runs of `BIN ARGS`, each preceded by the untimed
# command BEFORE and followed by AFTER (BIN's arguments, or "" for none), so every run finds the
# store in the same state. Prints the median wall time (from $EPOCHREALTIME), the median user+sys
# CPU and the largest peak RSS (from /usr/bin/time).
timed() {
  local label=$1 bin=$2 before=$3 after=$4; shift 4
  local f="$WORK/t" walls=() cpus=() peak=0 t0 t1
  for _ in $(seq 1 "$REPS"); do
    # shellcheck disable=SC2086
    [ -n "$before" ] && "$bin" $before --store "$S" > /dev/null
    t0=$EPOCHREALTIME
    /usr/bin/time -f "%U %S %M" -o "$f" "$bin" "$@" --store "$S" > /dev/null 2> "$WORK/err" || {
      echo "  $label: FAILED ($(head -c 300 "$WORK/err"))"; return 0; }
    t1=$EPOCHREALTIME
    # shellcheck disable=SC2086
    [ -n "$after" ] && "$bin" $after --store "$S" > /dev/null
    read -r u s m < "$f"
    walls+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", (b-a)*1000}')")
    cpus+=("$(awk -v u="$u" -v s="$s" 'BEGIN{printf "%d", (u+s)*1000}')")
    [ "$m" -gt "$peak" ] && peak=$m
  done
  local wm cm
  wm=$(printf '%s\n' "${walls[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  cm=$(printf '%s\n' "${cpus[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  printf '  %-22s wall median %8s ms, CPU median %5s ms, peak RSS %7.1f MB  (walls %s)\n' \
    "$label" "$wm" "$cm" "$(awk -v k="$peak" 'BEGIN{print k/1024}')" "${walls[*]}"
}

suite() { # suite LABEL BIN: every one-job command on $S, leaving the store as it found it
  local who=$1 bin=$2 j=j0000005
  local win="--from 2020-01-01T00:00:00Z --to 2020-01-02T00:00:00Z"
  echo "-- $who, load: $(cut -d' ' -f1-3 /proc/loadavg)"
  timed "describe" "$bin" "" "" describe $j
  timed "pause" "$bin" "" "resume $j" pause $j
  timed "resume" "$bin" "pause $j" "" resume $j
  timed "trigger" "$bin" "" "" trigger $j
  # shellcheck disable=SC2086
  timed "backfill (one slot)" "$bin" "" "cancel $j" backfill $j $win
  timed "cancel (drops it)" "$bin" "backfill $j $win" "" cancel $j
  timed "retry (a-fail's run)" "$bin" "" "cancel a-fail" retry "$RUN"
}

for n in $SIZES; do
  S="$WORK/store-$n"
  src_var="STORE_$n"
  if [ -n "${!src_var:-}" ]; then
    cp -r "${!src_var}" "$S"
  else
    gen "$n" "$WORK/jobs.yaml"
    "$BIN" apply "$WORK/jobs.yaml" --store "$S" > /dev/null
  fi
  "$BIN" trigger a-fail --store "$S" > /dev/null
  "$BIN" run --for 3s --store "$S" > /dev/null 2>&1 || true
  RUN=$("$BIN" history --job a-fail --json --limit 1 --store "$S" | sed -n 's/.*"run_id":"\([^"]*\)".*/\1/p' | head -1)
  echo "== $n jobs: store $(du -sh "$S" | cut -f1), failed run $RUN"
  suite "A $(basename "$BIN")" "$BIN"
  [ -n "$BIN2" ] && suite "B $(basename "$BIN2")" "$BIN2"
  if [ -z "${!src_var:-}" ]; then
    gen "$n" "$WORK/jobs2.yaml" changed
    before=$(stat -c %s "$S/jobs.journal")
    /usr/bin/time -f "%e %U %S %M" -o "$WORK/t" "$BIN" apply "$WORK/jobs2.yaml" --store "$S" > /dev/null
    read -r e u s m < "$WORK/t"
    echo "  re-apply, 1 job changed (A):        wall $e s, CPU $(awk -v u="$u" -v s="$s" 'BEGIN{print u+s}') s, peak RSS $((m / 1024)) MB, journal +$(( $(stat -c %s "$S/jobs.journal") - before )) B"
  fi
  rm -rf "$S"
done
