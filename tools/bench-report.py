#!/usr/bin/env python3
"""Turns the raw files of `make bench` into results/bench.json, a table on
stdout and results/bench.png:

    tools/bench-report.py RAW... OUTDIR

build/bench/raw.txt (one guest, loopback; written by tools/bench-guest.sh),
build/bench/raw-veth.txt (one guest, two devices across a veth pair; written
by tools/bench-veth.sh, test names suffixed _veth) and build/bench/raw-pair.txt
(across two guests; written by guest A of tools/bench-pair.sh, test names
suffixed _2g). A raw file that is missing is skipped with a note.

CPU lines ("CPU test driver round seconds bytes messages") give the busy
CPU time of the transfer alone: the difference between a run and a longer
run of the same test (tools/bench-lib.sh, CPU_SCALE), with the bytes and
messages that difference bought; across two guests, both guests' time
summed. The table adds the median CPU cost per MiB moved (milliseconds) and
per message (microseconds) of each driver, and their ratio (ferroce / rxe:
lower is better). CPURUN lines (whole runs, set-up included) are not used.

The message rate against the number of active QPs (msg_rate_64_q1, _q64,
_q1024, in each part): below the table, each driver's median with q64 and
q1024 as a ratio to q1 (flat is 1.0); in the JSON as "vs_q1".

Each measurement is reported as the median of its rounds, with min and max;
ratio is ferroce / rxe (higher is better for bandwidth and message rate,
lower for latency)."""
import json
import math
import statistics
import sys
from pathlib import Path

if len(sys.argv) < 3:
    sys.exit("usage: bench-report.py RAW... OUTDIR")
raws, outdir = [Path(a) for a in sys.argv[1:-1]], Path(sys.argv[-1])
outdir.mkdir(parents=True, exist_ok=True)
lines = []
for raw in raws:
    if raw.exists():
        lines += raw.read_text().splitlines()
    else:
        print(f"{raw}: missing (that part did not run or did not start)")
# references measured beside the tests: the guest's copy bandwidth and the
# TCP bandwidth of the two guests' link (MiB/s)
tests, runs, refs, cpu = {}, {}, {}, {}
for line in lines:
    f = line.split()
    if line.startswith("CPU ") and len(f) == 7:
        _, name, drv, _rnd, secs, nbytes, msgs = f
        try:
            s, b, m = float(secs), float(nbytes), float(msgs)
        except ValueError:
            continue
        if b > 0 and m > 0:
            cpu.setdefault(name, {}).setdefault({"fr": "ferroce"}.get(drv, drv), []).append(
                (1e3 * s / (b / (1 << 20)), 1e6 * s / m))
        continue
    if line.startswith("TEST "):
        name, unit, better, cmd = line[5:].split("|", 3)
        tests[name] = dict(unit=unit, better=better, cmd=cmd)
    elif line.startswith("RESULT ") and len(f) == 5:
        _, name, drv, rnd, val = f
        if name in ("memcpy", "linktcp"):
            refs[name] = float(val)
            continue
        try:
            v = float(val)
        except ValueError:
            v = None
        if v is not None and not math.isfinite(v):
            v = None  # perftest prints "inf" when its clock calibration failed
        runs.setdefault(name, {}).setdefault({"fr": "ferroce"}.get(drv, drv), []).append(v)

rows = []
for name, t in tests.items():
    r = runs.get(name, {})
    ok = {d: [v for v in r.get(d, []) if v is not None] for d in ("rxe", "ferroce")}
    med = {d: statistics.median(v) if v else None for d, v in ok.items()}
    ratio = med["ferroce"] / med["rxe"] if med["rxe"] and med["ferroce"] is not None else None
    c = cpu.get(name, {})
    cost = {d: (statistics.median(x[0] for x in c[d]), statistics.median(x[1] for x in c[d])) if c.get(d) else None
            for d in ("rxe", "ferroce")}
    cpu_ratio = cost["ferroce"][1] / cost["rxe"][1] if cost["rxe"] and cost["ferroce"] and cost["rxe"][1] else None
    rows.append(dict(
        test=name, unit=t["unit"], better=t["better"], rxe=med["rxe"], ferroce=med["ferroce"], ratio=ratio,
        cpu_ms_per_mib={d: cost[d][0] if cost[d] else None for d in cost},
        cpu_us_per_msg={d: cost[d][1] if cost[d] else None for d in cost},
        cpu_ratio=cpu_ratio,
        runs={d: r.get(d, []) for d in ("rxe", "ferroce")},
        min={d: min(v) if v else None for d, v in ok.items()},
        max={d: max(v) if v else None for d, v in ok.items()},
        command=t["cmd"],
    ))
# the message rate against the QP count: each driver's median over its q1 median
byname = {r["test"]: r for r in rows}
for r in rows:
    base, sep, rest = r["test"].partition("msg_rate_64_q")
    if base or not sep:
        continue
    suffix = rest.lstrip("0123456789")
    one = byname.get("msg_rate_64_q1" + suffix)
    if one:
        r["vs_q1"] = {d: r[d] / one[d] if r[d] is not None and one[d] else None for d in ("rxe", "ferroce")}
doc = rows
(outdir / "bench.json").write_text(json.dumps(doc, indent=2) + "\n")

