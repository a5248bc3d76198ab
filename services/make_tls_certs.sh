#!/usr/bin/env bash
# A private CA and certificates for the two services, for running them with TLS outside compose
# (the compose "tls" profile makes its own, in a volume). Writes DIR (default services/tls, which
# git ignores): ca.pem (pin it: --labels-ca-file / LabelsPartyClient(ca_file=...)), labels.pem,
# labels-key.pem, features.pem, features-key.pem (keys 0600). The CA's private key is not kept.
#   services/make_tls_certs.sh [DIR] [--name HOST ...]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
DIR="${1:-services/tls}"
shift || true
exec "$PY" -m shared.service.tls "$DIR" "$@"
