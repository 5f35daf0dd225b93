#!/usr/bin/env python3
# Drive `cronsole __zygote` directly, as an owner does: N requests for `true`,
# up to C at once, each with its control socket and output pipes attached; print the CPU per run
# of the zygote, its supervisors and their commands (the zygote's own and reaped children's, plus
# its live children's: reused supervisors are reaped only when they retire).
# Usage: benches/zygote_drive.py BIN N C   (ZPRE="perf record -o z.data --" prefixes the zygote)
import socket, subprocess, sys, os, time, array, selectors
exe, N, C = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
p = subprocess.Popen(os.environ.get("ZPRE","").split() + [exe, "__zygote"], stdin=b); b.close()
time.sleep(0.3)
def ticks(pid):
    # the zygote's own + reaped children's, plus every live child's own + reaped children's
    tot = 0
    for d in os.listdir("/proc"):
        if not d.isdigit(): continue
        try: f = open(f"/proc/{d}/stat").read().rsplit(")",1)[1].split()
        except OSError: continue
        if int(d) == pid or int(f[1]) == pid:
            tot += sum(int(x) for x in f[11:15])
    return tot
req = b"cronsole-run/1\x000\x00\x000\x000\x00true\x00"
t0 = ticks(p.pid); w0 = time.time()
sel = selectors.DefaultSelector()
live = 0; sent = 0; done = 0; bad = 0
bufs = {}
while done < N:
    while live < C and sent < N:
        ours, theirs = socket.socketpair()
        outr, outw = os.pipe(); errr, errw = os.pipe()
        while True:
            try:
                a.sendmsg([req], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [theirs.fileno(), outw, errw]))]); break
            except BlockingIOError: time.sleep(0.001)
        theirs.close(); os.close(outw); os.close(errw); os.close(outr); os.close(errr)
        sel.register(ours, selectors.EVENT_READ); bufs[ours] = b""
        live += 1; sent += 1
    for k, _ in sel.select():
        s = k.fileobj; d = s.recv(64)
        if d: bufs[s] += d; continue
        st = bufs.pop(s)
        if len(st) != 8 or int.from_bytes(st[4:8], "little", signed=True) != 0: bad += 1
        sel.unregister(s); s.close(); live -= 1; done += 1
wall = time.time() - w0
time.sleep(0.3)
t1 = ticks(p.pid)
print(f"{N} runs, {C} at once: zygote side {(t1-t0)*10/N:.3f} ms CPU per run, wall {wall:.2f} s, bad {bad}")
a.close(); p.wait()