def fmt(x):
    return "-" if x is None else f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"

memcpy, linktcp = refs.get("memcpy"), refs.get("linktcp")
print(f"guest copy bandwidth (physical reference): {fmt(memcpy)} MiB/s" if memcpy else "guest copy bandwidth: not measured")
if linktcp:
    print(f"TCP across the two guests' link (physical reference of _2g): {fmt(linktcp)} MiB/s")
tw = max([18] + [len(r["test"]) for r in rows])
print(f"{'test':{tw}} {'unit':6} {'rxe (min..max)':26} {'ferroce (min..max)':26} {'ratio':>7}  "
      f"{'CPU ms/MiB rxe/fr':18} {'CPU us/msg rxe/fr':18} {'CPU ratio':>9}  goal")
goals = {"send_bw_64k": (">=", 3), "write_bw_64k": (">=", 3), "msg_rate_64": (">=", 3), "ud_send_bw_mtu": (">=", 3),
         "write_lat_2": ("<=", 0.5), "send_lat_2": ("<=", 0.5)}
for r in rows:
    def span(d):
        nf = sum(v is None for v in r["runs"][d])  # failed rounds
        return f"{fmt(r[d])} ({fmt(r['min'][d])}..{fmt(r['max'][d])})" + (f" {nf} failed" if nf else "")
    base = r["test"].removesuffix("_2g").removesuffix("_veth")
    g = goals.get(base)
    if r["test"].endswith("_veth") and base == "read_bw_64k":
        g = (">=", 3)  # issue 21's goal for the path through the IP stack
    gs = ""
    if g and r["ratio"] is not None:
        met = r["ratio"] >= g[1] if g[0] == ">=" else r["ratio"] <= g[1]
        gs = f"{g[0]}{g[1]}x {'met' if met else 'not met'}"
    mib, msg = r["cpu_ms_per_mib"], r["cpu_us_per_msg"]
    if r["unit"] != "MiB/s":
        mib = {"rxe": None, "ferroce": None}  # per MiB means nothing for 2-byte and 64-byte messages
    cpu_cols = f"{fmt(mib['rxe']) + '/' + fmt(mib['ferroce']):18} {fmt(msg['rxe']) + '/' + fmt(msg['ferroce']):18} {fmt(r['cpu_ratio']):>9}"
    print(f"{r['test']:{tw}} {r['unit']:6} {span('rxe'):26} {span('ferroce'):26} {fmt(r['ratio']):>7}  {cpu_cols}  {gs}")

for one in [r for r in rows if "vs_q1" in r and r["test"].startswith("msg_rate_64_q1") and r["test"][14:15] in ("", "_")]:
    suffix = one["test"][len("msg_rate_64_q1"):]
    qs = sorted((r for r in rows if "vs_q1" in r and r["test"].endswith(suffix)
                 and r["test"][len("msg_rate_64_q"):len(r["test"]) - len(suffix)].isdigit()),
                key=lambda r: int(r["test"][len("msg_rate_64_q"):len(r["test"]) - len(suffix)]))
    print(f"message rate against active QPs{' (' + suffix[1:] + ')' if suffix else ' (loopback)'}, Mpps, and the ratio to 1 QP (flat: 1.0):")
    for d in ("rxe", "ferroce"):
        cells = []
        for r in qs:
            q = r["test"][len("msg_rate_64_q"):len(r["test"]) - len(suffix)]
            nf = sum(v is None for v in r["runs"][d])
            cells.append(f"q{q} {fmt(r[d])}" + (f" ({fmt(r['vs_q1'][d])}x)" if q != "1" and r["vs_q1"][d] is not None else "")
                         + (f" {nf} failed" if nf else "") + ("" if r["runs"][d] else " not run"))
        print(f"  {d:8} " + ", ".join(cells))

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("matplotlib not available: no plot (tools/bench installs it into a venv in the cache)")
    sys.exit(0)
shown = [r for r in rows if r["ratio"] is not None]
names = [r["test"] for r in shown]
ratios = [r["ratio"] for r in shown]
colors = ["tab:green" if (r["better"] == "higher") == (r["ratio"] >= 1) else "tab:red" for r in shown]
fig, ax = plt.subplots(figsize=(9, 1.5 + 0.35 * max(len(shown), 1)))
bars = ax.barh(names, ratios, color=colors)
for b, r in zip(bars, shown):
    if r["test"].endswith("_2g"):
        b.set_hatch("//")  # across two guests
    elif r["test"].endswith("_veth"):
        b.set_hatch("..")  # through a veth pair
ax.invert_yaxis()  # the tests in the table's order
ax.axvline(1.0, color="black", linewidth=1)
ax.set_xscale("log")
ax.set_xlabel("ferroce / rdma_rxe (median of rounds; log scale). Green: ferroce better")
ax.set_title("ferroce vs rdma_rxe under QEMU TCG: loopback in one guest; _veth (dotted): across a veth pair; _2g (hatched): across two guests", fontsize=9)
for i, v in enumerate(ratios):
    ax.text(v, i, f" {v:.2f}x", va="center")
fig.tight_layout()
fig.savefig(outdir / "bench.png", dpi=110)
print(f"plot: {outdir / 'bench.png'}")
