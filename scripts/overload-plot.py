#!/usr/bin/env python3
"""The overload benchmark's rows, summary and plots (scripts/benchmarks.sh --overload).

  overload-plot.py row --csv FILE [--series FILE] KEY=VALUE...
      reads one rpc-bench -rate_schedule -output=json report on stdin and
      appends its row to the CSV (the header first if the file is new);
      with --series, writes its per-window time series there.
  overload-plot.py capacity
      reads a closed-loop or -rate_schedule -output=json report on stdin,
      prints its goodput (calls answered (in time) per second; 0 if none).
  overload-plot.py received HOST:PORT
      prints the calls the server at HOST:PORT has received so far (the sum
      of osprey_server_calls_received_total on its /metrics), or "-" if it
      serves no such page (Kudu's server, metrics off, a refused request).
  overload-plot.py summarize DIR
      reads DIR/overload.csv and DIR/burst-*.csv, writes
      DIR/overload-summary.md, DIR/overload-plots.gp and its data in
      DIR/overload-plot-data/ (gnuplot draws the PNGs from it). Rows with
      server=defaults (defaults-server's cells) get a table of their own and
      their own lines in the goodput charts.

Server CPU per call not served is an estimate: (server CPU over the cell,
from /proc/PID/stat) minus (answered calls x handler CPU), over (refused +
timed-out calls). It charges the work of calls that ran but answered too
late to the calls not served, and counts the handler's CPU only for a
handler that burns it (rpc-bench -handler=burn); for a sleeping handler the
handler CPU is 0.

Calls sent to the server: attempts_sent is the client's count, the sum of
RpcController::attempts_sent() over the calls that ended (first attempts and
retries handed to a connection; a call refused by the client's adaptive
throttling sent none, and counts in `throttled`); sent_over_offered is it
over the calls offered. server_received is the server's own count over the
cell (its /metrics before and after), when it has one: it also counts the
client's probe and one call per client messenger made before the schedule.
client_flags is CLIENT_FLAGS (-retry_attempts, -retry_budget,
-client_throttling, ...).
"""
import csv
import glob
import json
import os
import sys

HEADER = ["timestamp", "handler_us", "deadline_ms", "queue_length", "server_flags", "capacity",
          "load", "offered_per_sec", "goodput_per_sec", "refusals_per_sec", "timeouts_per_sec",
          "late_per_sec", "offered", "goodput", "refused", "timeouts", "late", "errors",
          "unfinished", "p50_us", "p99_us", "p999_us", "refusal_p50_us", "refusal_p99_us",
          "behind_windows", "schedule_windows", "max_start_lag_us", "server_cpu_s",
          "server_cpu_us_per_unserved", "server_peak_rss_kb", "valid",
          # Retries and client throttling (appended: the columns above keep
          # their places).
          "client_flags", "attempts_sent", "sent_over_offered", "throttled", "server_received",
          # Which server (rpc-bench, or defaults: defaults-server, the public
          # API's defaults), and the refusals by the reason the server gave.
          "server", "refused_by_reason"]
SERIES = ["t_s", "offered", "sent", "goodput", "refused", "timeouts", "late", "errors",
          "behind"]
SERIES_LATER = ["throttled", "attempts_sent"]  # after the per-second columns; may be absent


def read_report(text):
    """The last JSON object line of rpc-bench's stdout, or None."""
    report = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                report = json.loads(line)
            except ValueError:
                pass
    return report


