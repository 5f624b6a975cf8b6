#!/usr/bin/env bash
# Installs what dlock's build and test suite need beyond Rust, from Debian/Ubuntu packages:
# protoc and its well-known .proto files (etcd-client's build), the servers and clients the
# tests start (Redis, etcd, ZooKeeper on Java, PostgreSQL), and Apache Curator with javac (the
# ZooKeeper interop tests compile a small Java program against it); then the clients of other
# languages the interop tests run, pinned, under $DLOCK_TEST_PEERS (default
# /opt/dlock-test-peers), where the test harness looks for them: from PyPI, kazoo and redis-py
# in a virtualenv (python/); from npm, node-redlock and ioredis (node/).
#
# Every piece is checked by what it is used for — a binary that runs, the files it reads (e.g.
# protoc *and* google/protobuf/descriptor.proto, ZooKeeper's jar *and* a JVM that loads it) —
# not by one binary's presence. Idempotent: with everything present it installs nothing.
# The packages' own system services are stopped after an install: the tests start their own
# servers on free loopback ports.
#
#   scripts/install-test-deps.sh          install what is missing, then check everything
#   scripts/install-test-deps.sh --check  install nothing; exit 1 naming each missing piece
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

# Runs a command quietly; true when it exits 0.
quietly() { "$@" >/dev/null 2>&1; }

# --- The checks: one function per piece, each trying the piece the way the build or a test
# --- uses it.

check_protoc() { quietly "${PROTOC:-protoc}" --version; }

# etcd-client's build compiles .proto files that import protobuf's well-known types, which
# protoc finds in its include directory (Debian: libprotobuf-dev, /usr/include/google/protobuf).
check_protobuf_well_known_types() {
    local dir status
    dir=$(mktemp -d)
    printf 'syntax = "proto3";\nimport "google/protobuf/descriptor.proto";\nimport "google/protobuf/empty.proto";\n' >"$dir/check.proto"
    quietly "${PROTOC:-protoc}" --proto_path="$dir" --include_imports \
        --descriptor_set_out="$dir/check.pb" "$dir/check.proto" && status=0 || status=$?
    rm -rf "$dir"
    return "$status"
}

check_redis_server() { quietly redis-server --version; }
check_redis_cli() { quietly redis-cli --version; }
check_etcd() { quietly etcd --version; }
check_etcdctl() { ETCDCTL_API=3 quietly etcdctl version; }

# The harness runs `java -cp /usr/share/java/zookeeper.jar ...QuorumPeerMain`: the JVM must
# start and load ZooKeeper's classes (the jar's manifest names the jars it needs).
ZOOKEEPER_JAR=/usr/share/java/zookeeper.jar
check_zookeeper() {
    [[ -f $ZOOKEEPER_JAR ]] && quietly java -cp "$ZOOKEEPER_JAR" org.apache.zookeeper.version.VersionInfoMain
}

# ZooKeeper over TLS (the harness's TLS servers) runs Netty's server, whose codec classes are
# not on the classpath zookeeper.jar's manifest names: the harness adds this jar.
NETTY_CODEC_JAR=/usr/share/java/netty-codec.jar
check_zookeeper_tls() {
    [[ -f $NETTY_CODEC_JAR ]] && java_probe '
public class Probe {
    public static void main(String[] args) throws Exception {
        Class.forName("io.netty.handler.codec.ByteToMessageDecoder");
        Class.forName("io.netty.handler.ssl.SslHandler");
        Class.forName("org.apache.zookeeper.server.NettyServerCnxnFactory");
    }
}' "$ZOOKEEPER_JAR:$NETTY_CODEC_JAR"
}

