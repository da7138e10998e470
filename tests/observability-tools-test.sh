#!/usr/bin/env bash
# The HTTP endpoints against the real tools operators use, all from Debian
# (scripts/install-deps.sh installs them):
#
#  1. promtool check metrics passes on /metrics;
#  2. Python's prometheus_client parser reads exactly the counts the server
#     was driven to (1,000 Add calls; N calls refused ERROR_SERVER_TOO_BUSY);
#  3. a Prometheus server, started here on loopback with a 1 s scrape
#     interval, scrapes /metrics and its query API returns the Add handler
#     latency count;
#  4. headless Chromium renders /rpcz: the screenshot is not blank and the
#     page's text holds the method name.
#
# Every process started here is ended by its PID; every wait is bounded.
#   observability-tools-test.sh <observability_server binary>
set -euo pipefail

server_bin="${1:?usage: $0 <observability_server>}"
py=/usr/bin/python3
work="$(mktemp -d "${TMPDIR:-/tmp}/osprey-observability.XXXXXX")"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
for tool in promtool prometheus chromium curl; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/install-deps.sh installs it)"
done

# The server, fed from a FIFO so that closing it ends the server.
mkfifo "$work/stdin"
"$server_bin" --adds 1000 --busy 7 <"$work/stdin" >"$work/server.out" 2>"$work/server.err" &
pids+=($!)
exec 3>"$work/stdin"
for _ in $(seq 1 600); do
  grep -q '^ready' "$work/server.out" 2>/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || fail "the server exited: $(tail -5 "$work/server.err")"
  sleep 0.1
done
grep -q '^ready' "$work/server.out" || fail "the server did not get ready in 60 s"
addr="$(sed -n 's/^listening on //p' "$work/server.out")"
busy="$(sed -n 's/^ready adds=[0-9]* busy=//p' "$work/server.out")"
[[ -n "$addr" && -n "$busy" ]] || fail "unexpected server output: $(cat "$work/server.out")"
echo "server at $addr; $busy calls were refused"
method="osprey.rpc_test.CalculatorService.Add"

# 1. promtool.
curl -sS --max-time 10 "http://$addr/metrics" >"$work/metrics.txt"
if ! promtool check metrics <"$work/metrics.txt" >"$work/promtool.out" 2>&1; then
  cat "$work/promtool.out" >&2
  fail "promtool check metrics found problems"
fi
echo "ok: promtool check metrics"

# 2. The exact counts, through prometheus_client's parser.
"$py" - "$work/metrics.txt" "$method" "$busy" <<'EOF'
import sys
from prometheus_client.parser import text_string_to_metric_families
path, method, busy = sys.argv[1], sys.argv[2], int(sys.argv[3])
samples = {}
types = {}
for family in text_string_to_metric_families(open(path).read()):
    types[family.name] = family.type
    for s in family.samples:
        samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
def get(name, **labels):
    key = (name, tuple(sorted(labels.items())))
    if key not in samples:
        sys.exit(f"FAIL: no sample {name}{labels}")
    return samples[key]
checks = [
    (get("osprey_server_calls_total", method=method, outcome="ok"), 1000),
    (get("osprey_server_calls_total", method=method, outcome="error_server_too_busy"), busy),
    (get("osprey_server_calls_rejected_queue_full_total", method=method), busy),
    (get("osprey_server_handler_latency_seconds_count", method=method), 1000),
    (get("osprey_server_handler_latency_seconds_bucket", method=method, le="+Inf"), 1000),
]
for got, want in checks:
    if got != want:
        sys.exit(f"FAIL: parsed {got}, expected {want}")
# Typed as what they are, not all gauges.
for name, want in [("osprey_server_calls", "counter"),
                   ("osprey_server_handler_latency_seconds", "histogram"),
                   ("osprey_connections_open", "gauge")]:
    if types.get(name) != want:
        sys.exit(f"FAIL: {name} is typed {types.get(name)}, expected {want}")
print("ok: prometheus_client parsed 1000 Add calls and", busy, "refusals")
EOF

# 3. A real Prometheus server scraping it.
prom_port="$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: osprey
    metrics_path: /metrics
    static_configs:
      - targets: ["$addr"]
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
prom_pid=$!
pids+=("$prom_pid")
query="osprey_server_handler_latency_seconds_count{method=\"$method\"}"
got=""
for _ in $(seq 1 60); do
  got="$(curl -sS --max-time 5 -G "http://127.0.0.1:$prom_port/api/v1/query" \
    --data-urlencode "query=$query" 2>/dev/null |
    "$py" -c 'import json,sys
try:
    r = json.load(sys.stdin)["data"]["result"]
    print(r[0]["value"][1] if r else "")
except Exception:
    print("")' || true)"
  [[ "$got" == "1000" ]] && break
  sleep 1
done
[[ "$got" == "1000" ]] || {
  tail -20 "$work/prometheus.log" >&2
  fail "Prometheus' query API returned '$got' for $query, expected 1000"
}
echo "ok: Prometheus scraped it; $query = $got"
kill "$prom_pid"

# 4. /rpcz in headless Chromium.
url="http://$addr/rpcz?format=html"
chrome=(chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage
  --user-data-dir="$work/chrome" --window-size=1200,800)
timeout -k 5 60 "${chrome[@]}" --screenshot="$work/rpcz.png" "$url" >"$work/chrome.log" 2>&1 ||
  fail "chromium could not take a screenshot: $(tail -5 "$work/chrome.log")"
timeout -k 5 60 "${chrome[@]}" --dump-dom "$url" >"$work/rpcz.dom" 2>>"$work/chrome.log" ||
  fail "chromium could not dump the page"
grep -q "osprey.rpc_test.CalculatorService.Sleep" "$work/rpcz.dom" ||
  fail "the rendered /rpcz does not name the Sleep method"
"$py" - "$work/rpcz.png" <<'EOF'
import sys
from PIL import Image
img = Image.open(sys.argv[1]).convert("RGB")
w, h = img.size
colors = img.getcolors(maxcolors=1 << 20) or []
dark = sum(n for n, (r, g, b) in colors if r + g + b < 300)
if len(colors) < 3 or dark < 500:
    sys.exit(f"FAIL: the screenshot looks blank ({len(colors)} colors, {dark} dark pixels)")
print(f"ok: Chromium rendered /rpcz ({w}x{h}, {len(colors)} colors, {dark} dark pixels)")
EOF

exec 3>&-  # the server ends when its input closes
echo "PASS"
