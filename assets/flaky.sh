#!/bin/sh
# A command that fails now and then, to show `failed` rows, retries and the incident alert.
s=$(date -u +%S)
s=${s#0}
if [ $((s % 3)) -eq 0 ]; then
  echo "upstream timed out after 5s (request id $(date +%s%N))" >&2
  exit 2
fi
echo "sync ok: $((s * 13 % 97)) records"
