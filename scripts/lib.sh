# Shared helpers for scripts/dev and scripts/test. Sourced, not run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_VERSION="${PG_VERSION:-15}"
PG_BIN="/usr/lib/postgresql/${PG_VERSION}/bin"

say() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Installs the system packages Datong needs when any is missing (Debian/Ubuntu, as root or with sudo).
ensure_packages() {
    local missing=()
    [ -x "$PG_BIN/initdb" ] || missing+=("postgresql-$PG_VERSION")
    command -v psql >/dev/null 2>&1 || missing+=("postgresql-client-$PG_VERSION")
    pkg-config --exists libpq 2>/dev/null || missing+=(libpq-dev)
    pkg-config --exists libcrypto 2>/dev/null || missing+=(libssl-dev)
    pkg-config --exists zlib 2>/dev/null || missing+=(zlib1g-dev)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Runs a PostgreSQL server binary as the postgres user when we are root (initdb refuses root).
as_pg() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# pg_init DIR: a new cluster in DIR (trust auth for local connections only, UTF-8).
pg_init() {
    local dir="$1"
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir"
    chmod 700 "$dir"
    as_pg "$PG_BIN/initdb" -D "$dir" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
}

# pg_start DIR PORT LOGFILE: starts the cluster listening on 127.0.0.1:PORT, socket in DIR.
pg_start() {
    local dir="$1" port="$2" log="$3"
    touch "$log"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$log"
    as_pg "$PG_BIN/pg_ctl" -D "$dir" -l "$log" -w -t 60 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=500" start >/dev/null
}

pg_stop() {
    local dir="$1"
    as_pg "$PG_BIN/pg_ctl" -D "$dir" -m fast -w stop >/dev/null 2>&1 || true
}

pg_running() {
    as_pg "$PG_BIN/pg_ctl" -D "$1" status >/dev/null 2>&1
}

# A TCP port nobody listens on now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# N distinct TCP ports nobody listens on now, one per line. Asked for together (all bound at once),
# so the system cannot hand out the same port twice, as separate free_port calls can.
free_ports() {
    python3 -c '
import socket, sys
sockets = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in sockets: s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in sockets))
for s in sockets: s.close()' "$1"
}
