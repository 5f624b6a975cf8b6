#!/usr/bin/env bash
# The project's test command: installs the servers the tests start (redis-server, etcd,
# ZooKeeper, PostgreSQL, protoc) when missing, then builds once and runs every test of the
# workspace with every feature — unit, integration, conformance, harness and doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh

echo "==> cargo test --workspace --all-features"
cargo test --workspace --all-features "$@"
