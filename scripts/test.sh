#!/usr/bin/env bash
# The project's test command: installs what the build and the tests need (protoc and its
# well-known types, redis-server, etcd, ZooKeeper, PostgreSQL) when missing, then builds once
# and runs every test of the workspace with every feature — unit, integration, conformance,
# harness and doc tests (the README's code blocks included).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh

echo "==> cargo test --workspace --all-features"
cargo test --workspace --all-features "$@"
