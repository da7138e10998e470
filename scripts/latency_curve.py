#!/usr/bin/env python3
"""Latency against throughput: open-loop sweeps of rpc-bench, and their plot.

For each config (sync: one client thread on its own connection; async: one
client thread multiplexing calls on its connection), measures the
closed-loop maximum, then runs rpc-bench open-loop (-target_rate) at each
percentage of it in --points, and records the achieved rate with p50, p99
and p99.9 latency. With --before, every point is run with both binaries, the
earlier one first, so that one chart shows before and after from one
interleaved run. Writes RESULTS_DIR/curve.csv, plot-data/, curve.gp and,
with gnuplot, curve.png (log-scale latency).

Called by scripts/benchmarks.sh --curve (see its --help).
"""
import argparse
import csv
import json
import os
import shutil
import subprocess
import sys

TITLES = {"sync": "sync: 1 client thread, 1 call at a time",
          "async": "async: 1 client thread, 32 calls in flight"}
CONFIGS = {
    "sync": ["-mode", "sync", "-client_threads", "1", "-worker_threads", "1",
             "-server_reactors", "1"],
    "async": ["-mode", "async", "-client_threads", "1", "-async_call_concurrency", "32",
              "-worker_threads", "1", "-server_reactors", "1"],
}
# Open loop offers calls whatever is in flight: past the maximum they queue
# at the server, which is the latency the curve is to show, not refusals.
QUEUE = ["--rpc_service_queue_length", "100000"]
PERCENTILES = [("p50", "p50"), ("p99", "p99"), ("p99.9", "p999")]


def run(bench, flags, seconds):
    cmd = [bench] + flags + QUEUE + ["-run_seconds", str(seconds), "-output=json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + 4 * seconds)
    report = None
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            report = json.loads(line)
    # Exit status 1 with a report: some calls failed or were refused, which
    # the row records; anything else is a run that did not happen.
    if report is None or p.returncode not in (0, 1):
        sys.exit(f"latency_curve: {' '.join(cmd)} failed ({p.returncode}): {p.stderr[-500:]}")
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rpc-bench", required=True)
    ap.add_argument("--before", help="an earlier rpc-bench, measured beside it")
    ap.add_argument("--results-dir", required=True)
    ap.add_argument("--run-seconds", type=float, default=2.0)
    ap.add_argument("--points", default="10,25,50,75,90,100,110,120",
                    help="percentages of the closed-loop maximum")
    args = ap.parse_args()
    try:
        points = [float(p) for p in args.points.split(",") if p]
    except ValueError:
        sys.exit(f"latency_curve: --points must be numbers separated by commas: {args.points}")
    if not points or any(p <= 0 for p in points):
        sys.exit("latency_curve: --points must be positive percentages")
    benches = [("after" if args.before else "osprey", args.rpc_bench)]
    if args.before:
        benches.insert(0, ("before", args.before))
    for _, b in benches:
        if not os.access(b, os.X_OK):
            sys.exit(f"latency_curve: not an executable: {b}")
    os.makedirs(os.path.join(args.results_dir, "plot-data"), exist_ok=True)

    rows = []
    for cfg, flags in CONFIGS.items():
        closed = {}
        for label, bench in benches:
            r = run(bench, flags, args.run_seconds)
            closed[label] = r["reqs_per_sec"]
            print(f"{cfg} {label}: closed loop {closed[label]:.0f} calls/s", file=sys.stderr)
        # The sweep is relative to the fastest binary's maximum, so both
        # curves share their x values.
        top = max(closed.values())
        for pct in points:
            target = top * pct / 100
            for label, bench in benches:
                r = run(bench, flags + ["-target_rate", f"{target:.0f}"], args.run_seconds)
                lat = r["latency_us"]
                rows.append({"binary": label, "config": cfg, "percent": pct,
                             "target_rate": round(target), "achieved_rate": r["reqs_per_sec"],
                             "p50_us": lat["p50"], "p99_us": lat["p99"],
                             "p999_us": lat["p99.9"], "errors": r["errors"],
                             "refused": r.get("refused", 0)})
                print(f"{cfg} {label} {pct:g}%: {r['reqs_per_sec']:.0f} calls/s, "
                      f"p50 {lat['p50']:.0f} p99 {lat['p99']:.0f} p99.9 {lat['p99.9']:.0f} us",
                      file=sys.stderr)

    csv_path = os.path.join(args.results_dir, "curve.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    plots = []
    for cfg in CONFIGS:
        for label, _ in benches:
            dat = os.path.join(args.results_dir, "plot-data", f"{label}-{cfg}.dat")
            with open(dat, "w") as f:
                f.write("# achieved_rate p50_us p99_us p999_us\n")
                for r in rows:
                    if r["binary"] == label and r["config"] == cfg:
                        f.write(f"{r['achieved_rate']:.1f} {r['p50_us']} {r['p99_us']} "
                                f"{r['p999_us']}\n")
            plots.append((cfg, label, dat))
    gp = os.path.join(args.results_dir, "curve.gp")
    png = os.path.join(args.results_dir, "curve.png")
    with open(gp, "w") as f:
        f.write(f"set terminal pngcairo size 1400,560 noenhanced\nset output '{png}'\n")
        f.write("set multiplot layout 1,2\nset logscale y\nset grid\n")
        f.write("set xlabel 'achieved calls per second'\nset ylabel 'latency (us, log scale)'\n")
        f.write("set key top left\n")
        for cfg in CONFIGS:
            f.write(f"set title 'rpc-bench {TITLES[cfg]} (1 server reactor, 1 worker)'\n")
            series = []
            for c, label, dat in plots:
                if c != cfg:
                    continue
                for col, (name, _) in enumerate(PERCENTILES, start=2):
                    dash = {"before": 2, "after": 1, "osprey": 1}[label]
                    series.append(f"'{dat}' using 1:{col} with linespoints dashtype {dash} "
                                  f"linecolor {col - 1} title '{label} {name}'")
            f.write("plot " + ", \\\n     ".join(series) + "\n")
        f.write("unset multiplot\n")
    if shutil.which("gnuplot") is None:
        sys.exit("latency_curve: gnuplot not found (scripts/install-deps.sh installs it)")
    p = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"latency_curve: gnuplot failed: {p.stderr[-500:]}")
    print(f"latency_curve: {len(rows)} runs in {csv_path}, chart {png}")


if __name__ == "__main__":
    main()