def fmt(v):
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def cmd_row(args):
    csv_path, series_path, kv = None, None, {}
    i = 0
    while i < len(args):
        if args[i] == "--csv":
            csv_path = args[i + 1]
            i += 2
        elif args[i] == "--series":
            series_path = args[i + 1]
            i += 2
        else:
            k, _, v = args[i].partition("=")
            kv[k] = v
            i += 1
    if csv_path is None:
        sys.exit("overload-plot.py row: --csv FILE is needed")
    r = read_report(sys.stdin.read())
    row = {k: "" for k in HEADER}
    for k in ("timestamp", "handler_us", "deadline_ms", "queue_length", "server_flags",
              "capacity", "load", "server_peak_rss_kb", "client_flags"):
        row[k] = kv.get(k, "")
    row["server"] = kv.get("server", "rpc-bench")
    before, after = kv.get("server_received_before", "-"), kv.get("server_received_after", "-")
    if num(before) is not None and num(after) is not None:
        row["server_received"] = fmt(int(num(after) - num(before)))
    if r is None or r.get("mode") != "overload":
        row["valid"] = "run_failed"
    else:
        reasons = r.get("refused_by_reason") or {}
        row["refused_by_reason"] = ";".join(f"{k}:{v}" for k, v in reasons.items() if v)
        for k in ("offered_per_sec", "goodput_per_sec", "refusals_per_sec", "timeouts_per_sec",
                  "late_per_sec", "offered", "goodput", "refused", "timeouts", "late", "errors",
                  "unfinished", "behind_windows", "max_start_lag_us"):
            row[k] = fmt(r[k])
        lat, ref = r["latency_us"], r["refusal_latency_us"]
        row["p50_us"], row["p99_us"], row["p999_us"] = lat["p50"], lat["p99"], lat["p99.9"]
        row["refusal_p50_us"], row["refusal_p99_us"] = ref["p50"], ref["p99"]
        cpu_ticks = kv.get("server_cpu_ticks", "")
        if cpu_ticks not in ("", "-"):
            cpu_s = float(cpu_ticks) / float(kv.get("clk_tck", "100"))
            row["server_cpu_s"] = fmt(cpu_s)
            unserved = r["refused"] + r["timeouts"]
            served = r["goodput"] + r["late"]
            handler_cpu_s = served * float(kv.get("handler_cpu_us", "0")) / 1e6
            if unserved > 0:
                row["server_cpu_us_per_unserved"] = fmt(
                    max(cpu_s - handler_cpu_s, 0.0) * 1e6 / unserved)
        if "attempts_sent" in r:
            row["attempts_sent"] = r["attempts_sent"]
            row["throttled"] = r["throttled"]
            if r["offered"]:
                row["sent_over_offered"] = f"{r['attempts_sent'] / r['offered']:.4f}"
        ok = not r["behind"] and r["errors"] == 0 and r["unfinished"] == 0
        row["valid"] = "yes" if ok else "no"
        row["schedule_windows"] = r["windows"]["schedule_windows"]
        if series_path:
            w = r["windows"]
            with open(series_path, "w", newline="") as f:
                out = csv.writer(f)
                later = [k for k in SERIES_LATER if k in w]
                out.writerow(SERIES + ["goodput_per_sec", "offered_per_sec"] + later)
                secs = r["window_ms"] / 1000.0
                for i in range(w["count"]):
                    vals = [w[k][i] for k in SERIES]
                    out.writerow(vals + [fmt(w["goodput"][i] / secs),
                                         fmt(w["offered"][i] / secs)] +
                                 [w[k][i] for k in later])
    new = not os.path.exists(csv_path) or os.path.getsize(csv_path) == 0
    with open(csv_path, "a", newline="") as f:
        out = csv.DictWriter(f, fieldnames=HEADER)
        if new:
            out.writeheader()
        out.writerow(row)
    print(row["valid"])


def cmd_capacity():
    r = read_report(sys.stdin.read())
    if r and r.get("mode") == "overload":
        print(fmt(float(r["goodput_per_sec"])))
    else:
        print(fmt(float(r["reqs_per_sec"])) if r and "reqs_per_sec" in r else "0")


def cmd_received(address):
    import urllib.request
    total = None
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=3) as resp:
            for line in resp.read().decode("utf-8", "replace").splitlines():
                if line.startswith("osprey_server_calls_received_total"):
                    total = (total or 0) + float(line.rsplit(" ", 1)[1])
    except Exception:  # no such page: Kudu's server, metrics off, a refusal
        total = None
    print("-" if total is None else fmt(int(total)))


