#!/bin/sh
# A stand-in for a status page the example monitors: a few lines change every minute, most stay
# the same, so the monitor records no_change within a minute and a small diff across minutes.
m=$(date -u +%M)
m=${m#0}
echo "service status (demo)"
echo "api:      operational"
echo "database: operational"
if [ $((m % 3)) -eq 0 ]; then echo "queue:    degraded (backlog $((m * 37 % 500)) jobs)"; else echo "queue:    operational"; fi
echo "workers:  $((m % 4 + 2)) online"
echo "last deploy: build-$((m / 10 + 1200))"
