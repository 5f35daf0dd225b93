#!/usr/bin/env bash
# PostgreSQL throughput with durable settings: OWNERS `cronsole run` processes sharing one
# PostgreSQL store of JOBS jobs `every 1s` (command `true`) for SECS seconds, on a throwaway
# cluster of our own with the server's durability defaults (fsync on, synchronous_commit on,
# full_page_writes on). Prints: runs recorded and runs/s (overall and per second of the middle
# of the window: min / median), duplicates (a (job, slot) recorded twice: must be 0), rows per
# owner and per status, and the server's CPU (user + sys of the postmaster and every backend,
# from /proc) per run.
#
# Usage: benches/pg_owners.sh BIN [OWNERS] [JOBS] [SECS]   (default 4 2000 60)
#   BIN2=path  runs the same with a second binary afterwards, on a fresh database.
#   PG_STATEMENTS=1  loads pg_stat_statements and prints the statements that took the most
#                    server time (calls, total and mean ms, rows): where the CPU per run goes.
#                    It costs the server a little itself: compare runs made the same way.
# Needs PostgreSQL's initdb/pg_ctl (as .ci/run finds them); run as root, the cluster runs as
# the `postgres` user. Prints the load average (the machine is shared).
set -euo pipefail
BIN=$(realpath "$1"); OWNERS=${2:-4}; JOBS=${3:-2000}; SECS=${4:-60}
BIN2=${BIN2:+$(realpath "$BIN2")}
PG_BIN=""
for d in /usr/local/bin /usr/lib/postgresql/*/bin; do
  if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then PG_BIN=$d; break; fi
done
[ -n "$PG_BIN" ] || { echo "initdb not found" >&2; exit 2; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cronsole-pg-owners.XXXXXX")
[ "$(id -u)" = 0 ] && chown postgres: "$WORK"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  as_pg "$PG_BIN/pg_ctl" -D "$WORK/data" -m fast stop > /dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
as_pg "$PG_BIN/initdb" -D "$WORK/data" -A trust -U postgres -E UTF8 > /dev/null
EXTRA=""
[ -n "${PG_STATEMENTS:-}" ] && EXTRA="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
as_pg "$PG_BIN/pg_ctl" -D "$WORK/data" -l "$WORK/server.log" -w -t 60 \
  -o "-p $PORT -h 127.0.0.1 -k $WORK -c max_connections=200 $EXTRA" start > /dev/null
PSQL=(psql -X -q -t -A -h 127.0.0.1 -p "$PORT" -U postgres)
echo "cluster: $("${PSQL[@]}" -c "select 'fsync=' || current_setting('fsync') || ' synchronous_commit=' || current_setting('synchronous_commit') || ' full_page_writes=' || current_setting('full_page_writes') || ', ' || version()" postgres)"
POSTMASTER=$(head -1 "$WORK/data/postmaster.pid")

server_ticks() { # user+sys clock ticks of the postmaster and all its children (live ones)
  local total=0 p s
  for p in "$POSTMASTER" $(cat /proc/"$POSTMASTER"/task/*/children 2>/dev/null); do
    s=$(awk '{print $14 + $15 + $16 + $17}' /proc/"$p"/stat 2>/dev/null || echo 0)
    total=$((total + s))
  done
  echo "$total"
}

gen() {
  printf 'budget: null\ndefaults:\n  max_retries: 1\njobs:\n'
  awk -v n="$JOBS" 'BEGIN { for (i = 0; i < n; i++) printf "  - name: j%05d\n    schedule: every 1s\n    command: \"true\"\n", i }'
}

measure() { # measure BIN DB
  local bin=$1 db=$2
  "${PSQL[@]}" -c "create database $db" postgres
  [ -n "${PG_STATEMENTS:-}" ] && "${PSQL[@]}" -c "create extension pg_stat_statements" "$db"
  local url="postgres://postgres@127.0.0.1:$PORT/$db"
  gen > "$WORK/jobs.yaml"
  "$bin" apply "$WORK/jobs.yaml" --store "$url" > /dev/null
  rm -f "$WORK/jobs.yaml"
  echo "== $(basename "$bin") ($bin): $OWNERS owners, $JOBS jobs every 1s, $SECS s, load: $(cut -d' ' -f1-3 /proc/loadavg)"
  local t0 c0 c1 t1
  PIDS=()
  for _ in $(seq 1 "$OWNERS"); do
    (cd "$WORK" && exec "$bin" run --for "${SECS}s" --store "$url" > /dev/null 2>&1) &
    PIDS+=($!)
  done
  t0=$(date +%s.%N); c0=$(server_ticks)
  for p in "${PIDS[@]}"; do wait "$p" || true; done
  c1=$(server_ticks); t1=$(date +%s.%N)
  PIDS=()
  local q="select count(*) from cronsole_history"
  local runs; runs=$("${PSQL[@]}" -c "$q where status = 'succeeded'" "$db")
  local dups; dups=$("${PSQL[@]}" -c "select coalesce(sum(c - 1), 0) from (select count(*) c from cronsole_history where slot is not null and status <> 'missed' group by job, slot having count(*) > 1) d" "$db")
  local window; window=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
  echo "runs (succeeded rows): $runs in ${window} s = $(awk -v r="$runs" -v w="$SECS" 'BEGIN{printf "%.0f", r/w}') runs/s over the ${SECS} s run; duplicates (job, slot): $dups"
  echo "per second, middle of the window (started_at): $("${PSQL[@]}" -c "with s as (select date_trunc('second', started_at) t, count(*) c from cronsole_history where status = 'succeeded' group by 1 order by 1), m as (select c from s offset 10 limit greatest((select count(*) from s) - 20, 1)) select 'min ' || min(c) || ', median ' || percentile_disc(0.5) within group (order by c) || ', max ' || max(c) from m" "$db")"
  echo "per status: $("${PSQL[@]}" -c "select string_agg(status || ' ' || c, ', ') from (select status, count(*) c from cronsole_history group by 1 order by 1) s" "$db")"
  echo "per owner: $("${PSQL[@]}" -c "select string_agg(c::text, ' / ') from (select count(*) c from cronsole_history where status <> 'missed' group by row->>'owner' order by 1 desc) s" "$db")"
  echo "server CPU: $(awk -v a="$c0" -v b="$c1" -v r="$runs" 'BEGIN{printf "%.2f s = %.3f ms per run", (b-a)/100, (r>0 ? (b-a)*10/r : 0)}') (postmaster + backends, /proc)"
  echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ -n "${PG_STATEMENTS:-}" ]; then
    echo "statements by server time (calls, total ms, mean ms, rows; first 70 characters):"
    "${PSQL[@]}" -F ' | ' -c "select calls, round(total_exec_time), round(mean_exec_time::numeric, 3), rows, regexp_replace(left(query, 70), '\s+', ' ', 'g') from pg_stat_statements where dbid = (select oid from pg_database where datname = '$db') order by total_exec_time desc limit 15" "$db"
    "${PSQL[@]}" -c "select pg_stat_statements_reset()" "$db" > /dev/null
  fi
}

measure "$BIN" bench_a
[ -n "$BIN2" ] && measure "$BIN2" bench_b
exit 0
