# Shared helpers for scripts/dev and scripts/test. Sourced, not run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_VERSION="${PG_VERSION:-15}"
PG_BIN="/usr/lib/postgresql/${PG_VERSION}/bin"

say() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
# poll SECONDS COMMAND…: runs COMMAND every quarter second until it succeeds (true), or until
# SECONDS have passed (false).
poll() {
    local tries=$(( $1 * 4 ))
    shift
    for _ in $(seq 1 "$tries"); do
        "$@" && return 0
        sleep 0.25
    done
    return 1
}

# Installs the system packages Datong needs when any is missing (Debian/Ubuntu, as root or with sudo).
ensure_packages() {
    local missing=()
    [ -x "$PG_BIN/initdb" ] || missing+=("postgresql-$PG_VERSION")
    command -v psql >/dev/null 2>&1 || missing+=("postgresql-client-$PG_VERSION")
    pkg-config --exists libpq 2>/dev/null || missing+=(libpq-dev)
    pkg-config --exists libcrypto 2>/dev/null || missing+=(libssl-dev)
    pkg-config --exists zlib 2>/dev/null || missing+=(zlib1g-dev)
    pkg-config --exists libmaxminddb 2>/dev/null || missing+=(libmaxminddb-dev)
    # The User-Agent rules the gateway reads (USER_AGENT_RULES), with uap-core's own test vectors.
    [ -f /usr/share/uap-core/regexes.yaml ] || missing+=(uap-core)
    if [ -n "${DATONG_NEEDS_GEO_FIXTURES:-}" ]; then
        # MaxMind's own writer of test databases (Tests/Fixtures/geo/write-mmdb.pl).
        perl -MMaxMind::DB::Writer::Tree -e 1 2>/dev/null || missing+=(libmaxmind-db-writer-perl)
        python3 -c "import venv, ensurepip" 2>/dev/null || missing+=(python3-venv)
    fi
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    [ -n "${DATONG_NEEDS_HAPROXY:-}" ] && ! command -v haproxy >/dev/null 2>&1 && missing+=(haproxy)
    if [ -n "${DATONG_NEEDS_NET:-}${DATONG_NEEDS_AUTO_FAILOVER:-}" ]; then
        command -v pg_autoctl >/dev/null 2>&1 || missing+=("postgresql-$PG_VERSION-auto-failover" pg-auto-failover-cli)
    fi
    if [ -n "${DATONG_NEEDS_NET:-}" ]; then
        command -v nft >/dev/null 2>&1 || missing+=(nftables)
        command -v iptables >/dev/null 2>&1 || missing+=(iptables)
        command -v ip >/dev/null 2>&1 || missing+=(iproute2)
        # scripts/net-delay.py's NetfilterQueue is built from PyPI into a virtualenv.
        python3 -c "import venv, ensurepip" 2>/dev/null || missing+=(python3-venv)
        [ -f /usr/include/libnetfilter_queue/libnetfilter_queue.h ] || missing+=(libnetfilter-queue-dev)
        python3-config --includes >/dev/null 2>&1 || missing+=(python3-dev)
        command -v cc >/dev/null 2>&1 || missing+=(gcc)
    fi
    [ -n "${DATONG_NEEDS_VALGRIND:-}" ] && ! command -v valgrind >/dev/null 2>&1 && missing+=(valgrind)
    [ -n "${DATONG_NEEDS_VALGRIND:-}" ] && ! command -v objcopy >/dev/null 2>&1 && missing+=(binutils)
    [ -n "${DATONG_NEEDS_VALGRIND:-}" ] && ! command -v cc >/dev/null 2>&1 && missing+=(gcc)
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

# pg_start DIR PORT LOGFILE [OPTIONS]: starts the cluster listening on 127.0.0.1:PORT, socket in
# DIR; OPTIONS are more server options (-c name=value …).
pg_start() {
    local dir="$1" port="$2" log="$3" options="${4:-}"
    touch "$log"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$log"
    as_pg "$PG_BIN/pg_ctl" -D "$dir" -l "$log" -w -t 60 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=500 $options" start >/dev/null
}

# pg_url DATABASE PORT [STANDBY_PORT]: the libpq URI of DATABASE on 127.0.0.1:PORT; with a
# standby, both hosts, and libpq connects to whichever accepts writes (a promoted standby too).
pg_url() {
    if [ -n "${3:-}" ]; then
        echo "postgresql://postgres@127.0.0.1:$2,127.0.0.1:$3/$1?target_session_attrs=read-write"
    else
        echo "postgresql://postgres@127.0.0.1:$2/$1"
    fi
}

# Server options of a hot standby: analysts' long queries are not cancelled by replay.
STANDBY_OPTIONS="-c hot_standby_feedback=on"

# pg_standby PRIMARY_PORT DIR PORT LOGFILE NAME: a hot standby of the primary on PRIMARY_PORT in
# DIR, listening on PORT: a base backup (pg_basebackup) streaming from a replication slot NAME,
# connecting as application NAME (what synchronous_standby_names names). Waits until it streams.
pg_standby() {
    local primary="$1" dir="$2" port="$3" log="$4" name="$5"
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir"
    chmod 700 "$dir"
    as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$primary" -U postgres -D "$dir" \
        --write-recovery-conf --create-slot --slot "$name" --wal-method stream 2> >(grep -v "skipping special file" >&2) >/dev/null
    # The last setting wins: the same connection, named, so that the primary can wait for it.
    echo "primary_conninfo = 'host=127.0.0.1 port=$primary user=postgres application_name=$name'" \
        | as_pg tee -a "$dir/postgresql.auto.conf" >/dev/null
    # The primary's own socket lock came with the backup; the standby has its own.
    rm -f "$dir"/.s.PGSQL.*
    pg_start "$dir" "$port" "$log" "$STANDBY_OPTIONS"
    poll 30 pg_streams "$(pg_url postgres "$primary")" "$name" || die "the standby $name did not start streaming within 30 s; see $log"
}

# pg_streams PRIMARY_URI NAME [sync]: true when the primary streams to the standby connected as
# application NAME (and, with sync, counts it as a synchronous standby).
pg_streams() {
    local sync=""
    [ "${3:-}" = sync ] && sync="AND sync_state IN ('sync', 'quorum')"
    [ "$(psql "$1" -tAc "SELECT count(*) FROM pg_stat_replication WHERE application_name = '$2' AND state = 'streaming' $sync" 2>/dev/null)" = 1 ]
}

# pg_synchronous PORT NAME: from now on a commit on the primary on PORT returns only once standby
# NAME has it (synchronous_commit = on, the default, waits for the standby's flush).
pg_synchronous() {
    psql -h 127.0.0.1 -p "$1" -U postgres -d postgres -q -v ON_ERROR_STOP=1 \
        -c "ALTER SYSTEM SET synchronous_standby_names = '$2'" -c "SELECT pg_reload_conf()" >/dev/null
}

# pg_warm_wal PORT: makes a new cluster write its WAL as one that has run for a while does, into
# recycled segment files. A new cluster has almost none, so its first ~600 MB of WAL go into new
# 16 MB files that PostgreSQL first fills with zeros (wal_init_zero), and a benchmark's first round
# paid for that: p99 60-100 ms at half rate instead of 10-20 (docs/BENCHMARKS.md). About 600 MB of
# WAL from a scratch table, then a checkpoint, which keeps the files for reuse.
pg_warm_wal() {
    psql -h 127.0.0.1 -p "$1" -U postgres -d postgres -q -v ON_ERROR_STOP=1 \
        -c "CREATE TABLE datong_wal_warmup AS SELECT g, repeat('x', 1000) AS filler FROM generate_series(1, 600000) g" \
        -c "DROP TABLE datong_wal_warmup" -c "CHECKPOINT" >/dev/null
}

# haproxy_config OUT SERVICE:PORT:REPLICA_PORT,REPLICA_PORT… …: deploy/haproxy/local.cfg with the
# port each balancer listens on and one server line per replica filled in, written to OUT.
haproxy_config() {
    local out="$1"; shift
    python3 - "$ROOT/deploy/haproxy/local.cfg" "$out" "$@" <<'PY'
import re, sys
template, out, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
ports, servers = {}, {}
for spec in specs:
    name, port, replicas = spec.split(":")
    ports[name] = port
    servers[name] = "\n    ".join(f"server {name}-{i + 1} 127.0.0.1:{p} check" for i, p in enumerate(replicas.split(",")))
text = re.sub(r"\{\{port ([a-z-]+)\}\}", lambda m: ports[m.group(1)], open(template).read()).replace("{{address}}", "127.0.0.1")
text = re.sub(r"\{\{servers ([a-z-]+)\}\}", lambda m: servers[m.group(1)], text)
open(out, "w").write(text)
PY
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

# pg_auto_failover: a monitor and data nodes, each node's pg_autoctl (its keeper) running as the
# postgres user, its log in DIR.log, its pg_autoctl files under DIR.home. NET is a scripts/net
# network and HOST one of its hosts, or NET is empty and everything runs on 127.0.0.1.
paf_address() { if [ -n "$1" ]; then "$ROOT/scripts/net" ip "$1" "$2"; else echo 127.0.0.1; fi; }

# paf_command NET HOST DIR: sets PAF_COMMAND to the command that runs pg_autoctl for the node in DIR
# on HOST, as the postgres user.
paf_command() {
    local net="$1" host="$2" dir="$3"
    PAF_COMMAND=()
    [ -z "$net" ] || PAF_COMMAND=("$ROOT/scripts/net" exec "$net" "$host")
    PAF_COMMAND+=(runuser -u postgres -- env HOME="$dir.home" XDG_RUNTIME_DIR="$dir.home" pg_autoctl)
    mkdir -p "$dir.home"
    chown postgres:postgres "$dir.home" "$(dirname "$dir")"
}

# paf_autoctl NET HOST DIR ARGUMENT…: pg_autoctl ARGUMENT… for the node in DIR, on HOST.
paf_autoctl() {
    local dir="$3"
    paf_command "$1" "$2" "$3"
    shift 3
    "${PAF_COMMAND[@]}" "$@" >>"$dir.log" 2>&1
}

# paf_run NET HOST DIR ARGUMENT…: the same in the background (a keeper: `run`, `create … --run`), in
# a session of its own and holding none of this shell's files (a pipe it was run into ends).
paf_run() {
    local dir="$3"
    paf_command "$1" "$2" "$3"
    shift 3
    setsid "${PAF_COMMAND[@]}" "$@" >>"$dir.log" 2>&1 </dev/null &
}

# paf_monitor NET HOST DIR PORT: a monitor on HOST, listening on PORT; connections from its subnet
# are trusted (a throwaway or development cluster). Prints the monitor's URI.
paf_monitor() {
    local net="$1" host="$2" dir="$3" port="$4" address
    address="$(paf_address "$net" "$host")"
    paf_autoctl "$net" "$host" "$dir" create monitor --pgdata "$dir" --pgport "$port" --hostname "$address" \
        --auth trust --no-ssl --pgctl "$PG_BIN/pg_ctl" || die "pg_autoctl create monitor failed; see $dir.log"
    [ -z "$net" ] || echo "host all all ${address%.*}.0/24 trust" >>"$dir/pg_hba.conf"
    paf_run "$net" "$host" "$dir" run --pgdata "$dir"
    paf_uri "$address" "$port"
}

# paf_uri ADDRESS PORT: the URI of the monitor there. A keeper holds its connection to the monitor
# open and pg_autoctl sets no TCP timeouts: a call in flight when a partition begins waited for the
# kernel's retransmissions (tcp_retries2, ~15 min), so the isolated primary's keeper never noticed
# it was cut off and never fenced it (seen in the drill). With these settings, unanswered data
# breaks the connection after 5 s and an idle one after 5 + 2 × 3 s; the keeper then notices.
paf_uri() {
    echo "postgres://autoctl_node@$1:$2/pg_auto_failover?sslmode=disable&tcp_user_timeout=5000&keepalives_idle=5&keepalives_interval=2&keepalives_count=3"
}

# paf_node NET HOST DIR PORT MONITOR_URI: a data node named HOST on HOST, listening on PORT and
# registered with the monitor (the first becomes the primary, the next its synchronous standby,
# copied from it with pg_basebackup). DIR may hold a cluster already: it is registered as it is.
paf_node() {
    local net="$1" host="$2" dir="$3" port="$4" monitor="$5" address
    address="$(paf_address "$net" "$host")"
    paf_run "$net" "$host" "$dir" create postgres --pgdata "$dir" --pgport "$port" --name "$host" \
        --hostname "$address" --listen "$address" --monitor "$monitor" --auth trust --no-ssl \
        --pgctl "$PG_BIN/pg_ctl" --run
}

# paf_deployed NET HOST HOME PORT monitor|node [MONITOR_HOST:PORT]: a node as deploy/scale runs it
# in a container (deploy/postgres/pg-auto-failover.sh, passwords required, its own pg_hba.conf),
# on HOST, keeping everything in HOME, listening on PORT. The passwords come from this shell's
# DATONG_MONITOR_PASSWORD, DATONG_REPLICATION_PASSWORD, DATONG_DB_PASSWORD and
# DATONG_ANALYST_PASSWORD. Its pg_autoctl keeps the cluster in HOME/data.
paf_deployed() {
    local net="$1" host="$2" home="$3" port="$4" role="$5" monitor="${6:-}"
    mkdir -p "$home" "$home.tmp"
    # A copy the postgres user can read wherever this checkout is (CI's clone is in a private directory).
    cp "$ROOT/deploy/postgres/pg-auto-failover.sh" "$ROOT/deploy/postgres/analyst-role.sql" "$home.tmp/"
    chown -R postgres:postgres "$home" "$home.tmp"
    cd "$home.tmp"
    setsid "$ROOT/scripts/net" exec "$net" "$host" runuser -u postgres -- env -i \
        PATH="$PG_BIN:/usr/local/bin:/usr/bin:/bin" HOME="$home.tmp" TMPDIR="$home.tmp" PGPORT="$port" \
        DATONG_PG_HOME="$home" DATONG_PG_HOSTNAME="$(paf_address "$net" "$host")" DATONG_PG_NAME="$host" \
        DATONG_PG_MONITOR="$monitor" DATONG_ANALYST_SQL="$home.tmp/analyst-role.sql" \
        DATONG_MONITOR_PASSWORD="$DATONG_MONITOR_PASSWORD" DATONG_REPLICATION_PASSWORD="$DATONG_REPLICATION_PASSWORD" \
        DATONG_DB_PASSWORD="$DATONG_DB_PASSWORD" DATONG_ANALYST_PASSWORD="$DATONG_ANALYST_PASSWORD" \
        "$home.tmp/pg-auto-failover.sh" "$role" >>"$home.log" 2>&1 </dev/null &
    cd - >/dev/null
}

# paf_running DIR: true while the pg_autoctl of the node in DIR runs.
paf_running() { pgrep -f "pg_autoctl .*--pgdata $1( |\$)" >/dev/null; }

# paf_states MONITOR_URI: every node as "name:reported/goal", in order of registration.
paf_states() {
    psql "$1" -tAc "SELECT string_agg(nodename || ':' || reportedstate || '/' || goalstate, ' ' ORDER BY nodeid) FROM pgautofailover.node" 2>/dev/null || true
}

# paf_wait MONITOR_URI PATTERN SECONDS: waits until paf_states matches the shell PATTERN.
paf_wait() {
    local states
    for _ in $(seq 1 $(( $3 * 2 ))); do
        states="$(paf_states "$1")"
        # shellcheck disable=SC2254
        case "$states" in $2) return 0 ;; esac
        sleep 0.5
    done
    die "pg_auto_failover did not reach $2 within $3 s (now: ${states:-no answer})"
}

# paf_wait_monitor MONITOR_URI SECONDS: waits until the monitor answers.
paf_wait_monitor() {
    poll "$2" psql "$1" -tAc "SELECT 1" >/dev/null 2>&1 || die "the pg_auto_failover monitor did not answer within $2 s"
}

# paf_stop DIR…: stops the pg_autoctl of each node (and its PostgreSQL), DIR being its cluster.
paf_stop() {
    local dirs dir
    dirs="--pgdata ($(IFS='|'; echo "$*"))( |\$)"
    # SIGTERM to each keeper is `pg_autoctl stop`: its PostgreSQL stops, then the keeper.
    pkill -TERM -f "pg_autoctl (run|create [a-z]+) $dirs" || true
    for _ in $(seq 1 40); do
        pgrep -f "pg_autoctl (run|create [a-z]+) $dirs" >/dev/null || break
        sleep 0.25
    done
    pkill -9 -f "pg_autoctl.*$dirs" || true
    for dir in "$@"; do pg_stop "$dir"; done
}

# geo_fixtures DIR: the test IP databases (Tests/Fixtures/geo): a MaxMind DB by MaxMind's Perl
# writer, ip2region xdb files with the answers of ip2region's own Python searcher (PyPI
# py-ip2region, in a virtualenv in DIR).
IP2REGION_PY_VERSION=3.0.6
geo_fixtures() {
    local dir="$1"
    mkdir -p "$dir"
    perl "$ROOT/Tests/Fixtures/geo/write-mmdb.pl" "$dir/city.mmdb"
    python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "py-ip2region==$IP2REGION_PY_VERSION"
    "$dir/venv/bin/python" "$ROOT/Tests/Fixtures/geo/write-xdb.py" "$dir"
}
