#!/usr/bin/env python3
"""Summarize bench/run's cells.csv into markdown: medians with min-max, and same-round ratios.

Usage: bench/summarize.py RESULTS_DIR   (reads RESULTS_DIR/cells.csv and machine.txt)
"""
import csv
import statistics
import sys
from collections import defaultdict

d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/cells.csv")))
cell = defaultdict(dict)  # (cell, system, batch) -> {round: value}
for r in rows:
    try:
        cell[(r["cell"], r["system"], r["batch"])][r["round"]] = float(r["value"])
    except ValueError:
        pass


def fmt(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.2f}"


def stat(vals):
    vals = list(vals)
    if not vals:
        return "—"
    return f"{fmt(statistics.median(vals))} ({fmt(min(vals))}–{fmt(max(vals))})"


def ratio(a, b):
    """Same-round ratios a/b: (median, min, max, list) or None."""
    A, B = cell.get(a, {}), cell.get(b, {})
    rs = [A[k] / B[k] for k in A if k in B and B[k] > 0]
    if not rs:
        return None
    return statistics.median(rs), min(rs), max(rs)


def rfmt(x):
    return "—" if x is None else f"{x[0]:.2f} ({x[1]:.2f}–{x[2]:.2f})"


out = []
out.append(f"# Benchmark summary: {d}\n")
out.append("```")
out.append(open(f"{d}/machine.txt").read().rstrip())
out.append("```\n")
out.append("Values: median over rounds (min–max). Ratios: computed within each round, then median (min–max).\n")

drain_batches = sorted({k[2] for k in cell if k[0] == "drain"}, key=int)
systems = [s for s in ("floor", "jq", "jq-client", "pgmq", "graphile", "procrastinate") if any(k[0] == "drain" and k[1] == s for k in cell)]
if drain_batches:
    out.append("## Drain, jobs/s (pgbench SQL level: floor, jq, pgmq; end to end: jq-client, graphile)\n")
    out.append("| batch | " + " | ".join(systems) + " |")
    out.append("|---|" + "---|" * len(systems))
    for b in drain_batches:
        out.append(f"| {b} | " + " | ".join(stat(cell.get(("drain", s, b), {}).values()) for s in systems) + " |")
    out.append("")
    pairs = [(s, "floor") for s in systems if s != "floor"] + [("jq-client", "jq")] + \
            [("jq", p) for p in ("pgmq", "graphile", "procrastinate") if p in systems] + [("jq-client", "graphile"), ("jq-client", "procrastinate")]
    pairs = [p for p in pairs if p[0] in systems and p[1] in systems]
    out.append("Same-round ratios, median (min–max):\n")
    out.append("| batch | " + " | ".join(f"{a} ÷ {b}" for a, b in pairs) + " |")
    out.append("|---|" + "---|" * len(pairs))
    for b in drain_batches:
        out.append(f"| {b} | " + " | ".join(rfmt(ratio(("drain", a, b), ("drain", c, b))) for a, c in pairs) + " |")
    out.append("")

ceil = [k for k in cell if k[0] == "ceiling"]
if ceil:
    out.append("## Ceilings (pgbench, tps)\n")
    for k in sorted(ceil):
        out.append(f"- `{k[1]}`: {stat(cell[k].values())}")
    r = ratio(("drain", "floor", "1"), ("ceiling", "pgbench-N", "1"))
    if r:
        out.append(f"- floor batch-1 jobs/s ÷ pgbench -N tps: {rfmt(r)} (a job is two transactions)")
    out.append("")

lat = sorted((k for k in cell if k[0] == "latency"), key=lambda k: int(k[2]))
if lat:
    out.append("## Pickup latency (jq long-poll, commit → claim return), p99 ms per round\n")
    out.append("| arrival rate (jobs/s) | p99 ms, median (min–max) | rounds' detail |")
    out.append("|---|---|---|")
    detail = defaultdict(list)
    for r in rows:
        if r["cell"] == "latency":
            detail[r["batch"]].append(r["detail"])
    for k in lat:
        import json
        ds = []
        for j in detail[k[2]]:
            try:
                o = json.loads(j.replace("'", '"'))
                ds.append(f"p50 {o['p50_ms']:.1f} / p95 {o['p95_ms']:.1f} / p99 {o['p99_ms']:.1f} (achieved {o['achieved']:.0f}/s, missing {o['missing']})")
            except Exception:
                ds.append(j)
        out.append(f"| {k[2]} | {stat(cell[k].values())} | {'; '.join(ds)} |")
    out.append("")

enq = sorted(k for k in cell if k[0].startswith("enqueue"))
if enq:
    out.append("## Enqueue, one job per transaction, jobs/s\n")
    out.append("| durability | jq.enqueue (wakeup path) | jq.enqueue + NOTIFY | floor INSERT | jq ÷ jq+NOTIFY | jq ÷ floor |")
    out.append("|---|---|---|---|---|---|")
    for c in ("enqueue", "enqueue-durable"):
        if not any(k[0] == c for k in enq):
            continue
        g = lambda s: stat(cell.get((c, s, "1"), {}).values())
        out.append(f"| {'synchronous_commit=on' if c.endswith('durable') else 'synchronous_commit=off'} | {g('jq')} | {g('jq+notify')} | {g('floor')} | "
                   f"{rfmt(ratio((c, 'jq', '1'), (c, 'jq+notify', '1')))} | {rfmt(ratio((c, 'jq', '1'), (c, 'floor', '1')))} |")
    out.append("")

out.append("## Targets\n")


def target(name, r, ok):
    if r is None:
        out.append(f"- {name}: not measured")
    else:
        out.append(f"- {name}: {rfmt(r) if isinstance(r, tuple) else r} → **{'met' if ok else 'missed'}**")


for b in ("1", "10"):
    r = ratio(("drain", "jq", b), ("drain", "floor", b))
    target(f"jq ≥ 0.8× floor at batch {b}", r, r and r[0] >= 0.8)
r = ratio(("drain", "jq-client", "10"), ("drain", "jq", "10"))
target("Rust client ≥ 0.6× jq SQL level (batch 10)", r, r and r[0] >= 0.6)
for b in drain_batches:
    for p in ("pgmq", "graphile", "procrastinate"):
        r = ratio(("drain", "jq", b), ("drain", p, b))
        if r:
            target(f"jq (SQL level) ≥ {p} at batch {b}", r, r[0] >= 1.0)
for p in ("graphile", "procrastinate"):
    r = ratio(("drain", "jq-client", "10"), ("drain", p, "1"))
    if r:
        target(f"jq-client (claim batch 10) ≥ {p} end to end (its defaults)", r, r[0] >= 1.0)
v = cell.get(("latency", "jq", "500"), {}).values()
if v:
    m = statistics.median(v)
    target("pickup p99 < 10 ms at 500 jobs/s", f"{m:.1f} ms (median of rounds; max {max(v):.1f})", m < 10)
print("\n".join(out))