# Runs javac and java on a probe program in a temp dir: compiles `$1` (a class named Probe)
# against the classpath `$2`, then runs it; true when both succeed.
java_probe() {
    local source=$1 classpath=$2 dir status
    dir=$(mktemp -d)
    printf '%s\n' "$source" >"$dir/Probe.java"
    quietly javac -cp "$classpath" -d "$dir" "$dir/Probe.java" &&
        quietly java -cp "$classpath:$dir" Probe && status=0 || status=$?
    rm -rf "$dir"
    return "$status"
}

check_javac() { java_probe 'public class Probe { public static void main(String[] a) {} }' .; }

# The ZooKeeper interop tests compile a program that drives Curator's lock recipes with javac
# and run it with java on this classpath: the jars of Debian's libcurator-recipes-java and the
# ones they need.
CURATOR_CLASSPATH=/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:/usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/guava.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar
check_curator() {
    java_probe '
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.retry.RetryOneTime;
public class Probe {
    public static void main(String[] args) {
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString("127.0.0.1:1").retryPolicy(new RetryOneTime(1)).build();
        new InterProcessMutex(client, "/probe/mutex");
        new InterProcessReadWriteLock(client, "/probe/rw");
        new InterProcessSemaphoreV2(client, "/probe/semaphore", 2);
        client.close();
    }
}' "$CURATOR_CLASSPATH"
}

