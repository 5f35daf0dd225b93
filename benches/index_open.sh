#!/usr/bin/env bash
# The open of a large file store: what `jobs.index` saves on a large file store. One store of N
# jobs (same jobs as benches/million_jobs.sh: `'0 3 1 1 *'`, command `true`, plus `a-due`),
# built once by the NEW binary's `apply` (which writes `jobs.index`); then, for each binary in
# turn, on that same store:
#   - open: wall time of `describe j0000005` (open + one record read), best and median of 3;
#   - jobs --json: wall time;
#   - run: ms from spawn to the first history row on stdout (`a-due` triggered just before);
#   - console --attach: ms from spawn to the first drawn frame (tmux, as console_million.sh).
# The NEW binary is also timed with the index removed (its fallback: the full scan). An OLD
# binary from before `jobs.index` ignores the index and always scans.
#
# Also the CPU time (user + sys, /usr/bin/time) of each `describe`.
#
# Usage: benches/index_open.sh OLD_BIN NEW_BIN [N]   (N default 1000000). Works in $TMPDIR
# (~1.3 GB at 1 000 000 jobs, removed at the end); prints the load average with each block.
# With STORE=DIR (a store this script's generator filled, with its `jobs.index`), the runs use
# a copy of DIR instead of applying N jobs again (the apply takes minutes on a loaded machine).
set -euo pipefail
OLD=$(realpath "$1"); NEW=$(realpath "$2"); N=${3:-1000000}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cronsole-index.XXXXXX")
SESSION="cronsole-index-$$"
trap 'tmux kill-session -t "$SESSION" 2>/dev/null || true; rm -rf "$WORK"' EXIT
S="$WORK/store"

if [ -n "${STORE:-}" ]; then
  cp -r "$STORE" "$S"
else
  awk -v n="$N" 'BEGIN {
    print "jobs:"
    print "  - name: a-due\n    schedule: \"0 3 1 1 *\"\n    command: \"true\""
    for (i = 0; i < n; i++)
      printf "  - name: j%07d\n    schedule: \"0 3 1 1 *\"\n    command: \"true\"\n", i
  }' > "$WORK/jobs.yaml"
  "$NEW" apply "$WORK/jobs.yaml" --store "$S" > /dev/null
fi
echo "== $N jobs: snapshot $(du -h "$S/jobs.snapshot.jsonl" | cut -f1), index $(du -h "$S/jobs.index" 2>/dev/null | cut -f1 || echo none)"

ms() { echo $(( $(date +%s%N) / 1000000 )); }
timed() { local s; s=$(ms); "$@" > /dev/null; echo $(( $(ms) - s )); }
three() { # best/median of 3
  local a b c; a=$(timed "$@"); b=$(timed "$@"); c=$(timed "$@")
  printf '%s\n' "$a" "$b" "$c" | sort -n | awk 'NR==1{b=$1} NR==2{m=$1} END{printf "best %5d ms, median %5d ms", b, m}'
}
first_row() {
  local bin=$1 start
  "$bin" trigger a-due --store "$S" > /dev/null
  start=$(ms)
  "$bin" run --for 3s --store "$S" 2> /dev/null | { read -r _; echo $(( $(ms) - start )); cat > /dev/null; } || true
}
first_frame() {
  local bin=$1 start first="?"
  start=$(ms)
  tmux new-session -d -s "$SESSION" -x 120 -y 40 -e TERM=xterm-256color "exec $bin console --attach --store $S"
  for _ in $(seq 1 6000); do
    if tmux capture-pane -p -t "$SESSION" 2>/dev/null | grep -q " Jobs [0-9]"; then first=$(( $(ms) - start )); break; fi
    sleep 0.005
  done
  tmux send-keys -t "$SESSION" q; sleep 1
  tmux kill-session -t "$SESSION" 2>/dev/null || true
  echo "$first"
}
cpu() { # user+sys seconds of one run
  /usr/bin/time -f "%U %S" -o "$WORK/time" "$@" > /dev/null
  awk '{printf "%.2f s", $1 + $2}' "$WORK/time"
}
block() { # block LABEL BIN
  echo "-- $1, load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "describe j0000005:   $(three "$2" describe j0000005 --store "$S")"
  echo "describe CPU (u+s):  $(cpu "$2" describe j0000005 --store "$S"); $(cpu "$2" describe j0000005 --store "$S")"
  echo "run, first row:      $(first_row "$2") ms"
  echo "console first frame: $(first_frame "$2") ms"
  echo "jobs --json:         $(timed "$2" jobs --json --store "$S") ms"
}
block "OLD binary" "$OLD"
block "NEW binary" "$NEW"
mv "$S/jobs.index" "$WORK/jobs.index.saved"
echo "-- NEW binary, index removed (read-only commands do not rewrite it), load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "describe j0000005:   $(three "$NEW" describe j0000005 --store "$S")"
mv "$WORK/jobs.index.saved" "$S/jobs.index"
block "OLD binary again" "$OLD"
block "NEW binary again" "$NEW"
