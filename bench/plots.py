#!/usr/bin/env python3
"""PNG plots of one bench/run results directory (matplotlib, from bench/.venv).

Usage: bench/.venv/bin/python bench/plots.py RESULTS_DIR
Writes RESULTS_DIR/throughput-vs-concurrency.png (drain jobs/s against connections, batch 1, 10
and 100, median of rounds with min–max bars), claim-latency-cdf.png (CDF of the claim's latency at each
depth, from the depth cell's samples), claim-cost-vs-depth.png (p50 and p99 against depth),
pickup-latency.png (jq's pickup percentiles per arrival rate), pickup-latency-cdf.png (from the
per-job samples, all rounds pooled) and soak.png (jobs per second
through the held snapshot), each when its cells are present.
"""
import csv
import glob
import json
import os
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

d = sys.argv[1]


def finish_axes(ax, xlabel, ylabel, title, xlog=10, which="both"):
    """The axes' common finish: log x axis (base xlog; None: linear), labels, grid, legend."""
    if xlog:
        ax.set_xscale("log", base=xlog)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which=which, alpha=0.3)
    ax.legend(fontsize=8)


def save(fig, name):
    fig.tight_layout()
    fig.savefig(f"{d}/{name}", dpi=110)
rows = list(csv.DictReader(open(f"{d}/cells.csv")))
cell = defaultdict(dict)
for r in rows:
    try:
        cell[(r["cell"], r["system"], r["batch"], r["conns"])][r["round"]] = float(r["value"])
    except ValueError:
        pass
COLORS = {"floor": "black", "jq": "tab:blue", "pgmq": "tab:orange", "graphile": "tab:green",
          "procrastinate": "tab:red", "pgboss": "tab:purple", "jq-client": "tab:cyan",
          "graphile-tuned": "tab:olive", "procrastinate-tuned": "tab:pink"}


def series(c, s, b):
    pts = sorted(((int(k[3]), list(v.values())) for k, v in cell.items() if k[0] == c and k[1] == s and k[2] == b and v))
    return pts


drain_batches = [b for b in ("1", "10", "100") if any(k[0] == "drain" and k[2] == b for k in cell)]
if drain_batches:
    fig, axes = plt.subplots(1, len(drain_batches), figsize=(6 * len(drain_batches), 4.5), squeeze=False)
    for ax, b in zip(axes[0], drain_batches):
        for s in COLORS:
            pts = series("drain", s, b)
            if len(pts) < 2:
                continue
            xs = [p[0] for p in pts]
            med = [statistics.median(p[1]) for p in pts]
            lo = [m - min(p[1]) for m, p in zip(med, pts)]
            hi = [max(p[1]) - m for m, p in zip(med, pts)]
            ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=s, color=COLORS[s])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        cs = sorted({int(k[3]) for k in cell if k[0] == "drain" and k[2] == b})
        ax.set_xticks(cs)
        ax.set_xticklabels([str(c) for c in cs])
        finish_axes(ax, "connections (pgbench clients / peer concurrency)", "jobs/s (median, min–max)", f"drain, claim batch {b}", xlog=None)
    save(fig, "throughput-vs-concurrency.png")

samples = sorted(glob.glob(f"{d}/claim-latency/*.txt"))
if samples:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    groups = defaultdict(list)
    for f in samples:
        cellname, depth, system, _ = os.path.basename(f)[:-4].rsplit("-", 3)
        groups[(system, cellname, int(depth))].extend(float(x) for x in open(f) if x.strip())
    for ax, system in zip(axes, ("floor", "jq")):
        for (s, cname, depth), xs in sorted(groups.items(), key=lambda kv: (kv[0][1] != "depth", kv[0][2])):
            if s != system:
                continue
            xs = sorted(xs)
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            label = f"{depth:,} claimable" + (" + scheduled rows" if cname == "depth-future" else "")
            ax.plot(xs, ys, label=label, linestyle="--" if cname == "depth-future" else "-")
        finish_axes(ax, "claim latency, ms (one job, one connection)", "fraction of claims", f"{system}: claim latency CDF by depth")
    save(fig, "claim-latency-cdf.png")

