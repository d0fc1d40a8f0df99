#!/usr/bin/env bash
# Every iap-bench scenario against a running suite (compose/up.sh), in one go, then the scale scenario:
#   Benchmarks/run-suite.sh [SECONDS]          (default 10 s per measurement)
# Needs the suite running with its data directory at $IAP_DATA_DIR (default ./data), started with
# IAP_REGISTRATIONS_PER_ADDRESS=1000000 (the benchmarks register many accounts from 127.0.0.1). The preload writes
# 1,000,000 ledger rows into that fulfillment database: use a throwaway data directory.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
data=${IAP_DATA_DIR:-data}
export IAP_UNCHECKED_EXCLUSIVITY=${IAP_UNCHECKED_EXCLUSIVITY:-1}  # as compose/build.sh builds the services
swift build -c release --product iap-bench >/dev/null
bench="$(swift build -c release --show-bin-path)/iap-bench"
run() { echo; echo "\$ iap-bench $*"; "$bench" "$@"; }

echo "idle RSS (KiB):"; for p in accounts-service catalog-service verification-service fulfillment-service appstore-sim; do
  printf '  %-22s %s\n' "$p" "$(grep VmRSS "/proc/$(pgrep -x "${p:0:15}" | head -1)/status" | awk '{print $2}')"
done
run ping --addr 127.0.0.1:7102 --connections 16 --in-flight 16 --duration "$seconds"
run catalog-list --connections 16 --in-flight 16 --duration "$seconds"
run authenticate --connections 16 --in-flight 16 --duration "$seconds"
for n in 1 5 50; do run verify-receipt --in-app "$n" --digest sha256 --duration "$seconds"; done
run verify-receipt --in-app 5 --digest sha1 --duration "$seconds"
run redeem --duration "$seconds" --purchases $((2500 * (seconds + 2)))
run redeem --rate 500 --duration "$seconds" --purchases $((500 * (seconds + 3)))
run spend --duration "$seconds"
run mixed --duration "$seconds" --purchases $((1000 * (seconds + 2)))
echo; echo "\$ iap-bench preload --data-dir $data --accounts 200000 --ledger-rows 1000000"
"$bench" preload --data-dir "$data" --accounts 200000 --ledger-rows 1000000
run redeem --duration "$seconds" --purchases $((2500 * (seconds + 2)))
run spend --duration "$seconds"
