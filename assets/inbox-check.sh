#!/bin/sh
# pre_run gate for the example: "is there anything to do?" Even minutes: yes, and say what;
# odd minutes: no (exit 1), so the job records a `skipped` row with this reason.
m=$(date -u +%M)
m=${m#0}
if [ $((m % 2)) -eq 0 ]; then
  echo "$((m % 5 + 1)) new report(s) in the inbox"
  exit 0
fi
echo "inbox empty" >&2
exit 1
