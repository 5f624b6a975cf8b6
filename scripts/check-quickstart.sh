#!/usr/bin/env bash
# Guards the newcomer's two builds that must work on a machine with nothing but Rust (and a C
# compiler): the README's first command, `cargo run -p dlock-examples --bin quickstart`, and
# the command line's install line, `cargo install --path dlock-core/cli`:
#   1. neither dependency tree (the examples with default features, the dlock-cli package)
#      holds a crate that needs a system tool at build time (the list below is the one place
#      that names them);
#   2. the quickstart runs and passes on the memory backend;
#   3. with a backend URL whose feature is off, it fails with the one-line hint naming the
#      feature and the command that works;
#   4. the `dlock` binary builds with `protoc` out of reach, and pointed at `etcd://` (which
#      the plain install leaves out) names the install line that adds it.
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

# check_tree WHAT CARGO-TREE-ARGS...
check_tree() {
    local what=$1 tree offenders=() crate
    shift
    tree=$(cargo tree "$@" -e normal,build --prefix none --format '{p}' --locked)
    for crate in "${NEEDS_SYSTEM_TOOLS[@]}"; do
        if grep -q "^$crate v" <<<"$tree"; then
            offenders+=("$crate")
        fi
    done
    if [[ ${#offenders[@]} -ne 0 ]]; then
        log "FAIL: $what depends on ${offenders[*]}, which need(s) a system tool at build time;"
        log "it must build with nothing but Rust: put the backend that brings it behind a feature"
        cargo tree "$@" -e normal,build --locked -i "${offenders[0]}" >&2 || true
        return 1
    fi
    log "ok: no crate of $what needs a system tool (${NEEDS_SYSTEM_TOOLS[*]})"
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

check_cli() {
    log "PROTOC=/nonexistent cargo build -p dlock-cli --bin dlock"
    PROTOC=/nonexistent/protoc cargo build --locked -q -p dlock-cli --bin dlock

    local output status
    output=$(env -u DLOCK_URL "${CARGO_TARGET_DIR:-target}/debug/dlock" run --url etcd://127.0.0.1:1 -- true 2>&1) && status=0 || status=$?
    local expected="cargo install --path dlock-core/cli --features etcd"
    if [[ $status -eq 0 || $output != *"$expected"* ]]; then
        log "FAIL: dlock installed without etcd, given etcd://, should fail naming \`$expected\`"
        log "got (exit $status):"
        printf '%s\n' "$output" >&2
        return 1
    fi
    log "ok: dlock builds without protoc, and names the install line etcd:// needs"
}

check_tree "the quickstart's default dependency tree" -p dlock-examples
check_tree "the command line's (dlock-cli)" -p dlock-cli
if [[ ${1:-} != --tree-only ]]; then
    check_run
    check_cli
fi
