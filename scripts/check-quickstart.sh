#!/usr/bin/env bash
# Guards the README's first command, `cargo run -p dlock-examples --bin quickstart`, which must
# build and run on a machine with nothing but Rust:
#   1. the examples' dependency tree with default features holds no crate that needs a system
#      tool at build time (the list below is the one place that names them);
#   2. the quickstart runs and passes on the memory backend;
#   3. with a backend URL whose feature is off, it fails with the one-line hint naming the
#      feature and the command that works.
# `.ci/run` calls it; `--tree-only` does step 1 alone (no build).
set -euo pipefail
cd "$(dirname "$0")/.."

# Crates whose build script needs a tool or library from the system (protoc, OpenSSL, cmake).
NEEDS_SYSTEM_TOOLS=(
    prost-build
    tonic-build
    tonic-prost-build
    etcd-client
    openssl-sys
    protobuf-src
)

log() { printf 'check-quickstart: %s\n' "$*"; }

check_tree() {
    local tree offenders=() crate
    tree=$(cargo tree -p dlock-examples -e normal,build --prefix none --format '{p}' --locked)
    for crate in "${NEEDS_SYSTEM_TOOLS[@]}"; do
        if grep -q "^$crate v" <<<"$tree"; then
            offenders+=("$crate")
        fi
    done
    if [[ ${#offenders[@]} -ne 0 ]]; then
        log "FAIL: with default features, dlock-examples depends on ${offenders[*]}, which need(s) a system tool at build time;"
        log "the quickstart must build with nothing but Rust: put the backend that brings it behind a feature"
        cargo tree -p dlock-examples -e normal,build --locked -i "${offenders[0]}" >&2 || true
        return 1
    fi
    log "ok: no crate of the quickstart's default dependency tree needs a system tool (${NEEDS_SYSTEM_TOOLS[*]})"
}

check_run() {
    log "cargo run -p dlock-examples --bin quickstart"
    env -u DLOCK_URL cargo run --locked -q -p dlock-examples --bin quickstart >/dev/null

    local url=redis://127.0.0.1:1 output status
    output=$(DLOCK_URL=$url cargo run --locked -q -p dlock-examples --bin quickstart 2>&1) && status=0 || status=$?
    local expected="run: DLOCK_URL=$url cargo run -p dlock-examples --features redis --bin quickstart"
    if [[ $status -eq 0 || $output != *"$expected" || $(wc -l <<<"$output") -ne 1 ]]; then
        log "FAIL: DLOCK_URL=$url without the redis feature should fail with one line ending in"
        log "  $expected"
        log "got (exit $status):"
        printf '%s\n' "$output" >&2
        return 1
    fi
    log "ok: the quickstart passes on memory, and names the feature a redis:// URL needs"
}

check_tree
if [[ ${1:-} != --tree-only ]]; then
    check_run
fi
