#!/bin/sh
# A command that fails now and then (one 15-second slot in four), to show `failed` rows, the
# retry, and one incident alert per failure signature followed by a recovery note.
now=$(date -u +%s)
if [ $((now / 15 % 4)) -eq 0 ]; then
  echo "upstream timed out after 5s (request id $now)" >&2
  exit 2
fi
echo "sync ok: $((now % 97)) records"
