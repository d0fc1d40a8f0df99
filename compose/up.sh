#!/usr/bin/env bash
# Starts the suite locally without Docker, in the foreground:
#   builds the services (release), starts each on its default port (compose/.env) with its SQLite file under
#   $IAP_DATA_DIR (default ./data), waits until every health.check answers ok, prints where
#   everything is, and stops them all on Ctrl-C (SIGINT/SIGTERM: each drains and closes its database).
# Tokens: IAP_INTERNAL_TOKEN and IAP_ADMIN_TOKEN if set, otherwise random ones kept (mode 0600) in
# the data directory so they survive restarts.
#
# The PostgreSQL flavour: IAP_POSTGRES=1 compose/up.sh
#   accounts, catalog and fulfillment keep their records in PostgreSQL instead of SQLite, and run
#   IAP_INSTANCES (default 2) instances each, the second on its port + 100 (7201, 7202, 7204), every
#   client given all of them (IAP_ACCOUNTS_ADDR=127.0.0.1:7101,127.0.0.1:7201 ...). The database is
#   IAP_DATABASE_URL when set (a server you run); otherwise a local PostgreSQL server (Debian's package,
#   /usr/lib/postgresql/*/bin) is started in $IAP_DATA_DIR/postgres on 127.0.0.1:$IAP_POSTGRES_PORT
#   (default 7432) with a password kept in $IAP_DATA_DIR/postgres-password, as the `postgres` user when
#   run as root (initdb refuses root), with durable commits (synchronous_commit=on), and stopped with the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# Ports: compose/.env, the same file compose.yaml takes them from.
set -a
# shellcheck source=compose/.env
source compose/.env
set +a
export IAP_ACCOUNTS_ADDR=127.0.0.1:$IAP_ACCOUNTS_PORT IAP_CATALOG_ADDR=127.0.0.1:$IAP_CATALOG_PORT
export IAP_VERIFICATION_ADDR=127.0.0.1:$IAP_VERIFICATION_PORT IAP_FULFILLMENT_ADDR=127.0.0.1:$IAP_FULFILLMENT_PORT
export IAP_SIM_ADDR=127.0.0.1:$IAP_SIM_PORT IAP_PLAY_ADDR=127.0.0.1:$IAP_PLAY_SIM_PORT
# The edge: the one public door (HTTPS with a certificate for localhost made below).
export IAP_EDGE_URL=${IAP_EDGE_URL:-https://localhost:$IAP_EDGE_PORT}
export IAP_DATA_DIR=${IAP_DATA_DIR:-$PWD/data}
# The app whose purchases the local stack accepts (verification refuses every other bundle id); the
# simulator, the demo and `iap sim` use the first one.
export IAP_BUNDLE_IDS=${IAP_BUNDLE_IDS:-com.example.game}
mkdir -p "$IAP_DATA_DIR/logs"
# What the services keep (scrypt hashes, the ledger, keys; each file 0600) is theirs alone: the data directory is
# 0700, or 0711 (others may pass through, never list) when the PostgreSQL cluster, run as the postgres user, is inside.
chmod "$([[ ${IAP_POSTGRES:-0} == 1 && -z ${IAP_DATABASE_URL:-} ]] && echo 711 || echo 700)" "$IAP_DATA_DIR"

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

pg_stop=()
declare -A database_urls=()  # service -> its own login's URL (the local PostgreSQL server)
if [[ ${IAP_POSTGRES:-0} == 1 ]]; then
  instances=${IAP_INSTANCES:-2}
  if [[ -z ${IAP_DATABASE_URL:-} ]]; then
    pgbin=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -1)
    [[ -x $pgbin/initdb ]] || { echo "IAP_POSTGRES=1 needs PostgreSQL (apt-get install postgresql) or IAP_DATABASE_URL" >&2; exit 1; }
    pgport=${IAP_POSTGRES_PORT:-7432}
    pgdir=$IAP_DATA_DIR/postgres
    pgpass=$(secret postgres-password)
    as_pg=()
    mkdir -p "$pgdir"
    if [[ $(id -u) == 0 ]]; then
      as_pg=(runuser -u postgres --)
      chown postgres "$pgdir"
      chmod 700 "$pgdir"
    fi
    if [[ ! -s $pgdir/PG_VERSION ]]; then
      pwfile=$(mktemp)
      printf '%s\n' "$pgpass" >"$pwfile"
      [[ $(id -u) == 0 ]] && chown postgres "$pwfile"
      "${as_pg[@]}" "$pgbin/initdb" -D "$pgdir" -U iap --auth=scram-sha-256 --pwfile="$pwfile" >"$IAP_DATA_DIR/logs/initdb.log" 2>&1 ||
        { rm -f "$pwfile"; echo "initdb failed; see $IAP_DATA_DIR/logs/initdb.log (the postgres user must be able to reach $pgdir)" >&2; exit 1; }
      rm -f "$pwfile"
    fi
    touch "$IAP_DATA_DIR/logs/postgres.log"
    [[ $(id -u) == 0 ]] && chown postgres "$IAP_DATA_DIR/logs/postgres.log"
    "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdir" -l "$IAP_DATA_DIR/logs/postgres.log" -w start \
      -o "-p $pgport -k $pgdir -c listen_addresses=127.0.0.1 -c synchronous_commit=on -c max_connections=300" >/dev/null
    pg_stop=("${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdir" -m fast -w stop)
    trap '"${pg_stop[@]}" >/dev/null 2>&1 || true' EXIT  # until the suite's own stop takes over, below
    if ! PGPASSWORD=$pgpass "$pgbin/psql" -h 127.0.0.1 -p "$pgport" -U iap -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'iap'" | grep -q 1; then
      PGPASSWORD=$pgpass "$pgbin/createdb" -h 127.0.0.1 -p "$pgport" -U iap iap
    fi
    # Each service signs in as a login of its own that owns its schema only (compose/postgres-roles.sh), as
    # compose.postgres.yaml has it; the superuser's password stays in the data directory (backups).
    for s in accounts catalog fulfillment console; do
      password=$(secret "postgres-$s-password")
      declare -x "IAP_POSTGRES_${s^^}_PASSWORD=$password"
      database_urls[$s]=postgres://iap_$s:$password@127.0.0.1:$pgport/iap
    done
    PATH=$pgbin:$PATH PGHOST=127.0.0.1 PGPORT=$pgport PGUSER=iap PGPASSWORD=$pgpass POSTGRES_DB=iap bash compose/postgres-roles.sh >/dev/null
    for s in accounts catalog fulfillment console; do unset "IAP_POSTGRES_${s^^}_PASSWORD"; done
    echo "  postgres      127.0.0.1:$pgport  (data: $pgdir, log: $IAP_DATA_DIR/logs/postgres.log)"
  fi
  addresses() {  # addresses PORT: every instance's address, comma-separated
    local list="" k
    for ((k = 0; k < instances; k++)); do list+="${list:+,}127.0.0.1:$(($1 + 100 * k))"; done
    printf '%s' "$list"
  }
  export IAP_ACCOUNTS_ADDR=$(addresses "$IAP_ACCOUNTS_PORT") IAP_CATALOG_ADDR=$(addresses "$IAP_CATALOG_PORT")
  export IAP_FULFILLMENT_ADDR=$(addresses "$IAP_FULFILLMENT_PORT")
