#!/usr/bin/env bash
# Writes a self-signed certificate for localhost to deploy/nginx/tls/ (tls.crt, tls.key), for
# trying the compose file; a real deployment mounts its own certificate there.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/tls"
mkdir -p "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$dir/tls.key" -out "$dir/tls.crt"
echo "wrote $dir/tls.crt and $dir/tls.key"
