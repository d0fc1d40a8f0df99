#!/usr/bin/env bash
# The edge side by side with its peers, in one run on this machine (targets: Benchmarks/README.md):
#   1. catalog.listProducts over raw TCP JSON-RPC vs the same call as JSON-RPC over HTTPS through the edge
#      (HTTP/2 and HTTP/1.1), 16 connections, 1 in flight each;
#   2. a 256 MiB file downloaded from the edge (a signed content URL) vs nginx serving the same file, over
#      plain HTTP and over TLS with the same certificate, one connection, whole-file GETs; each pairing
#      measured with iap-bench's HTTP client and with curl (a client nobody here wrote).
#
#   Benchmarks/edge.sh [SECONDS]        (default 10)
# Needs nginx (Debian: apt-get install nginx-light), curl and openssl; uses wrk (apt-get install wrk) when present. Everything runs on loopback from a
# temporary directory, which is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
command -v nginx >/dev/null || { echo "needs nginx: apt-get install nginx-light" >&2; exit 1; }
export IAP_UNCHECKED_EXCLUSIVITY=${IAP_UNCHECKED_EXCLUSIVITY:-1}  # as compose/build.sh builds the services
for product in catalog-service edge-service iap-bench; do swift build -c release --product "$product" >/dev/null; done
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/iap-edge-bench.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [[ -f $work/nginx.pid ]] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

compose/dev-cert.sh "$work/tls" && chmod 644 "$work/tls/key.pem"  # nginx's workers read it as nobody
mkdir -p "$work/content" "$work/catalog"
head -c $((256 << 20)) /dev/urandom >"$work/content/big.bin"
chmod -R a+rX "$work/content"
key=$(head -c 32 /dev/urandom | base64 | tr -d '/+=')

catalog=17102 edge_tls=18443 edge_plain=18080 nginx_plain=19080 nginx_tls=19443
"$bin/catalog-service" --port $catalog --data-dir "$work/catalog" --seed compose/demo-catalog.json --log-level warning &
pids+=($!)
edge_flags=(--catalog-addr 127.0.0.1:$catalog --accounts-addr 127.0.0.1:1 --fulfillment-addr 127.0.0.1:1
  --content-dir "$work/content" --content-url-key "$key" --requests-per-second 1000000000 --burst 1000000000 --log-level warning)
"$bin/edge-service" --port $edge_tls --tls-cert "$work/tls/cert.pem" --tls-key "$work/tls/key.pem" "${edge_flags[@]}" &
pids+=($!)
"$bin/edge-service" --port $edge_plain "${edge_flags[@]}" &
pids+=($!)
cat >"$work/nginx.conf" <<CONF
daemon off;
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  default_type application/octet-stream;
  server { listen 127.0.0.1:$nginx_plain; root $work/content; }
  server {
    listen 127.0.0.1:$nginx_tls ssl http2;
    ssl_certificate $work/tls/cert.pem;
    ssl_certificate_key $work/tls/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    root $work/content;
  }
}
CONF
nginx -c "$work/nginx.conf" -p "$work" &
pids+=($!)
for port in $catalog $edge_tls $edge_plain $nginx_plain $nginx_tls; do  # until each listens
  for _ in $(seq 1 100); do { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null && { exec 3>&-; break; }; sleep 0.1; done
done

run() { echo; echo "\$ iap-bench $*"; "$bin/iap-bench" "$@" --rss catalog-service,edge-service,nginx; }
echo "== JSON-RPC: raw TCP vs HTTPS through the edge (catalog.listProducts, 16 connections x 1 in flight)"
run catalog-list --catalog 127.0.0.1:$catalog --connections 16 --in-flight 1 --duration "$seconds"
run edge-rpc --url https://localhost:$edge_tls --ca "$work/tls/cert.pem" --connections 16 --in-flight 1 --duration "$seconds"
run edge-rpc --url https://localhost:$edge_tls --ca "$work/tls/cert.pem" --http1 --connections 16 --in-flight 1 --duration "$seconds"
if command -v wrk >/dev/null; then  # a C load generator (Debian's wrk): the client's own cost out of the way
  cat >"$work/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"catalog.listProducts","params":{"storefront":"USA","locale":"en-US"}}'
wrk.headers["Content-Type"] = "application/json"
LUA
  for url in https://localhost:$edge_tls/v1/rpc http://127.0.0.1:$edge_plain/v1/rpc; do
    echo; echo "\$ wrk -t1 -c16 -d${seconds}s --latency -s post.lua $url"
    wrk -t1 -c16 -d"${seconds}s" --latency -s "$work/post.lua" "$url" | grep -E "Requests/sec|50%|99%|Non-2xx|errors"
  done
fi

echo; echo "== 256 MiB downloads, one connection: the edge vs nginx"
signed() { "$bin/iap-bench" content-url --base "$1" --content-id big.bin --key "$key"; }
curl_rate() {  # curl_rate URL [curl flags]: MiB/s of 3 whole-file downloads
  local url=$1 total=0 n; shift
  for _ in 1 2 3; do
    n=$(curl -sS -o /dev/null -w '%{speed_download}' "$@" "$url")
    total=$(python3 -c "print($total + $n)")
  done
  python3 -c "print(f'{$total / 3 / 1048576:.1f}')"
}
for pairing in plain tls; do
  if [[ $pairing == plain ]]; then
    edge_url=$(signed http://127.0.0.1:$edge_plain); nginx_url=http://127.0.0.1:$nginx_plain/big.bin; tls=()
  else
    edge_url=$(signed https://localhost:$edge_tls); nginx_url=https://localhost:$nginx_tls/big.bin; tls=(--ca "$work/tls/cert.pem")
  fi
  run download --label "edge $pairing" --url "$edge_url" "${tls[@]}" --connections 1 --in-flight 1 --warmup 1 --duration "$seconds"
  run download --label "nginx $pairing" --url "$nginx_url" "${tls[@]}" --connections 1 --in-flight 1 --warmup 1 --duration "$seconds"
  curl_tls=(); [[ $pairing == tls ]] && curl_tls=(--cacert "$work/tls/cert.pem")
  echo "curl ($pairing, HTTP/1.1, MiB/s, mean of 3): edge $(curl_rate "$edge_url" --http1.1 "${curl_tls[@]}")  nginx $(curl_rate "$nginx_url" --http1.1 "${curl_tls[@]}")"
  if [[ $pairing == tls ]]; then
    echo "curl (tls, HTTP/2, MiB/s, mean of 3):   edge $(curl_rate "$edge_url" --http2 "${curl_tls[@]}")  nginx $(curl_rate "$nginx_url" --http2 "${curl_tls[@]}")"
  fi
done
