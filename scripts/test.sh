#!/usr/bin/env bash
# The one test command (README "Test"): installs what the tests need on a fresh machine,
# builds the workspace once, and runs every test: unit, property and end-to-end.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-test-deps.sh
cargo build --workspace --bins --tests
# One test at a time: the end-to-end tests run real servers and real load on 2 cores.
cargo test --workspace -- --test-threads="${CREST_TEST_THREADS:-1}"
./deploy/k8s/validate.sh  # Kubernetes manifests: kustomize render + schema checks, offline
./deploy/test-compose.sh   # container image + compose cluster, for real (loud skip without a Docker engine)
