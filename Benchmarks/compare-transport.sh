#!/usr/bin/env bash
# Side-by-side benchmark against the Node.js peer under rpcload, in one run: our transport fixture
# (ping, 20-product listing encoded per call) and the real catalog-service (same 20 products, seeded
# from Benchmarks/bench-catalog.json, listing served from its cache).
# Usage: Benchmarks/compare-transport.sh [SECONDS]   (needs node and cc; builds iap-bench in release)
# Alternates the two servers for each scenario so machine drift hits both alike.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
peers=$(dirname "$0")/peers  # the C load generator and the Node.js peer
swift build -c release --product iap-bench >/dev/null
swift build -c release --product catalog-service >/dev/null
cc -O2 -o /tmp/rpcload "$peers/rpcload.c"

node "$peers/node-jsonrpc.js" 7900 & node_pid=$!
.build/release/iap-bench serve-fixture --port 7901 & ours_pid=$!
catalog_data=$(mktemp -d)
.build/release/catalog-service --port 7902 --data-dir "$catalog_data" --admin-token bench \
  --seed Benchmarks/bench-catalog.json --log-level warning & catalog_pid=$!
trap 'kill $node_pid $ours_pid $catalog_pid 2>/dev/null || true; rm -rf "$catalog_data"' EXIT
for port in 7900 7901 7902; do  # wait until all answer
  for _ in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
    sleep 0.1
  done
done

ping='{"jsonrpc":"2.0","id":%ID%,"method":"rpc.ping"}'
list='{"jsonrpc":"2.0","id":%ID%,"method":"catalog.listProducts","params":{}}'
printf '%-14s %-7s %-6s %12s %8s %8s\n' scenario load server req/s p50_us p99_us
for scenario in ping list catalog-list; do
  tpl=$ping; [[ $scenario != ping ]] && tpl=$list
  for load in "16 16" "16 1"; do
    for server in node swift; do
      port=7900
      [[ $server == swift ]] && port=7901
      [[ $server == swift && $scenario == catalog-list ]] && port=7902
      out=$(/tmp/rpcload 127.0.0.1 $port $load "$secs" "$tpl")
      get() { grep -o "$1=[0-9.]*" <<<"$out" | cut -d= -f2; }
      printf '%-14s %-7s %-6s %12s %8s %8s\n' "$scenario" "${load/ /x}" "$server" "$(get requests_per_s)" "$(get p50_us)" "$(get p99_us)"
    done
  done
done
