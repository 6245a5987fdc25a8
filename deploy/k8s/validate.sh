#!/usr/bin/env bash
# Offline check of the Kubernetes manifests (issue 4, part 3). No cluster needed.
#
#   deploy/k8s/validate.sh [DIR]      (DIR defaults to this folder; any copy of it works)
#
# 1. Renders DIR with `kubectl kustomize` (or `kustomize build`), twice: as shipped, and with
#    the results-pvc component enabled the way the README says (uncommenting `components:`).
#    Any kustomize warning fails the check.
# 2. check.py validates every rendered object (and results-pvc/fetch-results.yaml) against
#    the Kubernetes JSON schemas shipped in the PyPI package kubernetes-validate, in strict
#    mode (unknown fields fail), for each version in CREST_K8S_VERSIONS, and asserts what the
#    deployment relies on (Job + Service + Deployment, Guaranteed-QoS integer CPUs,
#    anti-affinity, CREST_COORDINATOR -> the Service, token from a Secret, ...).
#    Its last line is the summary: "k8s: N passed, M failed"; exit 1 on any problem.
#
# kubernetes-validate is installed with pip into its own virtualenv (CREST_K8S_VENV) when
# missing; its schemas are inside the package, so validation itself needs no network.
set -euo pipefail

KV_VERSION=1.37.0                                  # kubernetes-validate, ships schemas 1.25-1.37
K8S_VERSIONS=${CREST_K8S_VERSIONS:-"1.29 1.37"}    # oldest we support, newest it ships
here=$(cd "$(dirname "$0")" && pwd)
dir=$(cd "${1:-$here}" && pwd)
venv=${CREST_K8S_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/crest/k8s-validate-$KV_VERSION}

die() { echo "validate.sh: FAIL: $*" >&2; exit 1; }

# --- renderer --------------------------------------------------------------------------
if command -v kustomize >/dev/null 2>&1; then
  render() { kustomize build "$1"; }
  renderer="kustomize $(kustomize version 2>/dev/null | head -1)"
elif command -v kubectl >/dev/null 2>&1; then
  render() { kubectl kustomize "$1"; }
  renderer="kubectl kustomize ($(kubectl version --client 2>/dev/null | grep -i kustomize | head -1))"
else
  die "neither kubectl nor kustomize is on PATH; install kubectl (>= 1.21, for kustomize >= 4.1)"
fi

# --- kubernetes-validate ---------------------------------------------------------------
if ! "$venv/bin/python" -c "
import sys
from kubernetes_validate.version import __version__ as v
sys.exit(v != '$KV_VERSION')" 2>/dev/null; then
  echo "validate.sh: installing kubernetes-validate==$KV_VERSION into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
      "kubernetes-validate==$KV_VERSION" 'tomli==2.0.1; python_version < "3.11"' \
    || die "pip install kubernetes-validate==$KV_VERSION failed"
fi

# --- render ----------------------------------------------------------------------------
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

render_to() {  # render_to SRC OUT
  if ! render "$1" >"$2" 2>"$work/stderr"; then
    cat "$work/stderr" >&2
    die "rendering $1 failed"
  fi
  if [ -s "$work/stderr" ]; then
    cat "$work/stderr" >&2
    die "rendering $1 printed warnings (above)"
  fi
}

render_to "$dir" "$work/default.yaml"

# The per-run form beside it (deploy/k8s-run: a kustomization over this one).
run_dir="$dir/../k8s-run"
[ -f "$run_dir/kustomization.yaml" ] || die "no per-run form at $run_dir"
render_to "$run_dir" "$work/run.yaml"

# The PVC variant, enabled exactly as README.md tells users to: uncomment `components:`.
cp -r "$dir" "$work/pvc"
kz="$work/pvc/kustomization.yaml"
grep -q '^# components:$' "$kz" && grep -q '^#   - results-pvc$' "$kz" \
  || die "kustomization.yaml lost its commented '# components:' / '#   - results-pvc' lines"
sed -i -e 's/^# components:$/components:/' -e 's/^#   - results-pvc$/  - results-pvc/' "$kz"
render_to "$work/pvc" "$work/with-pvc.yaml"

echo "validate.sh: rendered with $renderer; kubernetes-validate $KV_VERSION; Kubernetes $K8S_VERSIONS (strict)"

# The manifests run /usr/local/bin/crest and /usr/local/bin/crest-worker; say so loudly if
# the image recipe does not seem to put them there (a warning: the Dockerfile is free-form).
dockerfile="$dir/../Dockerfile"
if [ -f "$dockerfile" ] && ! grep -q '/usr/local/bin' "$dockerfile"; then
  echo "validate.sh: WARNING: $dockerfile never mentions /usr/local/bin; the manifests' command paths may not match the image" >&2
fi

# --- validate and assert ---------------------------------------------------------------
# check.py's last line is the summary: "k8s: N passed, M failed".
kargs=()
for v in $K8S_VERSIONS; do kargs+=(-k "$v"); done
if ! (cd "$work" && "$venv/bin/python" "$here/check.py" "${kargs[@]}" \
        --schema-only "$dir/results-pvc/fetch-results.yaml" --run run.yaml default.yaml with-pvc.yaml); then
  die "the Kubernetes manifests in $dir have problems (FAIL lines above)"
fi

# The per-run checks can fail: workers that are retried and never exit must be refused.
mkdir -p "$work/broken"
cp -r "$dir" "$work/broken/k8s"
cp -r "$run_dir" "$work/broken/k8s-run"
sed -i -e 's/backoffLimit: 0/backoffLimit: 2/' -e '/name: CREST_ONE_RUN/,+1d' "$work/broken/k8s-run/workers-job.yaml"
render_to "$work/broken/k8s-run" "$work/broken.yaml"
if (cd "$work" && "$venv/bin/python" "$here/check.py" "${kargs[@]}" --run broken.yaml >"$work/broken.out" 2>&1); then
  die "check.py passed a per-run form whose workers are retried and never exit"
fi
grep -q "crest-workers: backoffLimit must be 0" "$work/broken.out" && grep -q "CREST_ONE_RUN must be true" "$work/broken.out" \
  || { cat "$work/broken.out" >&2; die "check.py refused the broken per-run form without naming why"; }
echo "validate.sh: a broken per-run form is refused, naming backoffLimit and CREST_ONE_RUN"
