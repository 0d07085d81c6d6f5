#!/bin/sh
# The standby's start (deploy/scale/compose.yml), as the postgres user of the postgres image: on
# the first start, a base backup of the primary (pg_basebackup) streaming from replication slot
# datong_standby, connecting as application datong_standby, and the primary told to wait for it
# (synchronous_standby_names); then PostgreSQL as a hot standby. Promote it with `pg_ctl promote` (docs/SCALING.md); the services
# find it through their two-host DATABASE_URL.
set -eu
: "${PGDATA:?}" "${PRIMARY_HOST:?}" "${POSTGRES_USER:?}" "${PGPASSWORD:?set DATONG_DB_PASSWORD}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    until pg_isready -h "$PRIMARY_HOST" -U "$POSTGRES_USER" -q; do
        echo "standby: waiting for the primary at $PRIMARY_HOST"
        sleep 1
    done
    pg_basebackup -h "$PRIMARY_HOST" -U "$POSTGRES_USER" -D "$PGDATA" \
        --write-recovery-conf --create-slot --slot datong_standby --wal-method stream
    # The password comes from the environment (PGPASSWORD), never from a file in the volume.
    echo "primary_conninfo = 'host=$PRIMARY_HOST user=$POSTGRES_USER application_name=datong_standby'" >>"$PGDATA/postgresql.auto.conf"
    chmod 700 "$PGDATA"
    # From now on the primary's commits wait for this standby (SYNCHRONOUS_STANDBY empty: they do
    # not). Only on the first start: after a promotion this server is the primary.
    if [ -n "${SYNCHRONOUS_STANDBY:-}" ]; then
        psql -h "$PRIMARY_HOST" -U "$POSTGRES_USER" -d postgres -v ON_ERROR_STOP=1 \
            -c "ALTER SYSTEM SET synchronous_standby_names = '$SYNCHRONOUS_STANDBY'" -c "SELECT pg_reload_conf()"
    fi
fi
exec postgres -c hot_standby_feedback=on
