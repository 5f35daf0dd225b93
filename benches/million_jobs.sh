#!/usr/bin/env bash
# How apply, validate, headless `run` and `jobs --json` grow with the number
# of jobs.
#
# Usage: benches/million_jobs.sh [BIN] [N...]   (default BIN target/release/cronsole, N 100000 1000000)
# Generates N jobs (`'0 3 1 1 *'`, command `true`) plus one job `a-due` that is triggered before
# `run` starts, so the first row on stdout marks the first claim. Works in $TMPDIR (the files are
# ~80 MB at 1 000 000 jobs and are removed at the end). Prints one block of figures per N;
# the load average is printed with each, because the machine these figures come from is shared.
set -euo pipefail
BIN=${1:-target/release/cronsole}
shift || true
SIZES=${*:-100000 1000000}
BIN=$(realpath "$BIN")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cronsole-million.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

gen() { # gen N FILE [SUFFIX]: the jobs file; SUFFIX changes job 0's command (a one-job re-apply)
  awk -v n="$1" -v sfx="${3:-}" 'BEGIN {
    print "jobs:"
    print "  - name: a-due\n    schedule: \"0 3 1 1 *\"\n    command: \"true\""
    for (i = 0; i < n; i++) {
      c = (i == 0 && sfx != "") ? "true " sfx : "true"
      printf "  - name: j%07d\n    schedule: \"0 3 1 1 *\"\n    command: \"%s\"\n", i, c
    }
  }' > "$2"
}

peak() { sed -n 's/.*Maximum resident set size (kbytes): //p' "$1"; }
wall() { sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$1"; }

for n in $SIZES; do
  d="$WORK/$n"; mkdir -p "$d"
  gen "$n" "$d/jobs.yaml"
  echo "== $n jobs ($(du -h "$d/jobs.yaml" | cut -f1) jobs file), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -v -o "$d/apply.time" "$BIN" apply "$d/jobs.yaml" --store "$d/store" > /dev/null
  echo "apply (new store):          wall $(wall "$d/apply.time"), peak RSS $(peak "$d/apply.time") KB"
  echo "store on disk:              $(du -sh "$d/store" | cut -f1)"
  /usr/bin/time -v -o "$d/validate.time" "$BIN" validate "$d/jobs.yaml" > /dev/null
  echo "validate:                   wall $(wall "$d/validate.time"), peak RSS $(peak "$d/validate.time") KB"
  gen "$n" "$d/jobs2.yaml" changed
  before=$(stat -c %s "$d/store/jobs.journal")
  /usr/bin/time -v -o "$d/reapply.time" "$BIN" apply "$d/jobs2.yaml" --store "$d/store" > /dev/null
  after=$(stat -c %s "$d/store/jobs.journal")
  echo "re-apply, 1 job changed:    wall $(wall "$d/reapply.time"), peak RSS $(peak "$d/reapply.time") KB, journal +$((after - before)) bytes"
  /usr/bin/time -v -o "$d/jobs.time" "$BIN" jobs --json --store "$d/store" > "$d/jobs.json"
  echo "jobs --json:                wall $(wall "$d/jobs.time"), peak RSS $(peak "$d/jobs.time") KB, $(wc -l < "$d/jobs.json") lines"
  "$BIN" trigger a-due --store "$d/store" > /dev/null
  start=$(date +%s%N)
  /usr/bin/time -v -o "$d/run.time" "$BIN" run --for 5s --store "$d/store" \
    2> "$d/run.err" | { read -r first; echo "$(( ($(date +%s%N) - start) / 1000000 ))" > "$d/first"; cat > /dev/null; } || true
  rss=$(peak "$d/run.time")
  echo "run --for 5s:               first row after $(cat "$d/first" 2>/dev/null || echo '?') ms, wall $(wall "$d/run.time"), peak RSS $rss KB ($(( rss * 1024 / (n + 1) )) bytes per job)"
  rm -rf "$d"
done
