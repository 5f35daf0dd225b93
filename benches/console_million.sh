#!/usr/bin/env bash
# The console over a large file store (a million jobs must open at once). For each N, times from
# spawn to the first drawn frame (the jobs table's title on the tmux pane) and to the whole
# store loaded (the title's "loading all jobs…" gone), and the console's peak RSS (VmHWM) once
# loaded, for `console --attach` (no engine) and `console` (with the engine).
#
# Usage: benches/console_million.sh [BIN] [N...]   (default BIN target/release/cronsole,
# N 100000 1000000). Same jobs as benches/million_jobs.sh (`'0 3 1 1 *'`, command `true`).
# Needs tmux. Works in $TMPDIR (~1.3 GB at 1 000 000 jobs, removed at the end); prints the
# load average with each block because the machine these figures come from is shared.
set -euo pipefail
BIN=${1:-target/release/cronsole}
shift || true
SIZES=${*:-100000 1000000}
BIN=$(realpath "$BIN")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cronsole-console-million.XXXXXX")
SESSION="cronsole-million-$$"
trap 'tmux kill-session -t "$SESSION" 2>/dev/null || true; rm -rf "$WORK"' EXIT

gen() { # gen N FILE
  awk -v n="$1" 'BEGIN {
    print "jobs:"
    for (i = 0; i < n; i++)
      printf "  - name: j%07d\n    schedule: \"0 3 1 1 *\"\n    command: \"true\"\n", i
  }' > "$2"
}

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
pane() { tmux capture-pane -p -t "$SESSION" 2>/dev/null || true; }

# measure N MODE...: one console run in a 120x40 tmux pane
measure() {
  local n=$1; shift
  local start first="" full="" pid hwm
  start=$(now_ms)
  tmux new-session -d -s "$SESSION" -x 120 -y 40 -e TERM=xterm-256color \
    "exec $BIN $* --store $WORK/store"
  pid=$(tmux display -p -t "$SESSION" '#{pane_pid}')
  for _ in $(seq 1 24000); do # at most 120 s
    local p; p=$(pane)
    if [ -z "$first" ] && grep -q " Jobs [0-9]" <<<"$p"; then first=$(( $(now_ms) - start )); fi
    if [ -n "$first" ] && ! grep -q "loading all jobs" <<<"$p"; then full=$(( $(now_ms) - start )); break; fi
    sleep 0.005
  done
  sleep 1
  hwm=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status" 2>/dev/null || echo 0)
  tmux send-keys -t "$SESSION" q
  sleep 1
  tmux kill-session -t "$SESSION" 2>/dev/null || true
  printf '%-20s first frame %6s ms, all %6s jobs loaded %6s ms, peak RSS %8s KB (%s bytes per job)\n' \
    "$*" "${first:-?}" "$n" "${full:-?}" "${hwm:-?}" "$(( ${hwm:-0} * 1024 / n ))"
}

for n in $SIZES; do
  gen "$n" "$WORK/jobs.yaml"
  rm -rf "$WORK/store"
  "$BIN" apply "$WORK/jobs.yaml" --store "$WORK/store" > /dev/null
  echo "== $n jobs, store $(du -sh "$WORK/store" | cut -f1), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  measure "$n" console --attach
  measure "$n" console
done
