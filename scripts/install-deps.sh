#!/usr/bin/env bash
# Installs every Debian package that building and testing pagoda needs. Idempotent: packages that are
# already present are skipped, and `apt-get update` runs at most once per invocation.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang-format clang libclang-rt-14-dev
  nlohmann-json3-dev libpcre2-dev libdnnl-dev libcli11-dev libspdlog-dev libfmt-dev libxxhash-dev
  libboost-dev libssl-dev libucx-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-yaml
  # deploy/ checks (tests/deploy, tests/server/deploy_prometheus.test.mjs): promtool and a real
  # Prometheus scraping the engines, nginx -t on the TLS front end.
  prometheus nginx openssl
)

# The server tests drive pagoda with the official openai npm client. Machines of this kind come with
# Node.js 20; where none is installed, Debian's nodejs and npm are (a second Node.js would clash).
command -v node >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