fi

# name executable port [flags]: every service of docs/contract.md, "Services and ports".
# In start order: the simulator first, since verification trusts the roots it writes on first start
# (and uses its HTTP verifyReceipt endpoints for mode remote/auto, and its App Store Server API with the
# key it issues). The simulator POSTs its notifications to the edge's webhook, as Apple would (the edge
# starts last: a notification sent before it is up is retried on Apple's schedule). This is the development stack: the
# same services, commands and flags as compose/compose.yaml with compose/compose.dev.yaml on top
# (Tests/ComposeTests checks that they agree).
services=(
  "appstore-sim appstore-sim $IAP_SIM_PORT --http-port $IAP_SIM_HTTP_PORT --ocsp-url http://127.0.0.1:$IAP_SIM_HTTP_PORT/ocsp --notification-url $IAP_EDGE_URL/v1/notifications/appstore --sandbox-notification-url $IAP_EDGE_URL/v1/notifications/appstore/sandbox --notification-ca $IAP_DATA_DIR/edge-tls/cert.pem"
  "play-sim play-sim $IAP_PLAY_SIM_PORT --http-port $IAP_PLAY_SIM_HTTP_PORT --public-url http://127.0.0.1:$IAP_PLAY_SIM_HTTP_PORT --push-url $IAP_EDGE_URL/v1/notifications/googleplay --push-ca $IAP_DATA_DIR/edge-tls/cert.pem --key-file $IAP_DATA_DIR/play-service-account.json"
  "accounts accounts-service $IAP_ACCOUNTS_PORT"
  "catalog catalog-service $IAP_CATALOG_PORT --seed compose/demo-catalog.json"
  "verification verification-service $IAP_VERIFICATION_PORT --trust-anchor-dir $IAP_DATA_DIR/sim-pki --ocsp --verify-receipt-url http://127.0.0.1:$IAP_SIM_HTTP_PORT/verifyReceipt --sandbox-verify-receipt-url http://127.0.0.1:$IAP_SIM_HTTP_PORT/sandbox/verifyReceipt --app-store-api-key $IAP_DATA_DIR/sim-pki/api-key.p8 --app-store-api-url http://127.0.0.1:$IAP_SIM_HTTP_PORT --app-store-api-sandbox-url http://127.0.0.1:$IAP_SIM_HTTP_PORT/sandbox --app-apple-id 1234567890 --play-service-account $IAP_DATA_DIR/play-service-account.json --play-api-url http://127.0.0.1:$IAP_PLAY_SIM_HTTP_PORT --package-name com.example.game --play-push-audience $IAP_EDGE_URL/v1/notifications/googleplay --play-push-email rtdn-push@iap-play-sim.iam.gserviceaccount.com --play-certs-url http://127.0.0.1:$IAP_PLAY_SIM_HTTP_PORT/oauth2/v3/certs"
  "fulfillment fulfillment-service $IAP_FULFILLMENT_PORT --dependency-timeout-ms $IAP_DEPENDENCY_TIMEOUT_MS --content-dir $IAP_DATA_DIR/content --offer-key $IAP_DATA_DIR/sim-pki/offer-key.p8 --sandbox-content"
  "edge edge-service $IAP_EDGE_PORT --tls-cert $IAP_DATA_DIR/edge-tls/cert.pem --tls-key $IAP_DATA_DIR/edge-tls/key.pem --content-dir $IAP_DATA_DIR/content"
  "console console-service $IAP_CONSOLE_PORT --tls-cert $IAP_DATA_DIR/edge-tls/cert.pem --tls-key $IAP_DATA_DIR/edge-tls/key.pem"
)

