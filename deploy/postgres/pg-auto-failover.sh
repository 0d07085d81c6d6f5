#!/bin/sh
# One pg_auto_failover node of Datong's PostgreSQL, as the postgres user: `monitor` or `node`.
# deploy/scale/compose.yml runs it in containers (deploy/postgres/Dockerfile); scripts/drill
# --failover runs the same script on hosts in network namespaces, so what the compose file relies
# on is what the drill tests. On every start it creates the node if it is new (pg_autoctl create
# carries on where an interrupted one stopped) and runs its keeper; the first data node becomes the
# primary, the next its synchronous standby, copied from it.
#
# Settings (environment):
#   DATONG_PG_HOME       directory of everything the node keeps (default /var/lib/datong-pg): the
#                        cluster in data/, pg_autoctl's configuration and state beside it
#   DATONG_PG_HOSTNAME   the name or address the other nodes and the monitor reach this one by
#                        (default: `hostname`); DATONG_PG_NAME the node's name (default the same)
#   PGPORT               the port PostgreSQL listens on (default 5432), on every address
#   DATONG_PG_MONITOR    a data node's monitor, host or host:port (default port 5432)
#   DATONG_MONITOR_PASSWORD      role autoctl_node on the monitor (keepers connect as it)
#   DATONG_REPLICATION_PASSWORD  role pgautofailover_replicator (a standby streams as it)
#   DATONG_DB_PASSWORD           role datong, which owns database datong (the services' role)
#   DATONG_ANALYST_PASSWORD      role datong_analyst (read-only, deploy/postgres/analyst-role.sql)
#   DATONG_ANALYST_SQL   path of analyst-role.sql (default /datong/analyst-role.sql)
# None of the passwords has a default. They are kept out of the data directory: clients find them
# in a password file this script writes outside it at each start, and the primary's roles are
# given them again at each start, so changing one is a restart of the nodes.
#
# Every connection from another host needs a password (scram-sha-256) and is encrypted with a
# self-signed certificate (pg_autoctl --ssl-self-signed; libpq's default sslmode=prefer uses it).
# pg_auto_failover's own rules for pg_hba.conf name hosts by address, which change when a
# container is recreated: this script writes the rules instead (--skip-pg-hba).
set -eu

role="${1:-}"
case "$role" in
    monitor | node) ;;
    *)
        echo "usage: pg-auto-failover.sh monitor|node (see the settings at the top of this file)" >&2
        exit 2
        ;;
esac

home="${DATONG_PG_HOME:-/var/lib/datong-pg}"
hostname="${DATONG_PG_HOSTNAME:-$(hostname)}"
name="${DATONG_PG_NAME:-$hostname}"
port="${PGPORT:-5432}"
analyst_sql="${DATONG_ANALYST_SQL:-/datong/analyst-role.sql}"
export PGDATA="$home/data"
export XDG_CONFIG_HOME="$home/config" XDG_DATA_HOME="$home/share"
# The image sets it (deploy/postgres/Dockerfile), so that `docker compose exec` finds it too.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-${TMPDIR:-/tmp}/datong-pg-$name}"
# libpq in pg_autoctl, pg_basebackup and the standby's WAL receiver (started by pg_autoctl, so
# with this environment) reads the passwords from here.
export PGPASSFILE="$XDG_RUNTIME_DIR/pgpass"

say() { echo "pg-auto-failover ($role $name): $*"; }
need() {
    eval "value=\${$1:-}"
    if [ -z "$value" ]; then
        echo "pg-auto-failover: $1 is empty; set it (there is no default)" >&2
        exit 1
    fi
}

need DATONG_MONITOR_PASSWORD
if [ "$role" = node ]; then
    need DATONG_PG_MONITOR
    need DATONG_REPLICATION_PASSWORD
    need DATONG_DB_PASSWORD
    need DATONG_ANALYST_PASSWORD
fi

mkdir -p "$home" "$XDG_CONFIG_HOME" "$XDG_DATA_HOME" "$XDG_RUNTIME_DIR"
chmod 700 "$home" "$XDG_RUNTIME_DIR"
# A password may hold ':' or '\', which the password file escapes.
escape() { printf '%s' "$1" | sed 's/[\\:]/\\&/g'; }
(
    umask 077
    {
        # printf, not echo: sh's echo would take the escapes' backslashes as its own.
        printf '*:*:pg_auto_failover:autoctl_node:%s\n' "$(escape "$DATONG_MONITOR_PASSWORD")"
        if [ "$role" = node ]; then
            printf '*:*:*:pgautofailover_replicator:%s\n' "$(escape "$DATONG_REPLICATION_PASSWORD")"
        fi
    } >"$PGPASSFILE"
)

# The rules for pg_hba.conf: on this host through the socket, trusted (as the postgres image does);
# from elsewhere, a password. A standby copies them with the cluster.
write_hba() {
    cat >"$PGDATA/pg_hba.conf" <<'EOF'
# Written by deploy/postgres/pg-auto-failover.sh at each start; edits here are lost.
local all all trust
# HAProxy's checks (deploy/haproxy/compose.cfg): datong_probe, into database postgres only.
host postgres datong_probe all trust
host all all all scram-sha-256
host replication pgautofailover_replicator all scram-sha-256
EOF
}

