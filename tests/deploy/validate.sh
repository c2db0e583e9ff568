#!/usr/bin/env bash
# validate.sh DEPLOY_DIR: checks deploy/ with the real tools and no daemon or cluster (ctest
# deploy_validate, label unit):
#   promtool check config / check rules / test rules (Debian's prometheus package),
#   nginx -t on nginx.conf with a throwaway self-signed certificate and the upstream pointed at
#   loopback (nginx resolves upstream names while it loads the file),
#   check_deploy.py (compose, Kubernetes manifests, Dockerfile, provisioning: every name one file
#   gives another exists), then the same on broken copies, each of which must be caught.
# Exits 77 (ctest: skipped) saying why when a tool is missing; scripts/install-deps.sh installs them.
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 DEPLOY_DIR" >&2
  exit 2
fi
deploy=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
for tool in promtool nginx openssl python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIPPED: $tool is not installed (scripts/install-deps.sh installs it)"
    exit 77
  fi
done
if ! python3 -c 'import yaml' 2>/dev/null; then
  echo "SKIPPED: python3-yaml is not installed (scripts/install-deps.sh installs it)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== promtool"
promtool check config "$deploy/prometheus/prometheus.yml"
promtool check rules "$deploy/prometheus/alerts.yml"
(cd "$deploy/prometheus" && promtool test rules alerts_test.yml)

echo "== nginx -t"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
  -keyout "$tmp/tls.key" -out "$tmp/tls.crt" 2>/dev/null
grep -q '/etc/nginx/tls/tls.crt' "$deploy/nginx/nginx.conf"
sed -e "s#/etc/nginx/tls/#$tmp/#g" -e 's#server router:#server 127.0.0.1:#' \
  "$deploy/nginx/nginx.conf" >"$tmp/nginx.conf"
nginx -t -p "$tmp" -e "$tmp/error.log" -c "$tmp/nginx.conf" -g "pid $tmp/nginx.pid;"

echo "== check_deploy.py"
python3 "$here/check_deploy.py" "$deploy"

# Broken copies: break(FILE, SED_EXPR, EXPECTED_MESSAGE).
echo "== check_deploy.py catches broken copies"
broken() {
  rm -rf "$tmp/repo"
  mkdir -p "$tmp/repo"
  cp -r "$deploy" "$tmp/repo/deploy"
  cp -r "$(dirname "$deploy")/scripts" "$(dirname "$deploy")/models" "$tmp/repo/"
  sed -i -e "$2" "$tmp/repo/deploy/$1"
  if cmp -s "$deploy/$1" "$tmp/repo/deploy/$1"; then
    echo "the edit '$2' changed nothing in $1" >&2
    exit 1
  fi
  local out
  if out=$(python3 "$here/check_deploy.py" "$tmp/repo/deploy"); then
    echo "check_deploy.py accepted $1 edited by '$2':" >&2
    echo "$out" >&2
    exit 1
  fi
  if ! grep -qF -- "$3" <<<"$out"; then
    echo "check_deploy.py on $1 edited by '$2' did not say '$3':" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "caught: $1 '$2' -> $3"
}
broken compose.yaml '/http:\/\/decode-1:8000/d' \
  'engine decode-1 is not among its --backend URLs'
broken compose.yaml 's#./prometheus/alerts.yml:#./prometheus/alert.yml:#' 'bind mount ./prometheus/alert.yml: missing'
broken compose.yaml 's#target: ${PAGODA_IMAGE_TARGET:-cpu}#target: ${PAGODA_IMAGE_TARGET:-cpu-slim}#' \
  "build target 'cpu-slim' is not a Dockerfile stage"
broken k8s/engines.yaml '0,/replicas: 2/s//replicas: 3/' 'engine pod decode-2 is not among its --backend URLs'
broken k8s/router.yaml 's#http://decode-1.decode:8000#http://decode-1.decoder:8000#' \
  'is not POD.SERVICE of an engine StatefulSet'
broken k8s/grafana.yaml 's#name: grafana-dashboards#name: grafana-dashboard#' \
  'ConfigMap grafana-dashboard is neither generated nor defined'
broken k8s/nginx.yaml 's#tcpSocket: {port: https}#tcpSocket: {port: tls}#' 'readinessProbe port tls'
broken prometheus/prometheus.yml 's#names: \[prefill, decode\]#names: [prefill, decoder]#' \
  'DNS name decoder is no compose service or alias'
broken nginx/nginx.conf 's#server router:8000;#server router:8001;#' 'upstream router:8001'
broken Dockerfile 's#COPY --from=build-gpu /out/lib/#COPY --from=gpu-build /out/lib/#' \
  'COPY --from=gpu-build: no earlier stage'
echo "validate.sh: ok"