def num(s, default=None):
    try:
        return float(s)
    except (TypeError, ValueError):
        return default


def is_defaults(r):
    return r.get("server") == "defaults"


def defaults_table(rows):
    """defaults-server's cells: a table of their own, with the reasons."""
    lines = ["", "## The public API's defaults (defaults-server)", "",
             "rpc-bench's service on a server built with MessengerBuilder's and "
             "ServicePoolOptions' defaults but for the queue length (4 reactors, 1 worker, "
             "overload control on), pinned to CPU 0 as the server above; C as above. "
             "Refused by reason: the server's reason for each refusal, as a share of "
             "the calls offered.", "",
             "| handler | deadline | queue | offered/C | goodput/C | refused | by reason | "
             "timed out | late | p99 ms | p99/deadline | valid |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cap = num(r["capacity"], 0)
        offered = num(r["offered"], 0)
        deadline_us = num(r["deadline_ms"], 1) * 1000

        def share(v):
            return f"{v / offered:.1%}" if v is not None and offered else "-"
        by = []
        for part in (r.get("refused_by_reason") or "").split(";"):
            k, _, v = part.partition(":")
            if k and num(v):
                by.append(f"{k.replace('_', ' ')} {share(num(v))}")
        p99 = num(r["p99_us"])
        lines.append("| " + " | ".join([
            f"{r['handler_us']} us", f"{r['deadline_ms']} ms", r["queue_length"],
            f"{num(r['offered_per_sec'], 0) / cap:.2f}" if cap else "-",
            f"{num(r['goodput_per_sec'], 0) / cap:.2f}" if cap and r["goodput_per_sec"] else "-",
            share(num(r["refused"])), ", ".join(by) or "-", share(num(r["timeouts"])),
            share(num(r["late"])), f"{p99 / 1000:.1f}" if p99 is not None else "-",
            f"{p99 / deadline_us:.2f}" if p99 is not None else "-", r["valid"]]) + " |")
    return lines


def cmd_summarize(out_dir):
    all_rows = list(csv.DictReader(open(os.path.join(out_dir, "overload.csv"))))
    rows = [r for r in all_rows if not is_defaults(r)]
    drows = [r for r in all_rows if is_defaults(r)]
    lines = ["# Overload benchmark", ""]
    caps = {}
    for r in rows:
        caps.setdefault((r["handler_us"], r["deadline_ms"]), r["capacity"])
    lines.append("Capacity C (calls answered per second, the larger of a closed loop and an "
                 "open loop at twice its rate): " + ", ".join(
        f"{h} us handler: {float(c):.0f}/s" for (h, _), c in caps.items() if num(c)))
    flags = sorted({r["server_flags"] for r in rows})
    lines.append("Server flags: " + (", ".join(f"`{f}`" for f in flags if f) or "(defaults)"))
    # Retries and throttling, when the rows have them (older CSVs do not).
    retries = any(r.get("attempts_sent") for r in rows)
    lines += ["",
              "Shares are of the calls offered; p99 is of answered calls, from the scheduled "
              "start; server CPU per call not served is an estimate (see "
              "scripts/overload-plot.py), shown where at least 5% of the calls were refused "
              "or timed out (overload.csv has it always); peak RSS is the server process's VmHWM so far. "
              "A cell is valid when the client kept to its schedule (no call started later "
              "than -max_start_lag_us, default 1 ms, after its time: else its window is "
              "behind) and no call failed otherwise." + (
                  " Sent/offered: attempts the client sent (first attempts and retries) over "
                  "the calls offered; server received/offered: the server's own count over "
                  "the cell (it also has the 3 or so calls made before the schedule); "
                  "throttled: the share refused by the client's adaptive throttling, never "
                  "sent." if retries else ""), ""]
    cols = ["handler", "deadline", "queue", "offered/C", "goodput/C", "refused", "timed out",
            "late", "p99/deadline", "server CPU us per unserved", "peak RSS MB", "valid",
            "windows behind (max start lag)"]
    if retries:
        cols += ["client flags", "sent/offered", "server received/offered", "throttled"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "|".join("---" for _ in cols) + "|")
    for r in rows:
        cap = num(r["capacity"], 0)
        offered = num(r["offered"], 0)
        deadline_us = num(r["deadline_ms"], 1) * 1000

        def share(k):
            v = num(r[k])
            return f"{v / offered:.1%}" if v is not None and offered else "-"
        load = r["load"] if r["load"] == "burst" else (
            f"{num(r['offered_per_sec'], 0) / cap:.2f}" if cap else "-")
        good = f"{num(r['goodput_per_sec'], 0) / cap:.2f}" if cap and r["goodput_per_sec"] else "-"
        p99 = num(r["p99_us"])
        cpu = num(r["server_cpu_us_per_unserved"])
        unserved = num(r["refused"], 0) + num(r["timeouts"], 0)
        if cpu is not None and offered and unserved < 0.05 * offered:
            cpu = None  # few calls not served: the estimate charges them everything
        rss = num(r["server_peak_rss_kb"])
        lines.append("| " + " | ".join([
            f"{r['handler_us']} us", f"{r['deadline_ms']} ms", r["queue_length"], load, good,
            share("refused"), share("timeouts"), share("late"),
            f"{p99 / deadline_us:.2f}" if p99 is not None else "-",
            f"{cpu:.1f}" if cpu is not None else "-",
            f"{rss / 1024:.1f}" if rss is not None else "-", r["valid"],
            f"{r['behind_windows']}/{r['schedule_windows']} ({num(r['max_start_lag_us'], 0) / 1000:.1f} ms)"
            if r["behind_windows"] else "-"] + ([
                f"`{r['client_flags']}`" if r.get("client_flags") else "-",
                f"{num(r['attempts_sent'], 0) / offered:.3f}"
                if offered and r.get("attempts_sent") else "-",
                f"{num(r['server_received'], 0) / offered:.3f}"
                if offered and r.get("server_received") else "-",
                share("throttled") if r.get("throttled") not in (None, "") else "-"]
                if retries else [])) + " |")

    if drows:
        lines += defaults_table(drows)

    # Bursts: goodput in the overload phase, and the recovery after it.
    bursts = sorted(glob.glob(os.path.join(out_dir, "burst-*.csv")))
    if bursts:
        lines += ["", "## Burst (goodput per 100 ms window)", "",
                  "| series | mean goodput/C in the high phase | windows behind | "
                  "recovery after the high phase |", "|---|---|---|---|"]
    data_dir = os.path.join(out_dir, "overload-plot-data")
    os.makedirs(data_dir, exist_ok=True)
    for f in os.listdir(data_dir):
        os.remove(os.path.join(data_dir, f))
    burst_series = []
    burst_cap = None
    for path in bursts:
        name = os.path.basename(path)[len("burst-"):-len(".csv")]
        b = list(csv.DictReader(open(path)))
        meta = next((r for r in rows if r["load"] == "burst" and
                     name == f"q{r['queue_length']}"), None)
        cap = num(meta["capacity"], 0) if meta else 0
        burst_cap = burst_cap or cap
        phases = [p.split(":") for p in os.environ.get("BURST_PHASES", "").split(",") if p]
        high = ""
        recovery = "-"
        if len(phases) >= 2:
            t1 = float(phases[0][0])
            t2 = t1 + float(phases[1][0])
            hi = [num(w["goodput_per_sec"], 0) for w in b if t1 <= num(w["t_s"]) < t2]
            if hi and cap:
                high = f"{sum(hi) / len(hi) / cap:.2f}"
            for w in b:
                t = num(w["t_s"])
                if t >= t2 and num(w["offered"], 0) > 0 and \
                        num(w["goodput"], 0) >= 0.9 * num(w["offered"], 0):
                    recovery = f"{t - t2:.1f} s"
                    break
            else:
                recovery = "not within the run"
        behind = sum(1 for w in b if w["behind"] not in ("0", ""))
        lines.append(f"| {name} | {high or '-'} | {behind} | {recovery} |")
        dat = os.path.join(data_dir, f"burst-{name}.dat")
        with open(dat, "w") as f:
            f.write("# t_s goodput_per_sec offered_per_sec\n")
            for w in b:
                f.write(f"{w['t_s']} {w['goodput_per_sec']} {w['offered_per_sec']}\n")
        burst_series.append((dat, name))
    with open(os.path.join(out_dir, "overload-summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    # Goodput against offered load, one chart per handler, one line per queue.
    gp = ["set datafile commentschars '#'", "set grid", "set key below font ',9'",
          "set terminal pngcairo size 900,560 noenhanced"]
    charts = {}
    for r in all_rows:
        if r["load"] == "burst" or r["valid"] == "run_failed":
            continue
        cap = num(r["capacity"], 0)
        if not cap:
            continue
        key = (r["handler_us"], r["deadline_ms"])
        series_name = ("defaults " if is_defaults(r) else "") + r["queue_length"]
        charts.setdefault(key, {}).setdefault(series_name, []).append(
            (num(r["offered_per_sec"], 0) / cap, num(r["goodput_per_sec"], 0) / cap,
             r["valid"]))
    pngs = []
    for (h, d), series in charts.items():
        items = []
        for q, pts in sorted(series.items(),
                             key=lambda kv: (kv[0].startswith("defaults"),
                                             num(kv[0].split()[-1], 0))):
            dat = os.path.join(data_dir, f"goodput-h{h}-q{q.replace(' ', '-')}.dat")
            with open(dat, "w") as f:
                f.write("# offered/C goodput/C valid\n")
                for x, y, v in sorted(pts):
                    f.write(f"{x:.4f} {y:.4f} {1 if v == 'yes' else 0}\n")
            items.append(f"'{dat}' using 1:2 with linespoints pointtype 7 "
                         f"title '{'defaults-server, ' if q.startswith('defaults') else ''}"
                         f"queue {q.split()[-1]}'")
        items.append("(x < 1 ? x : 1) with lines dashtype 2 linecolor rgb 'gray' "
                     "title 'ideal: min(offered, C)'")
        png = os.path.join(out_dir, f"overload-goodput-h{h}.png")
        pngs.append(png)
        gp += [f"set output '{png}'",
               f"set title 'goodput against offered load: {h} us handler, {d} ms deadline'",
               "set xlabel 'offered load / C'", "set ylabel 'goodput / C'",
               "set xrange [0:*]", "set yrange [0:*]",
               "plot " + ", \\\n     ".join(items), "set output"]
    if burst_series:
        png = os.path.join(out_dir, "overload-burst.png")
        pngs.append(png)
        items = [f"'{dat}' using 1:2 with lines linewidth 2 title 'goodput, {name}'"
                 for dat, name in burst_series]
        items.append(f"'{burst_series[0][0]}' using 1:3 with lines dashtype 2 linecolor "
                     "rgb 'gray' title 'offered'")
        gp += [f"set output '{png}'", "set title 'goodput through the burst (100 ms windows)'",
               "set xlabel 'seconds'", "set ylabel 'calls per second'",
               "set xrange [0:*]", "set yrange [0:*]",
               "plot " + ", \\\n     ".join(items), "set output"]
    with open(os.path.join(out_dir, "overload-plots.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    with open(os.path.join(out_dir, "overload-pngs.txt"), "w") as f:
        f.write("\n".join(pngs) + "\n")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd = sys.argv[1]
    if cmd == "row":
        cmd_row(sys.argv[2:])
    elif cmd == "capacity":
        cmd_capacity()
    elif cmd == "received" and len(sys.argv) == 3:
        cmd_received(sys.argv[2])
    elif cmd == "summarize" and len(sys.argv) == 3:
        cmd_summarize(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
