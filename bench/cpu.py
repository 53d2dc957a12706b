#!/usr/bin/env python3
"""CPU seconds for bench/run's per-job CPU figures, from /proc (Linux).

  cpu.py tree PID        user+system seconds of the process PID and all its live descendants,
                         including what they have reaped (cutime/cstime): for the postmaster
                         this is every backend that ran since it started, exited or not.
  cpu.py run FILE CMD…   runs CMD, then writes the user+system seconds of CMD and its reaped
                         children (getrusage RUSAGE_CHILDREN) to FILE; exits with CMD's status.
The difference of two `tree` readings of the postmaster is the database's CPU in between
(backends that exited meanwhile are in the postmaster's cutime/cstime once it has reaped them).
"""
import os
import resource
import subprocess
import sys

HZ = os.sysconf("SC_CLK_TCK")


def stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    rest = s[s.rindex(")") + 2:].split()
    # fields after the name: state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17)
    return int(rest[1]), sum(int(x) for x in rest[11:15])


def tree(root):
    kids, ticks = {}, {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid, t = stat(int(p))
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(p))
            ticks[int(p)] = t
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        total += ticks.get(p, 0)
        todo.extend(kids.get(p, []))
    return total / HZ


if __name__ == "__main__":  # imported by bench/pressure/run.py for tree()
    if sys.argv[1] == "tree":
        print(f"{tree(int(sys.argv[2])):.2f}")
    elif sys.argv[1] == "run":
        rc = subprocess.call(sys.argv[3:])
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(sys.argv[2], "w") as f:
            f.write(f"{r.ru_utime + r.ru_stime:.3f}\n")
        sys.exit(rc)