# The PostgreSQL flavour: the further instances of accounts, catalog and fulfillment, each right after its first.
if [[ ${IAP_POSTGRES:-0} == 1 ]]; then
  expanded=()
  for entry in "${services[@]}"; do
    expanded+=("$entry")
    read -r name exe port extra <<<"$entry"
    if [[ $name == accounts || $name == catalog || $name == fulfillment ]]; then
      for ((k = 1; k < instances; k++)); do expanded+=("$name-$((k + 1)) $exe $((port + 100 * k)) $extra"); done
    fi
  done
  services=("${expanded[@]}")
fi

# The demo catalog's downloadable content (levels.pack1 grants levels-pack-1.zip): 4 MiB, so a
# download shows progress and can be resumed; its SHA-256 is checked by the client.
mkdir -p "$IAP_DATA_DIR/content"
if [[ ! -s $IAP_DATA_DIR/content/levels-pack-1.zip ]]; then
  head -c $((4 << 20)) /dev/urandom >"$IAP_DATA_DIR/content/levels-pack-1.zip"
fi

echo "building (release; the first build takes 15-20 minutes on 2 cores, later ones seconds)..."
# Every service and the iap client, as compose/Dockerfile builds them, with a line per tenth of each product's build
# (the compiler's own output goes to $IAP_DATA_DIR/build.log).
IAP_BUILD_PROGRESS=1 IAP_BUILD_LOG="$IAP_DATA_DIR/build.log" compose/build.sh >/dev/null
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
  if ((${#pg_stop[@]})); then "${pg_stop[@]}" >/dev/null 2>&1 || true; fi
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

# rotate FILE: appends its input to FILE; past IAP_LOG_MAX_BYTES (default 10 MiB) FILE becomes FILE.1 (FILE.1
# becomes FILE.2, ... up to IAP_LOG_KEEP, default 5, the oldest dropped), so logs never grow without bound.
rotate() {
  local file=$1 max=${IAP_LOG_MAX_BYTES:-10485760} keep=${IAP_LOG_KEEP:-5} size line i
  size=$(stat -c %s "$file" 2>/dev/null || echo 0)
  while IFS= read -r line || [[ -n $line ]]; do
    printf '%s\n' "$line" >>"$file"
    size=$((size + ${#line} + 1))
    if ((size >= max)); then
      for ((i = keep - 1; i >= 1; i--)); do [[ -f $file.$i ]] && mv -f "$file.$i" "$file.$((i + 1))"; done
      mv -f "$file" "$file.1"
      size=0
    fi
  done
}

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
  elif [[ $1 == console ]]; then
    "$bin/iap" health --console "https://localhost:$2" --ca "$IAP_EDGE_CA" >/dev/null 2>&1
  else
    [[ $(health "$2" || true) == *'"status":"ok"'* ]]
  fi
}

for entry in "${services[@]}"; do  # start each, and wait until it is healthy before the next
  read -r name exe port extra <<<"$entry"
  data=(--data-dir "$IAP_DATA_DIR")
  [[ $name == edge ]] && data=()  # the edge keeps no data
  # Its own database login's URL (the local PostgreSQL server), else the one given, else none (empty: SQLite); in the
  # environment, not on a command line `ps` shows.
  # shellcheck disable=SC2086  # extra flags are words on purpose
  IAP_DATABASE_URL=${database_urls[${name%%-*}]:-${IAP_DATABASE_URL:-}} \
    "$bin/$exe" --port "$port" "${data[@]}" $extra > >(rotate "$IAP_DATA_DIR/logs/$name.log") 2>&1 &
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
# The support console's first operator, made once and kept (0600) beside the tokens.
if [[ ! -s $IAP_DATA_DIR/console-operator.json ]]; then
  (umask 077; IAP_DATABASE_URL=${database_urls[console]:-${IAP_DATABASE_URL:-}} \
    "$bin/iap" console add-operator admin --role admin --data-dir "$IAP_DATA_DIR" --json >"$IAP_DATA_DIR/console-operator.json")
fi
echo "the support console: https://localhost:$IAP_CONSOLE_PORT/  (certificate: $IAP_EDGE_CA)"
echo "  operator admin; password and TOTP secret (base32, 6 digits, 30 s) in $IAP_DATA_DIR/console-operator.json:"
echo "  $(cat "$IAP_DATA_DIR/console-operator.json")"
echo "try, in another terminal (through the edge):"
echo "  IAP_EDGE_URL=$IAP_EDGE_URL IAP_EDGE_CA=$IAP_EDGE_CA IAP_PLAY_ADDR=$IAP_PLAY_ADDR .build/release/iap demo"

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