# The harness runs initdb and postgres from /usr/lib/postgresql/<version>/bin, as the
# `postgres` system user when it runs as root (the server refuses to run as root). The bench's
# server preloads pg_stat_statements (its library and its extension files).
check_postgres_server() {
    local bin version
    for bin in /usr/lib/postgresql/*/bin; do
        version=$(basename "$(dirname "$bin")")
        if quietly "$bin/initdb" --version && quietly "$bin/postgres" --version \
            && [[ -f "$bin/../lib/pg_stat_statements.so" ]] \
            && [[ -f "/usr/share/postgresql/$version/extension/pg_stat_statements.control" ]]; then
            [[ $(id -u) -ne 0 ]] || quietly id postgres
            return
        fi
    done
    return 1
}

check_psql() { quietly psql --version; }

# A server shared by every test of a test binary is started through `setpriv --pdeathsig KILL`,
# so it dies with the binary: setpriv must run a program with that option.
check_setpriv() { quietly setpriv --pdeathsig KILL -- true; }

# The scheduled-jobs skew test runs worker processes with libfaketime preloaded from this path
# (`FAKETIME=+30s`; the multi-threaded variant, for tokio's threads), not through the
# `faketime` wrapper, which forks: the test signals the worker itself. The library must shift
# a program's clock: `date +%s` under it reads at least 25 s ahead of ours.
FAKETIME_LIB=/usr/lib/$(uname -m)-linux-gnu/faketime/libfaketimeMT.so.1
check_faketime() {
    local now shifted
    [[ -f $FAKETIME_LIB ]] || return 1
    now=$(date +%s)
    shifted=$(LD_PRELOAD=$FAKETIME_LIB FAKETIME='+30s' date +%s 2>/dev/null) || return 1
    [[ $shifted =~ ^[0-9]+$ ]] && ((shifted - now >= 25))
}

# virtualenv: the Python peers are installed into one, with pip.
PYTHON=/usr/bin/python3
check_python_venv() {
    local dir status
    dir=$(mktemp -d)
    quietly "$PYTHON" -m venv "$dir/venv" && quietly "$dir/venv/bin/python" -m pip --version \
        && status=0 || status=$?
    rm -rf "$dir"
    return "$status"
}

# node and npm: the Node peers are installed with npm and run with node.
check_node() { quietly node --version && quietly npm --version; }

# Each piece: "the check function|the Debian package that provides it|what it is".
PIECES=(
    "check_protoc|protobuf-compiler|protoc (etcd-client's build)"
    "check_protobuf_well_known_types|libprotobuf-dev|protobuf's well-known .proto files (google/protobuf/descriptor.proto, for etcd-client's build)"
    "check_redis_server|redis-server|redis-server"
    "check_redis_cli|redis-tools|redis-cli (Redis Cluster set-up)"
    "check_etcd|etcd-server|etcd"
    "check_etcdctl|etcd-client|etcdctl (etcd's own lock client)"
    "check_zookeeper|zookeeper|ZooKeeper ($ZOOKEEPER_JAR on a JVM that loads it)"
    "check_javac|default-jdk-headless|javac (compiles the Curator interop tests' Java program)"
    "check_zookeeper_tls|libnetty-java|Netty's codec jar ($NETTY_CODEC_JAR, for ZooKeeper over TLS)"
    "check_curator|libcurator-recipes-java|Apache Curator 5 (its lock recipes, compiled against and run on the JVM)"
    "check_postgres_server|postgresql|PostgreSQL server (initdb, postgres, pg_stat_statements and the postgres user)"
    "check_psql|postgresql-client|psql"
    "check_setpriv|util-linux|setpriv (ties a shared test server's life to its test binary)"
    "check_faketime|faketime|libfaketime ($FAKETIME_LIB: the scheduled-jobs skew test shifts worker processes' clocks)"
    "check_python_venv|python3-venv|Python 3 with venv and pip ($PYTHON, for the Python peers' virtualenv)"
    "check_node|npm|node and npm (the Node peers)"
)

# --- Peers from PyPI and npm: the clients of other languages the interop tests run, pinned,
# --- where the harness finds them: $DLOCK_TEST_PEERS/python (a virtualenv) and
# --- $DLOCK_TEST_PEERS/node (node_modules).
PEERS_DIR=${DLOCK_TEST_PEERS:-/opt/dlock-test-peers}
PYTHON_VENV=$PEERS_DIR/python
PYTHON_PEERS=(kazoo==2.11.0 redis==8.1.0)
NODE_DIR=$PEERS_DIR/node
NODE_PEERS=(redlock@5.0.0-beta.2 ioredis@5.11.1)

# kazoo's lock recipes import, at the pinned version, with the venv's own interpreter.
check_kazoo() {
    quietly "$PYTHON_VENV/bin/python" -c '
import kazoo.version
from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock, ReadLock, WriteLock
assert kazoo.version.__version__ == "2.11.0", kazoo.version.__version__'
}

# redis-py's lock imports, at the pinned version.
check_redis_py() {
    quietly "$PYTHON_VENV/bin/python" -c '
import redis
from redis.lock import Lock
assert redis.__version__ == "8.1.0", redis.__version__'
}

# node-redlock and ioredis load with node, at the pinned versions.
check_node_redlock() {
    NODE_PATH=$NODE_DIR/node_modules quietly node -e '
const Redlock = require("redlock").default;
const Redis = require("ioredis");
const fs = require("fs");
const version = (name) => JSON.parse(fs.readFileSync(process.env.NODE_PATH + "/" + name + "/package.json")).version;
if (typeof Redlock !== "function" || version("redlock") !== "v5.0.0-beta.2" || version("ioredis") !== "5.11.1") process.exit(1);'
}

# Each peer: "the check function|what it is".
PEERS=(
    "check_kazoo|kazoo 2.11.0 (Python's ZooKeeper client) in $PYTHON_VENV"
    "check_redis_py|redis-py 8.1.0 (Python's Redis client) in $PYTHON_VENV"
    "check_node_redlock|node-redlock 5.0.0-beta.2 and ioredis 5.11.1 in $NODE_DIR"
)

missing_peers() {
    local peer check what
    for peer in "${PEERS[@]}"; do
        IFS='|' read -r check what <<<"$peer"
        "$check" || printf '%s\n' "$what"
    done
}

# Creates the virtualenv (if it has no interpreter) and installs the pinned Python peers.
install_python_peers() {
    log "installing ${PYTHON_PEERS[*]} from PyPI into $PYTHON_VENV"
    as_root mkdir -p "$PEERS_DIR"
    [[ -x $PYTHON_VENV/bin/python ]] || as_root "$PYTHON" -m venv "$PYTHON_VENV"
    as_root "$PYTHON_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "${PYTHON_PEERS[@]}"
}

# Installs the pinned Node peers into their own directory.
install_node_peers() {
    log "installing ${NODE_PEERS[*]} from npm into $NODE_DIR"
    as_root mkdir -p "$NODE_DIR"
    as_root npm install --prefix "$NODE_DIR" --no-audit --no-fund --no-save --silent \
        "${NODE_PEERS[@]}"
}

# Installs the peers that are missing (the Debian pieces they need are in place), then checks.
peers() {
    local check_only=$1 missing what
    mapfile -t missing < <(missing_peers)
    [[ ${#missing[@]} -eq 0 ]] && return 0
    for what in "${missing[@]}"; do log "missing: $what"; done
    if $check_only; then
        log "${#missing[@]} peer(s) missing: run scripts/install-test-deps.sh to install them"
        exit 1
    fi
    # (`if`, not `||`: a function run on the right of `||` would run with `set -e` off.)
    if ! check_kazoo || ! check_redis_py; then
        install_python_peers
    fi
    if ! check_node_redlock; then
        install_node_peers
    fi
    mapfile -t missing < <(missing_peers)
    if [[ ${#missing[@]} -ne 0 ]]; then
        for what in "${missing[@]}"; do log "still missing after the install: $what"; done
        exit 1
    fi
    log "installed the peers: ${PYTHON_PEERS[*]} ${NODE_PEERS[*]}"
}

# Prints "package|what" for every piece whose check fails.
missing_pieces() {
    local piece check package what
    for piece in "${PIECES[@]}"; do
        IFS='|' read -r check package what <<<"$piece"
        "$check" || printf '%s|%s\n' "$package" "$what"
    done
}

# Logs each missing piece and its package.
report() {
    local line package what
    for line in "$@"; do
        IFS='|' read -r package what <<<"$line"
        log "missing: $what — Debian package $package"
    done
}

install_packages() {
    if ! command -v apt-get >/dev/null 2>&1; then
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
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        if systemctl is-active --quiet "$service" 2>/dev/null; then
            log "stopping the system service $service (systemctl stop)"
            as_root systemctl stop "$service" || log "could not stop $service (ignored)"
        fi
    elif [[ -x /etc/init.d/$service ]] && command -v service >/dev/null 2>&1; then
        if as_root service "$service" status >/dev/null 2>&1; then
            log "stopping the system service $service (service stop)"
            as_root service "$service" stop >/dev/null 2>&1 || log "could not stop $service (ignored)"
        fi
    fi
}

main() {
    local check_only=false
    case "${1:-}" in
        "") ;;
        --check) check_only=true ;;
        *)
            log "unknown argument '$1' (usage: install-test-deps.sh [--check])"
            exit 2
            ;;
    esac

    local missing packages
    mapfile -t missing < <(missing_pieces)
    if [[ ${#missing[@]} -eq 0 ]]; then
        peers "$check_only"
        log "everything the build and the tests need is installed"
        return 0
    fi
    report "${missing[@]}"
    if $check_only; then
        local peer
        for peer in "${PEERS[@]}"; do log "not checked until the packages are in: ${peer#*|}"; done
        log "${#missing[@]} missing: run scripts/install-test-deps.sh to install them"
        exit 1
    fi

    mapfile -t packages < <(printf '%s\n' "${missing[@]}" | cut -d'|' -f1 | sort -u)
    install_packages "${packages[@]}"

    local service
    for service in redis-server etcd zookeeper postgresql; do
        stop_service "$service"
    done

    mapfile -t missing < <(missing_pieces)
    if [[ ${#missing[@]} -ne 0 ]]; then
        report "${missing[@]}"
        log "still missing after the install"
        exit 1
    fi
    log "done: installed ${packages[*]}; their system services are not running"
    peers false
}

main "$@"
