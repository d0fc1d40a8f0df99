#!/usr/bin/env bash
# Builds the suite's executables in release mode, one `swift build --product` at a time (given several
# --product flags, one `swift build` builds only the last). compose/up.sh and compose/Dockerfile both use
# it; Tests/ComposeTests checks that it names every executable product of Package.swift.
#   compose/build.sh [OUT_DIR]        OUT_DIR: copy the binaries there too
#   IAP_SWIFT_BUILD_FLAGS="--static-swift-stdlib" compose/build.sh /out
set -euo pipefail
cd "$(dirname "$0")/.."
# Runtime exclusivity checks off in the wire modules (Package.swift says what it measured to buy).
export IAP_UNCHECKED_EXCLUSIVITY=${IAP_UNCHECKED_EXCLUSIVITY:-1}
products=(accounts-service catalog-service verification-service fulfillment-service appstore-sim play-sim edge-service console-service iap)
# IAP_BUILD_PROGRESS=1 (compose/up.sh): instead of the compiler's lines, one line per tenth of each product's build on
# standard error, with the time so far; the compiler's output goes to $IAP_BUILD_LOG, whose end is shown if it fails.
progress=${IAP_BUILD_PROGRESS:-0}
log=${IAP_BUILD_LOG:-/tmp/iap-build.log}
started=$SECONDS
start=$(date +%s)
i=0
for product in "${products[@]}"; do
  i=$((i + 1))
  if [[ $progress == 1 ]]; then
    echo "  [$i/${#products[@]}] $product" >&2
    # shellcheck disable=SC2086  # extra flags are words on purpose
    if ! swift build -c release ${IAP_SWIFT_BUILD_FLAGS:-} --product "$product" 2>&1 | tee -a "$log" | awk -v start="$start" '
      /^\[[0-9]+\/[0-9]+\]/ {
        split(substr($1, 2, length($1) - 2), step, "/")
        if (step[2] >= 50) {
          tenth = int(step[1] * 10 / step[2])
          if (tenth > shown) {
            shown = tenth
            "date +%s" | getline now
            close("date +%s")
            printf "      %d%% of %d steps, %d s so far\n", tenth * 10, step[2], now - start > "/dev/stderr"
          }
        }
      }'; then
      echo "the build of $product failed; the end of $log:" >&2
      tail -n 40 "$log" >&2
      exit 1
    fi
  else
    # shellcheck disable=SC2086  # extra flags are words on purpose
    swift build -c release ${IAP_SWIFT_BUILD_FLAGS:-} --product "$product"
  fi
done
if [[ $progress == 1 ]]; then echo "  built in $((SECONDS - started)) s" >&2; fi
if [[ $# -ge 1 ]]; then
  mkdir -p "$1"
  # shellcheck disable=SC2086
  bin=$(swift build -c release ${IAP_SWIFT_BUILD_FLAGS:-} --show-bin-path)
  for product in "${products[@]}"; do cp "$bin/$product" "$1/"; done
fi
