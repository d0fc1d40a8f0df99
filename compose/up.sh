#!/usr/bin/env bash
# Starts the suite locally without Docker, in the foreground:
#   builds the services (release), starts each on its DESIGN.md port with its SQLite file under
#   $IAP_DATA_DIR (default ./data), waits until every health.check answers ok, prints where
#   everything is, and stops them all on Ctrl-C (SIGINT/SIGTERM: each drains and closes its database).
# Tokens: IAP_INTERNAL_TOKEN and IAP_ADMIN_TOKEN if set, otherwise random ones kept (mode 0600) in
# the data directory so they survive restarts.
set -euo pipefail
cd "$(dirname "$0")/.."
# Ports: compose/.env, the same file compose.yaml takes them from.
set -a
# shellcheck source=compose/.env
source compose/.env
set +a
export IAP_ACCOUNTS_ADDR=127.0.0.1:$IAP_ACCOUNTS_PORT IAP_CATALOG_ADDR=127.0.0.1:$IAP_CATALOG_PORT
export IAP_VERIFICATION_ADDR=127.0.0.1:$IAP_VERIFICATION_PORT IAP_FULFILLMENT_ADDR=127.0.0.1:$IAP_FULFILLMENT_PORT
export IAP_SIM_ADDR=127.0.0.1:$IAP_SIM_PORT
# The edge: the one public door (HTTPS with a certificate for localhost made below).
export IAP_EDGE_URL=${IAP_EDGE_URL:-https://localhost:$IAP_EDGE_PORT}
export IAP_DATA_DIR=${IAP_DATA_DIR:-$PWD/data}
# The app whose purchases the local stack accepts (verification refuses every other bundle id); the
# simulator, the demo and `iap sim` use the first one.
export IAP_BUNDLE_IDS=${IAP_BUNDLE_IDS:-com.example.game}
mkdir -p "$IAP_DATA_DIR/logs"

secret() {  # secret NAME: the env value, else the one kept in the data dir, else a new one
  local file="$IAP_DATA_DIR/$1"
  if [[ ! -s $file ]]; then
    (umask 077; head -c 32 /dev/urandom | base64 | tr -d '/+=' > "$file")
  fi
  cat "$file"
}
export IAP_INTERNAL_TOKEN=${IAP_INTERNAL_TOKEN:-$(secret internal-token)}
export IAP_ADMIN_TOKEN=${IAP_ADMIN_TOKEN:-$(secret admin-token)}
# Signs content URLs (fulfillment) and checks them (the edge).
export IAP_CONTENT_URL_KEY=${IAP_CONTENT_URL_KEY:-$(secret content-url-key)}
export IAP_EDGE_PUBLIC_URL=$IAP_EDGE_URL
compose/dev-cert.sh "$IAP_DATA_DIR/edge-tls"
export IAP_EDGE_CA=${IAP_EDGE_CA:-$IAP_DATA_DIR/edge-tls/cert.pem}

# name executable port [flags]: every service of DESIGN.md section 1.
# In start order: the simulator first, since verification trusts the roots it writes on first start
# (and uses its HTTP verifyReceipt endpoints for mode remote/auto, and its App Store Server API with the
# key it issues). The simulator POSTs its notifications to the edge's webhook, as Apple would (the edge
# starts last: a notification sent before it is up is retried on Apple's schedule). This is the development stack: the
# same services, commands and flags as compose/compose.yaml with compose/compose.dev.yaml on top
# (Tests/ComposeTests checks that they agree).
services=(
  "appstore-sim appstore-sim $IAP_SIM_PORT --http-port $IAP_SIM_HTTP_PORT --notification-url $IAP_EDGE_URL/v1/notifications/appstore --sandbox-notification-url $IAP_EDGE_URL/v1/notifications/appstore/sandbox --notification-ca $IAP_DATA_DIR/edge-tls/cert.pem"
  "accounts accounts-service $IAP_ACCOUNTS_PORT"
  "catalog catalog-service $IAP_CATALOG_PORT --seed compose/demo-catalog.json"
  "verification verification-service $IAP_VERIFICATION_PORT --trust-anchor-dir $IAP_DATA_DIR/sim-pki --verify-receipt-url http://127.0.0.1:$IAP_SIM_HTTP_PORT/verifyReceipt --sandbox-verify-receipt-url http://127.0.0.1:$IAP_SIM_HTTP_PORT/sandbox/verifyReceipt --app-store-api-key $IAP_DATA_DIR/sim-pki/api-key.p8 --app-store-api-url http://127.0.0.1:$IAP_SIM_HTTP_PORT --app-store-api-sandbox-url http://127.0.0.1:$IAP_SIM_HTTP_PORT/sandbox"
  "fulfillment fulfillment-service $IAP_FULFILLMENT_PORT --dependency-timeout-ms $IAP_DEPENDENCY_TIMEOUT_MS --content-dir $IAP_DATA_DIR/content --offer-key $IAP_DATA_DIR/sim-pki/offer-key.p8"
  "edge edge-service $IAP_EDGE_PORT --tls-cert $IAP_DATA_DIR/edge-tls/cert.pem --tls-key $IAP_DATA_DIR/edge-tls/key.pem --content-dir $IAP_DATA_DIR/content"
)

# The demo catalog's downloadable content (levels.pack1 grants levels-pack-1.zip): 4 MiB, so a
# download shows progress and can be resumed; its SHA-256 is checked by the client.
mkdir -p "$IAP_DATA_DIR/content"
if [[ ! -s $IAP_DATA_DIR/content/levels-pack-1.zip ]]; then
  head -c $((4 << 20)) /dev/urandom >"$IAP_DATA_DIR/content/levels-pack-1.zip"
fi

echo "building (release)..."
compose/build.sh >/dev/null  # every service and the iap client, as compose/Dockerfile builds them
bin=$(swift build -c release --show-bin-path)

pids=()
names=()
stopping=0
stop() {
  trap - INT TERM EXIT
  stopping=1
  echo "stopping..."
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  # Each service drains for at most its drain timeout (10 s). One still running 20 s after SIGTERM is
  # killed, so Ctrl-C never leaves a process holding a port; its SQLite file is safe (every commit is
  # durable: see CrashSafetyTests).
  local alive=() i
  for _ in $(seq 1 200); do
    alive=()
    for i in "${!pids[@]}"; do kill -0 "${pids[$i]}" 2>/dev/null && alive+=("$i"); done
    ((${#alive[@]})) || break
    sleep 0.1
  done
  for i in "${alive[@]}"; do
    echo "${names[$i]} (pid ${pids[$i]}) did not stop within 20 s of SIGTERM; killing it" >&2
    kill -KILL "${pids[$i]}" 2>/dev/null || true
  done
  wait || true
}
trap stop INT TERM EXIT

for entry in "${services[@]}"; do  # a port already taken would make a health check lie
  read -r name _ port _ <<<"$entry"
  if { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
    exec 3>&-
    echo "port $port ($name) is already in use: is the suite already running?" >&2
    exit 1
  fi
done

health() {  # health PORT: prints the health.check reply line, or nothing
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf '{"jsonrpc":"2.0","id":1,"method":"health.check"}\n' >&3
  local line; read -r -t 2 line <&3 || true
  exec 3>&-
  printf '%s' "$line"
}

ready() {  # ready NAME PORT: the edge's /readyz (through its TLS), else the service's health.check
  if [[ $1 == edge ]]; then
    "$bin/iap" health --edge "$IAP_EDGE_URL" --ca "$IAP_EDGE_CA" >/dev/null 2>&1
  else
    [[ $(health "$2" || true) == *'"status":"ok"'* ]]
  fi
}

for entry in "${services[@]}"; do  # start each, and wait until it is healthy before the next
  read -r name exe port extra <<<"$entry"
  data=(--data-dir "$IAP_DATA_DIR")
  [[ $name == edge ]] && data=()  # the edge keeps no data
  # shellcheck disable=SC2086  # extra flags are words on purpose
  "$bin/$exe" --port "$port" "${data[@]}" $extra >>"$IAP_DATA_DIR/logs/$name.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  names+=("$name")
  for attempt in $(seq 1 100); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$name exited during start-up; see $IAP_DATA_DIR/logs/$name.log" >&2
      exit 1
    fi
    if ready "$name" "$port"; then break; fi
    if ((attempt == 100)); then
      echo "$name did not become healthy on port $port; see $IAP_DATA_DIR/logs/$name.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  printf '  %-13s 127.0.0.1:%s  (log: %s)\n' "$name" "$port" "$IAP_DATA_DIR/logs/$name.log"
done
echo "accepting purchases of: $IAP_BUNDLE_IDS (development stack: verification trusts the simulator's roots)"
echo "suite is up; data in $IAP_DATA_DIR; tokens in $IAP_DATA_DIR/internal-token and admin-token. Ctrl-C stops it."
echo "the edge (apps, Apple's notifications, downloads): $IAP_EDGE_URL  (certificate: $IAP_EDGE_CA)"
echo "try, in another terminal (through the edge):"
echo "  IAP_EDGE_URL=$IAP_EDGE_URL IAP_EDGE_CA=$IAP_EDGE_CA .build/release/iap demo"

# Stream every service's log, each line prefixed with its service (IAP_STREAM_LOGS=0 to keep quiet).
if [[ ${IAP_STREAM_LOGS:-1} != 0 ]]; then
  logs=()
  for entry in "${services[@]}"; do
    read -r name _ <<<"$entry"
    logs+=("$IAP_DATA_DIR/logs/$name.log")
  done
  header='^==> .*/([^/]+)[.]log <==$'
  tail -n 0 -F "${logs[@]}" 2>/dev/null > >(
    name=""
    while IFS= read -r line; do
      if [[ $line =~ $header ]]; then name=${BASH_REMATCH[1]}; continue; fi
      [[ -n $line ]] && printf '%-13s| %s\n' "$name" "$line"
    done) &
  pids+=("$!")
  names+=("log stream")
fi
wait -n || true  # returns when any service exits (or on Ctrl-C)
((stopping)) || echo "a service exited; see the logs in $IAP_DATA_DIR/logs" >&2
