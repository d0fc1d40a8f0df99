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
products=(accounts-service catalog-service verification-service fulfillment-service appstore-sim edge-service iap)
# shellcheck disable=SC2086  # extra flags are words on purpose
for product in "${products[@]}"; do
  swift build -c release ${IAP_SWIFT_BUILD_FLAGS:-} --product "$product"
done
if [[ $# -ge 1 ]]; then
  mkdir -p "$1"
  # shellcheck disable=SC2086
  bin=$(swift build -c release ${IAP_SWIFT_BUILD_FLAGS:-} --show-bin-path)
  for product in "${products[@]}"; do cp "$bin/$product" "$1/"; done
fi
