#!/usr/bin/env bash
# verification.verifyTransaction/s with online revocation checks (OCSP, answers cached until their nextUpdate) and
# without, side by side in one run: the suite of compose/up.sh (its verification-service runs with --ocsp against
# the simulator's responder) and a second verification-service with the same trust and no --ocsp on port 7193.
# Needs the release build (compose/build.sh; swift build -c release --product iap-bench) and free suite ports.
#   Benchmarks/ocsp.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
bin=$(swift build -c release --show-bin-path)
data=$(mktemp -d)
IAP_STREAM_LOGS=0 IAP_DATA_DIR=$data setsid compose/up.sh >"$data/up.log" 2>&1 &
suite=$!
plain=""
cleanup() {
  [[ -n $plain ]] && kill "$plain" 2>/dev/null
  kill -INT -- "-$suite" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT
for _ in $(seq 1 600); do
  grep -q "suite is up" "$data/up.log" && break
  kill -0 "$suite" 2>/dev/null || { cat "$data/up.log"; exit 1; }
  sleep 0.5
done
IAP_INTERNAL_TOKEN=$(cat "$data/internal-token") "$bin/verification-service" --port 7193 --data-dir "$data/plain" \
  --trust-anchor-dir "$data/sim-pki" --bundle-id com.example.game --log-level error &
plain=$!
until "$bin/iap" call 127.0.0.1:7193 rpc.ping >/dev/null 2>&1; do sleep 0.2; done
echo "verification with OCSP: $(grep -o 'online revocation checks (OCSP) on.*' "$data/logs/verification.log" | head -1)"
echo "responder named by the simulator's certificates: $(openssl x509 -inform DER -in "$data/sim-pki/jws-leaf.der" -noout -ocsp_uri)"
echo "== OCSP on (127.0.0.1:7103)"
"$bin/iap-bench" verify-transaction --verification 127.0.0.1:7103 --duration "$seconds"
echo "== OCSP off (127.0.0.1:7193)"
"$bin/iap-bench" verify-transaction --verification 127.0.0.1:7193 --duration "$seconds" --no-openssl
