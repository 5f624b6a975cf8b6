#!/usr/bin/env bash
# Installs the servers the dlock test suite starts (Redis, etcd, ZooKeeper, PostgreSQL) and
# protoc, from Debian/Ubuntu packages, when any of them is missing. Idempotent: with everything
# present it installs nothing. The packages' own system services are stopped after an install:
# the tests start their own servers on free loopback ports.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

log() { printf 'install-test-deps: %s\n' "$*"; }

# Runs a command as root: directly when root, else through sudo.
as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        log "need root (or sudo) to run: $*"
        exit 1
    fi
}

have_binary() { command -v "$1" >/dev/null 2>&1; }

have_postgres_server() {
    local bin
    for bin in /usr/lib/postgresql/*/bin; do
        [[ -x $bin/initdb && -x $bin/postgres ]] && return 0
    done
    return 1
}

# Prints the packages whose binaries are missing, one per line.
missing_packages() {
    have_binary redis-server || echo redis-server
    have_binary redis-cli || echo redis-tools
    have_binary etcd || echo etcd-server
    have_binary etcdctl || echo etcd-client
    # ZooKeeper runs on Java: the package pulls in a JRE.
    { [[ -f /usr/share/java/zookeeper.jar ]] && have_binary java; } || echo zookeeper
    have_postgres_server || echo postgresql
    have_binary protoc || echo protobuf-compiler
}

install_packages() {
    if ! have_binary apt-get; then
        log "apt-get not found: install these packages (or their equivalents) by hand: $*"
        exit 1
    fi
    log "apt-get update"
    as_root apt-get update -q
    log "apt-get install $*"
    if ! as_root apt-get install -y -q --no-install-recommends "$@"; then
        log "install failed; updating the package lists and retrying once"
        as_root apt-get update -q
        as_root apt-get install -y -q --no-install-recommends "$@"
    fi
}

# Stops a system service a package may have started on its default port (tolerates failure).
stop_service() {
    local service=$1
    if [[ -d /run/systemd/system ]] && have_binary systemctl; then
        if systemctl is-active --quiet "$service" 2>/dev/null; then
            log "stopping the system service $service (systemctl stop)"
            as_root systemctl stop "$service" || log "could not stop $service (ignored)"
        fi
    elif [[ -x /etc/init.d/$service ]] && have_binary service; then
        if as_root service "$service" status >/dev/null 2>&1; then
            log "stopping the system service $service (service stop)"
            as_root service "$service" stop >/dev/null 2>&1 || log "could not stop $service (ignored)"
        fi
    fi
}

main() {
    local missing
    mapfile -t missing < <(missing_packages)
    if [[ ${#missing[@]} -eq 0 ]]; then
        log "all test servers are installed (redis-server, redis-cli, etcd, etcdctl, ZooKeeper, PostgreSQL, protoc); nothing to do"
        return 0
    fi
    log "missing packages: ${missing[*]}"
    install_packages "${missing[@]}"

    local service
    for service in redis-server etcd zookeeper postgresql; do
        stop_service "$service"
    done

    mapfile -t missing < <(missing_packages)
    if [[ ${#missing[@]} -ne 0 ]]; then
        log "still missing after the install: ${missing[*]}"
        exit 1
    fi
    log "done: installed the test servers; their system services are not running"
}

main "$@"
