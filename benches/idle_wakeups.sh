#!/usr/bin/env bash
# Idle means idle: how often an idle owner wakes up, from outside.
#
# Usage: benches/idle_wakeups.sh BIN [SECONDS]   (default 60; BIN2=path runs a second binary too,
# after the first, on a fresh store of the same jobs)
#
# 1. Headless: `run` over a file store of 10 jobs whose next slot is months away. After 5 s of
#    start-up, the context switches of every thread of the engine process and of its children
#    (the zygote) are read from /proc/PID/task/*/status, and again SECONDS later: a thread that
#    sleeps, wakes and sleeps again counts one voluntary switch per wake-up.
# 2. Console: `console --attach` over the same store in a 120x40 tmux pane, counted the same
#    way, plus the bytes it wrote to its terminal (the pty's /proc/PID/io `wchar`), for SECONDS.
#
# Prints wake-ups per second for each (voluntary + involuntary switches / SECONDS), per thread
# name, and the two kinds apart: a voluntary switch is a thread that slept and was woken, an
# involuntary one a thread preempted while it ran (it grows with the machine's load, not with
# the program's wake-ups). Works in $TMPDIR; prints the load average (the machine is shared).
set -euo pipefail
BIN=$(realpath "$1")
SECS=${2:-60}
BIN2=${BIN2:+$(realpath "$BIN2")}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cronsole-idle.XXXXXX")
SESSION="cronsole-idle-$$"
trap 'tmux kill-session -t "$SESSION" 2>/dev/null || true; [ -n "${RUNPID:-}" ] && kill "$RUNPID" 2>/dev/null; rm -rf "$WORK"' EXIT

gen() {
  printf 'budget: null\njobs:\n'
  for i in $(seq 0 9); do
    printf '  - name: far%d\n    schedule: "0 3 1 1 *"\n    command: "true"\n' "$i"
  done
}

# switches PID...: "name voluntary involuntary" per thread of each PID and of its children
switches() {
  local p t
  for p in "$@"; do
    for t in /proc/"$p"/task/*; do
      [ -r "$t/status" ] || continue
      awk -v tid="${t##*/}" '/^Name:/{n=$2} /^voluntary_ctxt_switches/{v=$2} /^nonvoluntary_ctxt_switches/{i=$2}
        END{print tid, n, v, i}' "$t/status"
    done
  done
}

tree() { # the pid and its descendants
  local p=$1 c
  echo "$p"
  for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree "$c"; done
}

report() { # report LABEL BEFORE AFTER
  awk -v secs="$SECS" -v label="$1" '
    FNR==NR { v0[$1]=$3; i0[$1]=$4; next }
    { dv=$3-v0[$1]; di=$4-i0[$1]; if (!($1 in v0)) { dv=$3; di=$4 }
      byname[$2]+=dv+di; total+=dv+di; vol+=dv; invol+=di }
    END { printf "%s: %.2f wake-ups/s over %d s (voluntary %.2f/s, involuntary %.2f/s; ", label, total/secs, secs, vol/secs, invol/secs
          sep=""; for (n in byname) if (byname[n] > 0) { printf "%s%s %.2f/s", sep, n, byname[n]/secs; sep=", " }
          print ")" }' "$2" "$3"
}

measure() { # measure BIN
  local bin=$1 S="$WORK/store"
  rm -rf "$S"; gen > "$WORK/jobs.yaml"
  "$bin" apply "$WORK/jobs.yaml" --store "$S" > /dev/null
  rm -f "$WORK/jobs.yaml"
  echo "== $(basename "$bin") ($bin), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$bin" run --for "$((SECS + 20))s" --store "$S" > /dev/null 2>&1 &
  RUNPID=$!
  sleep 5
  switches $(tree "$RUNPID") > "$WORK/a"
  sleep "$SECS"
  switches $(tree "$RUNPID") > "$WORK/b"
  report "headless run (engine + zygote)" "$WORK/a" "$WORK/b"
  kill "$RUNPID" 2>/dev/null || true; wait "$RUNPID" 2>/dev/null || true; RUNPID=

  tmux new-session -d -s "$SESSION" -x 120 -y 40 -e TERM=xterm-256color \
    "exec $bin console --attach --store $S"
  local pid; pid=$(tmux display -p -t "$SESSION" '#{pane_pid}')
  sleep 5
  switches "$pid" > "$WORK/a"; local w0; w0=$(awk '/^wchar/{print $2}' /proc/"$pid"/io)
  sleep "$SECS"
  switches "$pid" > "$WORK/b"; local w1; w1=$(awk '/^wchar/{print $2}' /proc/"$pid"/io)
  report "console --attach" "$WORK/a" "$WORK/b"
  echo "console --attach: $(( (w1 - w0) / SECS )) bytes/s written ($((w1 - w0)) over $SECS s)"
  tmux send-keys -t "$SESSION" q; sleep 1
  tmux kill-session -t "$SESSION" 2>/dev/null || true
}

measure "$BIN"
[ -n "$BIN2" ] && measure "$BIN2"
exit 0
