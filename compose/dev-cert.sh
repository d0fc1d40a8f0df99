#!/usr/bin/env bash
# Makes a self-signed TLS certificate for localhost, 127.0.0.1 and `edge` (its name inside Docker Compose,
# where the simulator delivers notifications to it) for the edge in development:
#   compose/dev-cert.sh DIR   ->  DIR/cert.pem, DIR/key.pem (mode 0600), kept if they exist.
# Clients trust it with `--ca DIR/cert.pem` (iap) or `curl --cacert DIR/cert.pem`. Production uses a
# certificate from a real certificate authority instead.
set -euo pipefail
dir=${1:?usage: compose/dev-cert.sh DIR}
mkdir -p "$dir"
if [[ -s $dir/cert.pem && -s $dir/key.pem ]]; then exit 0; fi
(umask 077
 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
   -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,DNS:edge,IP:127.0.0.1" \
   -addext "basicConstraints=critical,CA:FALSE" \
   -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null)
chmod 644 "$dir/cert.pem"