dp = [k for k in cell if k[0] == "depth-p50"]
if dp:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for s in ("floor", "jq"):
        for c, ls in (("depth-p50", "-"), ("depth-p99", ":")):
            pts = sorted((int(k[2]), statistics.median(v.values())) for k, v in cell.items() if k[0] == c and k[1] == s and v)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", linestyle=ls, color=COLORS[s], label=f"{s} {c[6:]}")
        for c, mk in (("depth-future-p50", "x"), ("depth-future-p99", "+")):
            pts = [(int(k[2]), statistics.median(v.values())) for k, v in cell.items() if k[0] == c and k[1] == s and v]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=mk, s=80, color=COLORS[s],
                           label=f"{s} {c[13:]}, + 1M scheduled rows")
    finish_axes(ax, "claimable jobs in the queue", "claim latency, ms (median of repetitions)", "claim cost against depth")
    save(fig, "claim-cost-vs-depth.png")

lat = [r for r in rows if r["cell"] == "latency"]
if lat:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for r in lat:
        try:
            o = json.loads(r["detail"].replace("'", '"'))
        except Exception:
            continue
        ps = [(o["p50_ms"], 0.50), (o["p95_ms"], 0.95), (o["p99_ms"], 0.99), (o["max_ms"], 1.0)] if "max_ms" in o else \
             [(o["p50_ms"], 0.50), (o["p95_ms"], 0.95), (o["p99_ms"], 0.99)]
        client = r["system"] == "jq-client"  # commit → handler start (else → claim return)
        ax.plot([p[0] for p in ps], [p[1] for p in ps], marker="s" if client else "o", alpha=0.7,
                linestyle="--" if client else "-",
                color={"100": "tab:green", "500": "tab:blue", "2000": "tab:red"}.get(r["batch"], "gray"),
                label=f"{r['batch']}/s{', handler start (Rust client)' if client else ''}" if r["round"] == "1" else None)
    finish_axes(ax, "pickup latency, ms (enqueue commit → claim return, or → handler start dashed)", "percentile",
                "jq long-poll pickup latency (p50/p95/p99/max per round)")
    save(fig, "pickup-latency.png")

pick = sorted(glob.glob(f"{d}/pickup-latency/*-round*.csv"))
if pick:  # bench/run since the per-job samples: a CDF per arrival rate, all rounds pooled
    by_rate = defaultdict(list)
    for f in pick:
        rate = os.path.basename(f).split("-round")[0]  # "500", or "client-500": jq's Rust client, → handler start
        for line in open(f):
            line = line.strip()
            if line and line != "missing":
                by_rate[rate].append(max(float(line.split(",")[0]), 0.01))
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for rate, v in sorted(by_rate.items(), key=lambda x: (int(x[0].split("-")[-1]), x[0])):
        v.sort()
        client = rate.startswith("client-")
        ax.plot(v, [(i + 1) / len(v) for i in range(len(v))], linestyle="--" if client else "-",
                label=f"{rate.split('-')[-1]} jobs/s{', handler start (Rust client)' if client else ''} ({len(v):,} jobs)")
    ax.axvline(10, color="gray", linestyle=":", linewidth=1)
    finish_axes(ax, "pickup latency, ms (enqueue commit → claim return, or → handler start dashed; 0 drawn at 0.01)",
                "fraction of jobs", "jq long-poll pickup latency CDF (all rounds pooled)")
    save(fig, "pickup-latency-cdf.png")

soaks = sorted(glob.glob(f"{d}/soak-*.csv"))
if soaks:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for f in soaks:
        s = os.path.basename(f)[5:-4]
        rs = list(csv.DictReader(open(f)))
        ax.plot([int(r["second"]) for r in rs], [int(r["jobs"]) for r in rs], label=s, color=COLORS.get(s, "gray"))
        held = [int(r["second"]) for r in rs if r["phase"] == "held"]
    if held:
        ax.axvspan(min(held) - 1, max(held), color="gray", alpha=0.15, label="REPEATABLE READ snapshot held")
    finish_axes(ax, "second", "jobs completed in that second", "drain (batch 10) through a held snapshot", xlog=None, which="major")
    save(fig, "soak.png")
print("plots written to", d)
