#!/usr/bin/env python3
"""scripts/benchmarks.sh --fleet: one service on 3 rpc-bench -server_only
processes on loopback, driven by one open-loop rpc-bench client whose
-server_address names the 3 (issue 49).

Run 1, a rolling restart: each server is drained with SIGTERM and started
again on its address, GAP seconds apart, while the client offers RATE calls/s
(-lb=p2c). Run 2, a slow server: the third server's Sleep takes 10x as long
(-handler_factor 10); the client runs once with -lb=p2c, once with
-lb=round_robin and once with -lb=p2c -hedge=p95 (hedged calls, issue 50). Writes CSVs of calls answered per server per 100 ms window
and of latency per window, a summary, and gnuplot plots. Ends only the
processes it started, by PID.
"""
import argparse
import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

WINDOW_MS = 100


def die(msg):
    print(f"benchmarks.sh --fleet: {msg}", file=sys.stderr)
    sys.exit(2)


class Fleet:
    """The -server_only processes this script started, by PID."""

    def __init__(self, bench, out_dir, pin, handler, brpc=False):
        self.bench, self.out_dir, self.pin, self.handler = bench, out_dir, pin, handler
        # brpc: bench/brpc-overload's server (its flags, "LISTENING HOST:PORT").
        self.brpc = brpc
        self.procs = {}  # index -> Popen
        self.addrs = {}  # index -> "127.0.0.1:PORT"
        self.starts = {}  # index -> how many times started

    def start(self, i, factor=1, register=None):
        n = self.starts.get(i, 0) + 1
        self.starts[i] = n
        base = os.path.join(self.out_dir, f"{'brpc-' if self.brpc else ''}server{i}-{n}")
        listen = self.addrs.get(i, "127.0.0.1:0")
        cmd = self.pin + [self.bench, "-server_only", "-listen", listen, "-server_reactors", "1",
                          "-worker_threads", "4", "-handler=" + self.handler,
                          "-handler_factor", str(factor)]
        if not self.brpc:
            cmd += ["-drain_grace_ms", "5000"]
        if register:
            cmd += ["-register_at", register]
        out = open(base + ".out", "w")
        err = open(base + ".err", "w")
        p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        self.procs[i] = p
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = re.search(r"^(?:Listening on|LISTENING) (\S+)$", open(base + ".out").read(), re.M)
            if m:
                self.addrs[i] = m.group(1)
                return
            if p.poll() is not None:
                break
            time.sleep(0.02)
        self.stop_all(kill=True)
        die(f"server {i} did not start on {listen}; see {base}.err")

    def drain(self, i):
        """SIGTERM, then waits (10 s at most) for it to drain and exit."""
        p = self.procs.pop(i)
        p.send_signal(signal.SIGTERM)
        try:
            return p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return "killed"

    def stop_all(self, kill=False):
        for i in list(self.procs):
            if kill:
                self.procs[i].kill()
                self.procs.pop(i).wait()
            else:
                self.drain(i)

    def target(self):
        return self.registry or ",".join(self.addrs[i] for i in sorted(self.addrs))

    registry = None  # an etcd:// target the client uses instead of the list


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_etcd(out_dir):
    """Debian's etcd on two free loopback ports, data in out_dir; returns
    (process, "127.0.0.1:PORT") once it answers, or (None, why)."""
    binary = "/usr/bin/etcd"
    if not os.access(binary, os.X_OK):
        return None, "no /usr/bin/etcd (apt-get install -y etcd-server)"
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    log = open(os.path.join(out_dir, "etcd.log"), "w")
    p = subprocess.Popen([binary, "--name", "fleet", "--data-dir", os.path.join(out_dir, "etcd"),
                          "--listen-client-urls", client, "--advertise-client-urls", client,
                          "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                          "--initial-cluster", "fleet=" + peer],
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(client + "/health", timeout=0.5) as r:
                if b'"true"' in r.read():
                    return p, client[len("http://"):]
        except OSError:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    p.wait()
    return None, "etcd did not start; see " + os.path.join(out_dir, "etcd.log")


def run_client(args, fleet, lb, seconds, name, pin, during=None, hedge="off"):
    """The open-loop client for `seconds`; `during(t0)` runs meanwhile (the
    restarts). Returns its JSON report, or None if it failed. With a brpc
    fleet, brpc's client: `lb` is brpc's balancer and `hedge` its
    backup_request_ms ("off": none)."""
    if fleet.brpc:
        cmd = pin + [fleet.bench, "-server_address", fleet.target(), "-lb=" + lb,
                     "-backup_request_ms", "0" if hedge == "off" else hedge]
    else:
        cmd = pin + [args.rpc_bench, "-server_address", fleet.target(), "-lb=" + lb,
                     "-hedge=" + hedge]
    cmd += ["-rate_schedule", f"{seconds}:{args.rate}", "-handler_us", str(args.handler_us),
                 "-call_timeout_ms", "2000", "-window_ms", str(WINDOW_MS),
                 "-max_start_lag_us", "100000", "-output=json"]
    base = os.path.join(args.results_dir, "fleet-raw", name)
    with open(base + ".json", "w") as out, open(base + ".err", "w") as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        events = during(t0) if during else []
        try:
            rc = p.wait(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = "timeout"
    try:
        report = json.load(open(base + ".json"))
    except (OSError, ValueError):
        print(f"benchmarks.sh --fleet: {name}: no report (exit {rc}); see {base}.err",
              file=sys.stderr)
        return None, events
    report["exit"] = rc
    return report, events


def failed(r):
    return r["errors"] + r["timeouts"] + r["refused"] + r["late"] + r.get("unfinished", 0)


def write_windows(path, r, extra=None):
    """t_s, then calls answered by each server, then failures and latency."""
    w = r["windows"]
    servers = list(w["answered_by_server"])
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["t_s"] + servers + ["failed", "latency_mean_us", "latency_max_us"])
        for k in range(w["count"]):
            fails = w["errors"][k] + w["timeouts"][k] + w["refused"][k] + w["late"][k]
            out.writerow([w["t_s"][k]] + [w["answered_by_server"][s][k] for s in servers] +
                         [fails, w["latency_mean_us"][k], w["latency_max_us"][k]])
    return servers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rpc-bench", required=True)
    ap.add_argument("--results-dir", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    env = os.environ.get
    quick = args.quick or env("FLEET_QUICK", "0") == "1"
    # Quick: 5 s, so that the last of the restarts 1 s apart (at 3 s, back
    # about 0.3 s later, 0.6 s under TSan) still leaves a second in which the
    # check can see it answer (benchmarks-test.sh); 4 s left 0.2 s, and
    # under TSan that was sometimes too short.
    # Quick: 6 s, so that the last restart (at about 3.4 s) leaves 2.5 s,
    # more than a connect refused in the restart's gap ejects a server for
    # (the base ejection, 1 s): with 5 s, one CI run's restarted server
    # answered nothing in the 1.1 s left to check.
    args.seconds = float(env("FLEET_SECONDS", "6" if quick else "20"))
    args.gap = float(env("FLEET_GAP", "1" if quick else "4"))
    args.slow_seconds = float(env("FLEET_SLOW_SECONDS", "2" if quick else "10"))
    args.rate = float(env("FLEET_RATE", "300" if quick else "1500"))
    args.handler_us = int(env("FLEET_HANDLER_US", "200"))
    args.backup_ms = int(env("FLEET_BACKUP_MS", "1"))
    if not 1 <= args.backup_ms <= 1000:
        die(f"FLEET_BACKUP_MS must be from 1 to 1000, got {args.backup_ms}")
    for name in ("seconds", "gap", "slow_seconds", "rate"):
        v = getattr(args, name)
        if not 0 < v <= 3600:
            die(f"{name} must be above 0 and at most 3600, got {v}")
    if not 0 <= args.handler_us <= 100000:
        die(f"FLEET_HANDLER_US must be from 0 to 100000, got {args.handler_us}")
    if 3 * args.gap >= args.seconds:
        die(f"3 restarts {args.gap} s apart do not fit in {args.seconds} s")
    os.makedirs(os.path.join(args.results_dir, "fleet-raw"), exist_ok=True)
    srv_dir = os.path.join(args.results_dir, "fleet-servers")
    os.makedirs(srv_dir, exist_ok=True)

    # Pinned as --overload pins: the servers on CPU 0, the client on CPU 1.
    server_pin, client_pin = [], []
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        server_pin, client_pin = ["taskset", "-c", "0"], ["taskset", "-c", "1"]
        print("benchmarks.sh --fleet: servers on CPU 0, client on CPU 1 (taskset)", file=sys.stderr)
    else:
        print("benchmarks.sh --fleet: NOT pinning (no taskset or one CPU)", file=sys.stderr)

    # Sleep sleeps on the servers: 3 servers share one CPU, so a burning
    # handler would measure the CPU, not the balancing.
    fleet = Fleet(args.rpc_bench, srv_dir, server_pin, "sleep")
    # brpc's side of the slow-server run: bench/brpc-overload's binary, as
    # scripts/overload-peers.sh takes it.
    brpc_bench = env("BRPC_OVERLOAD_BENCH", "")
    if brpc_bench and not os.access(brpc_bench, os.X_OK):
        die(f"BRPC_OVERLOAD_BENCH={brpc_bench} is not an executable")
    if not brpc_bench:
        print("benchmarks.sh --fleet: SKIPPING brpc's slow-server runs: BRPC_OVERLOAD_BENCH is "
              "not set (bench/brpc-overload/build.sh builds it)", file=sys.stderr)
    slow_addr = {}  # run -> the slow server's address
    ok = True
    r3, reg_events = None, []
    try:
        # ---------------------------------------------- run 1: rolling restart
        for i in range(3):
            fleet.start(i)

        def restarts(t0):
            events = []
            for i in range(3):
                at = t0 + args.gap * (i + 1)
                time.sleep(max(0.0, at - time.monotonic()))
                t_term = time.monotonic() - t0
                rc = fleet.drain(i)
                t_exit = time.monotonic() - t0
                fleet.start(i)
                events.append({"server": fleet.addrs[i], "sigterm_s": round(t_term, 3),
                               "exited_s": round(t_exit, 3), "exit": rc,
                               "restarted_s": round(time.monotonic() - t0, 3)})
            return events

        r1, events = run_client(args, fleet, "p2c", args.seconds, "rolling-restart", client_pin,
                                restarts)
        with open(os.path.join(args.results_dir, "fleet-restarts.csv"), "w", newline="") as f:
            out = csv.DictWriter(f, ["server", "sigterm_s", "exited_s", "exit", "restarted_s"])
            out.writeheader()
            out.writerows(events)
        fleet.stop_all()
        ok = ok and r1 is not None and all(e["exit"] == 0 for e in events)

        # ------------------------------------------------ run 2: a slow server
        def slow_runs(f, healthy, runs):
            """On fleet `f`: the `healthy` run (a name, or None) with three
            like servers, then `runs` (name, lb, hedge) with the third 10x
            slower. Fills `slow` and `slow_addr`; returns whether all ran."""
            good = True
            f.addrs.clear()
            if healthy:
                runs = [(healthy, runs[0][1], "off", 1)] + [r + (10,) for r in runs]
            else:
                runs = [r + (10,) for r in runs]
            for k, (name, lb, hedge, factor) in enumerate(runs):
                if k == 0 or runs[k - 1][3] != factor:
                    f.stop_all()
                    f.start(0)
                    f.start(1)
                    f.start(2, factor=factor)
                slow[name], _ = run_client(args, f, lb, args.slow_seconds, f"slow-{name}",
                                           client_pin, hedge=hedge)
                good = good and slow[name] is not None
                slow_addr[name] = f.addrs[2]
            f.stop_all()
            return good

        slow = {}
        # Each run is named by its -lb, and "p2c-hedge" for p2c with -hedge=p95.
        runs = [("p2c", "p2c", "off"), ("round_robin", "round_robin", "off"),
                ("p2c-hedge", "p2c", "p95")]
        if brpc_bench:
            # brpc's backup requests wait a fixed delay: Osprey's hedging at
            # the same delay, for a like-for-like row. And each stack's fleet
            # with no slow server first: the p99 its hedging aims at.
            runs.append((f"p2c-hedge-{args.backup_ms}ms", "p2c", str(args.backup_ms)))
        ok = slow_runs(fleet, "p2c-healthy" if brpc_bench else None, runs) and ok

        # ------------- run 2, again with brpc's servers and client (issue 50)
        if brpc_bench:
            bfleet = Fleet(brpc_bench, srv_dir, server_pin, "sleep", brpc=True)
            try:
                ok = slow_runs(bfleet, "brpc-la-healthy",
                               [("brpc-la", "la", "off"), ("brpc-rr", "rr", "off"),
                                (f"brpc-la-backup-{args.backup_ms}ms", "la",
                                 str(args.backup_ms))]) and ok
            finally:
                bfleet.stop_all(kill=True)

        # ------------------------- run 3: found through etcd (issue 50)
        # 3 servers registered under a prefix; the client's target is the
        # prefix. A 4th registers a quarter of the way in, server 0 drains
        # (withdrawing its key first) half way.
        etcd, where = start_etcd(srv_dir)
        if etcd is None:
            print(f"benchmarks.sh --fleet: registry run skipped: {where}", file=sys.stderr)
        else:
            try:
                register = f"etcd://{where}/fleet"
                fleet.addrs.clear()
                for i in range(3):
                    fleet.start(i, register=register)
                fleet.registry = register

                def joins(t0):
                    events = []
                    time.sleep(max(0.0, t0 + args.seconds / 4 - time.monotonic()))
                    fleet.start(3, register=register)
                    events.append({"server": fleet.addrs[3], "event": "registered",
                                   "at_s": round(time.monotonic() - t0, 3)})
                    time.sleep(max(0.0, t0 + args.seconds / 2 - time.monotonic()))
                    at = round(time.monotonic() - t0, 3)
                    rc = fleet.drain(0)
                    events.append({"server": fleet.addrs[0], "event": f"drained (exit {rc})",
                                   "at_s": at})
                    return events

                r3, reg_events = run_client(args, fleet, "p2c", args.seconds, "registry",
                                            client_pin, joins)
                ok = ok and r3 is not None and all(
                    "exit 0" in e["event"] for e in reg_events if e["event"].startswith("drained"))
                fleet.stop_all()
            finally:
                fleet.registry = None
                fleet.stop_all(kill=True)
                etcd.terminate()
                try:
                    etcd.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    etcd.kill()
                    etcd.wait()
    finally:
        fleet.stop_all(kill=True)

    # ---------------------------------------------------------- CSVs, summary
    d = args.results_dir
    lines = ["# Fleet: 3 rpc-bench -server_only processes, one open-loop client", ""]
    restart_servers = []
    if r1 is not None:
        restart_servers = write_windows(os.path.join(d, "fleet-restart.csv"), r1)
        lines += [f"Rolling restart: {args.rate:g} calls/s of Sleep({args.handler_us}us) for "
                  f"{args.seconds:g} s, -lb=p2c; each server drained (SIGTERM) and restarted "
                  f"{args.gap:g} s apart (fleet-restarts.csv)", "",
                  "| calls | answered | failed (errors, timeouts, refused, late) | p50 us | p99 us "
                  "| max us |", "|---|---|---|---|---|---|",
                  f"| {r1['offered']} | {r1['goodput']} | {failed(r1)} ({r1['errors']}, "
                  f"{r1['timeouts']}, {r1['refused']}, {r1['late']}) | "
                  f"{r1['latency_us']['p50']} | {r1['latency_us']['p99']} | "
                  f"{r1['latency_us']['max']} |", ""]
        for e in events:
            lines.append(f"- {e['server']}: SIGTERM at {e['sigterm_s']} s, exited {e['exit']} "
                         f"at {e['exited_s']} s, serving again at {e['restarted_s']} s")
        lines.append("")
    slow_servers = {}
    for lb, r in slow.items():
        if r is None:
            continue
        slow_servers[lb] = write_windows(os.path.join(d, f"fleet-slow-{lb}.csv"), r)
    if slow:
        lines += [f"A slow server (the third: Sleep takes 10x), {args.rate:g} calls/s for "
                  f"{args.slow_seconds:g} s each; runs named brpc-* are brpc's servers and "
                  "client (bench/brpc-overload), its -lb and backup requests; *-healthy runs "
                  "have no slow server (the same three processes, the third at 1x)", "",
                  "| run | answered | failed | slow server's share | hedges sent (won) | p50 us "
                  "| p99 us | p99.9 us |",
                  "|---|---|---|---|---|---|---|---|"]
        with open(os.path.join(d, "fleet-slow-runs.csv"), "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["run", "answered", "failed", "slow_share", "hedges", "p50_us", "p99_us",
                          "p99.9_us"])
            for lb, r in slow.items():
                if r is None:
                    lines.append(f"| {lb} | run failed | | | | | | |")
                    continue
                by = {s: sum(v) for s, v in r["windows"]["answered_by_server"].items()}
                share = by.get(slow_addr[lb], 0) / max(1, sum(by.values()))
                lat = r["latency_us"]
                h = r.get("hedges")
                sent = h["sent"] if h else r.get("backup_requests_sent", 0)
                hedges = f"{h['sent']} ({h['won']})" if h else (
                    f"{sent} backup" if "backup_requests_sent" in r else "")
                lines.append(f"| {lb} | {r['goodput']} | {failed(r)} | {share:.1%} | {hedges} | "
                             f"{lat['p50']} | {lat['p99']} | {lat['p99.9']} |")
                out.writerow([lb, r["goodput"], failed(r), f"{share:.4f}", sent, lat["p50"],
                              lat["p99"], lat["p99.9"]])
        lines.append("")
    if r3 is not None:
        write_windows(os.path.join(d, "fleet-registry.csv"), r3)
        by = {s: sum(v) for s, v in r3["windows"]["answered_by_server"].items()}
        lines += [f"Found through etcd: {args.rate:g} calls/s for {args.seconds:g} s on "
                  "etcd://.../fleet, -lb=p2c; 3 servers registered, a 4th registers at a quarter "
                  "of the run, server 0 drains at half (fleet-registry.csv)", "",
                  "| calls | answered | failed | p99 us | answered per server |",
                  "|---|---|---|---|---|",
                  f"| {r3['offered']} | {r3['goodput']} | {failed(r3)} | "
                  f"{r3['latency_us']['p99']} | "
                  + ", ".join(f"{s}: {n}" for s, n in sorted(by.items())) + " |", ""]
        for e in reg_events:
            lines.append(f"- {e['server']}: {e['event']} at {e['at_s']} s")
        lines.append("")
    summary = "\n".join(lines)
    open(os.path.join(d, "fleet-summary.md"), "w").write(summary)
    print(summary)

    # ------------------------------------------------------------------ plots
    gp = [f'cd "{d}"', "set datafile separator ','", "set key outside right",
          "set grid", "set xlabel 'seconds'"]
    if restart_servers:
        n = len(restart_servers)
        gp += ["set terminal pngcairo size 1000,500", "set output 'fleet-restart.png'",
               f"set title 'Rolling restart: calls answered per server per {WINDOW_MS} ms "
               f"(-lb=p2c, {args.rate:g}/s)'",
               "set ylabel 'calls answered'"]
        for k, e in enumerate(events):
            gp.append(f"set arrow {k + 1} from {e['sigterm_s']}, graph 0 to {e['sigterm_s']}, "
                      "graph 1 nohead dt 2 lc rgb 'gray'")
        plots = [f"'fleet-restart.csv' using 1:{c + 2} with lines lw 2 title '{s}'"
                 for c, s in enumerate(restart_servers)]
        plots.append(f"'fleet-restart.csv' using 1:{n + 2} with impulses lw 3 lc rgb 'red' "
                     "title 'failed'")
        gp += ["plot " + ", ".join(plots), "unset arrow"]
    # Latency over time: Osprey's runs in fleet-slow.png, brpc's (if run) in
    # fleet-slow-brpc.png; the healthy runs only in the table and the bars.
    for png, mine in (("fleet-slow.png", True), ("fleet-slow-brpc.png", False)):
        runs = {lb: servers for lb, servers in slow_servers.items()
                if lb.startswith("brpc-") != mine and not lb.endswith("-healthy")}
        if not runs:
            continue
        who = "Osprey" if mine else "brpc"
        gp += ["set terminal pngcairo size 1000,500 noenhanced", f"set output '{png}'",
               f"set title 'A server 10x slower ({who}): mean latency per {WINDOW_MS} ms window'",
               "set ylabel 'latency (us)'", "set logscale y"]
        plots = []
        for lb, servers in runs.items():
            col = len(servers) + 3
            plots.append(f"'fleet-slow-{lb}.csv' using 1:(${col} > 0 ? ${col} : 1/0) "
                         f"with lines lw 2 title '{lb} mean'")
            plots.append(f"'fleet-slow-{lb}.csv' using 1:(${col + 1} > 0 ? ${col + 1} : 1/0) "
                         f"with lines dt 2 title '{lb} max'")
        gp += ["plot " + ", ".join(plots), "unset logscale y"]
    if slow_servers:
        # Every slow-server run side by side, Osprey's and brpc's: the
        # percentiles of the answered calls' latency.
        gp += ["set terminal pngcairo size 1000,500", "set output 'fleet-slow-runs.png'",
               "set title 'A server 10x slower: answered calls latency by run "
               f"({args.rate:g} calls/s, Sleep {args.handler_us} us)'",
               "set ylabel 'latency (us)'", "set logscale y", "set style data histogram",
               "set style histogram cluster gap 1", "set style fill solid 0.8 border -1",
               "set xtics rotate by -30", "unset xlabel", "set yrange [10:*]",
               "set termoption noenhanced",
               "plot 'fleet-slow-runs.csv' skip 1 using 6:xtic(1) title 'p50', "
               "'' skip 1 using 7 title 'p99', '' skip 1 using 8 title 'p99.9'"]
    open(os.path.join(d, "fleet-plots.gp"), "w").write("\n".join(gp) + "\n")
    if shutil.which("gnuplot"):
        if subprocess.run(["gnuplot", os.path.join(d, "fleet-plots.gp")]).returncode != 0:
            print("benchmarks.sh --fleet: gnuplot failed; fleet-plots.gp is in " + d,
                  file=sys.stderr)
            ok = False
    else:
        print("benchmarks.sh --fleet: gnuplot is missing, so no plots (apt-get install -y "
              "gnuplot-nox; then: gnuplot fleet-plots.gp)", file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