# The primary's roles, once it accepts writes: datong owning database datong, the analysts' role,
# datong_probe (no password, no rights: a balancer's health check logs in as it to read whether the
# node is a hot standby), and the passwords of every role other hosts log in as. Run again at each start (the passwords
# may have changed) and after a promotion; a standby has them by replication.
prepare_primary() {
    # A new cluster's rules are initdb's (trust on this host, nothing from elsewhere) until these.
    until psql -d postgres -tAXc 'SELECT 1' >/dev/null 2>&1; do sleep 1; done
    write_hba
    psql -d postgres -tAXqc 'SELECT pg_reload_conf()' >/dev/null
    local state
    for _ in $(seq 1 600); do
        # `standby`: it has the roles by replication; `primary`: pg_autoctl has made it one (the
        # replicator role and the database exist); nothing yet: still starting.
        state="$(psql -d postgres -tAXc "SELECT CASE
            WHEN pg_is_in_recovery() THEN CASE WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = 'datong') THEN 'standby' END
            WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgautofailover_replicator')
                AND EXISTS (SELECT FROM pg_database WHERE datname = 'datong') THEN 'primary' END" 2>/dev/null)" || state=""
        case "$state" in
            standby) return 0 ;;
            primary)
                psql -d postgres -v ON_ERROR_STOP=1 -qX \
                    -v db_password="$DATONG_DB_PASSWORD" \
                    -v replication_password="$DATONG_REPLICATION_PASSWORD" <<'EOF'
SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'datong') AS missing \gset
\if :missing
CREATE ROLE datong LOGIN SUPERUSER;
\endif
SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'datong_probe') AS missing_probe \gset
\if :missing_probe
CREATE ROLE datong_probe LOGIN;
\endif
ALTER ROLE datong PASSWORD :'db_password';
ALTER ROLE pgautofailover_replicator PASSWORD :'replication_password';
ALTER DATABASE datong OWNER TO datong;
EOF
                psql -d datong -U datong -v ON_ERROR_STOP=1 -qX -f "$analyst_sql"
                echo "ALTER ROLE datong_analyst PASSWORD :'password';" \
                    | psql -d datong -U datong -v ON_ERROR_STOP=1 -qX -v password="$DATONG_ANALYST_PASSWORD"
                # pg_autoctl's pg_basebackup asks for a spread checkpoint, which paces any dirty
                # buffers (these roles') over ~4.5 minutes: a standby made now would wait that long.
                psql -d postgres -qXc 'CHECKPOINT'
                say "the primary's roles are ready"
                return 0
                ;;
        esac
        sleep 1
    done
    say "not a primary with its roles after 600 s; they are prepared at the next start"
}

if [ "$role" = monitor ]; then
    if [ ! -s "$PGDATA/PG_VERSION" ]; then
        say "creating the monitor in $PGDATA"
        pg_autoctl create monitor --pgdata "$PGDATA" --pgport "$port" --hostname "$hostname" \
            --ssl-self-signed --skip-pg-hba --pgctl "$(command -v pg_ctl)"
    fi
    write_hba
    # The keeper's role gets its password in single-user mode, before the monitor listens.
    echo "ALTER ROLE autoctl_node PASSWORD '$(printf '%s' "$DATONG_MONITOR_PASSWORD" | sed "s/'/''/g")';" \
        | postgres --single -D "$PGDATA" -j -c log_statement=none -c log_min_messages=warning pg_auto_failover >/dev/null
    exec pg_autoctl run --pgdata "$PGDATA"
fi

monitor_host="${DATONG_PG_MONITOR%:*}"
monitor_port=5432
[ "$monitor_host" = "$DATONG_PG_MONITOR" ] || monitor_port="${DATONG_PG_MONITOR##*:}"
# A keeper's connection to the monitor breaks after 5 s of unanswered data, an idle one after
# 5 + 2 × 3 s without keepalives: pg_autoctl sets no TCP timeouts, and a keeper whose call was in
# flight when a partition began would wait ~15 minutes to notice, never fencing an isolated
# primary (docs/RELIABILITY.md).
monitor="postgres://autoctl_node@$monitor_host:$monitor_port/pg_auto_failover?sslmode=require&connect_timeout=5&tcp_user_timeout=5000&keepalives_idle=5&keepalives_interval=2&keepalives_count=3"
until error="$(psql "$monitor" -tAXc 'SELECT 1' 2>&1 >/dev/null)"; do
    say "waiting for the monitor at $monitor_host:$monitor_port: $(echo "$error" | tail -n 1)"
    sleep 1
done
prepare_primary &
prepare=$!
# Forward docker stop's signal to the keeper, which stops PostgreSQL before it ends.
keeper=""
trap '[ -z "$keeper" ] || kill -s TERM "$keeper" 2>/dev/null' TERM
trap '[ -z "$keeper" ] || kill -s INT "$keeper" 2>/dev/null' INT
if [ -s "$XDG_CONFIG_HOME/pg_autoctl$PGDATA/pg_autoctl.cfg" ] && [ ! -e "$XDG_DATA_HOME/pg_autoctl$PGDATA/pg_autoctl.init" ]; then
    pg_autoctl run --pgdata "$PGDATA" &
else
    say "creating the node in $PGDATA, registered with the monitor at $monitor_host:$monitor_port"
    pg_autoctl create postgres --pgdata "$PGDATA" --pgport "$port" --listen '*' \
        --hostname "$hostname" --name "$name" --monitor "$monitor" --dbname datong \
        --ssl-self-signed --skip-pg-hba --pgctl "$(command -v pg_ctl)" --run &
fi
keeper=$!
# A trapped signal ends `wait` early: wait again until the keeper has ended, for its status.
status=0
wait "$keeper" || status=$?
while kill -0 "$keeper" 2>/dev/null; do
    status=0
    wait "$keeper" || status=$?
done
kill "$prepare" 2>/dev/null || true
exit "$status"
