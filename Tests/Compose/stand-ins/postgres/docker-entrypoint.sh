#!/bin/bash
# The official postgres image's entrypoint, as its documentation describes it, for Debian's
# PostgreSQL: initialise the cluster once from POSTGRES_*, run /docker-entrypoint-initdb.d, then
# run the command as the postgres user.
set -Eeuo pipefail

if [ "${1:0:1}" = '-' ]; then set -- postgres "$@"; fi

if [ "$1" = 'postgres' ] && [ "$(id -u)" = '0' ]; then
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
fi

if [ "$1" = 'postgres' ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_USER:=postgres}"
    : "${POSTGRES_DB:=$POSTGRES_USER}"
    if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "${POSTGRES_HOST_AUTH_METHOD:-}" != 'trust' ]; then
        cat >&2 <<-'MSG'
		Error: Database is uninitialized and superuser password is not specified.
		       You must specify POSTGRES_PASSWORD to a non-empty value for the
		       superuser. For example, "-e POSTGRES_PASSWORD=password" on "docker run".
		MSG
        exit 1
    fi
    pwfile="$(mktemp)"
    printf '%s' "${POSTGRES_PASSWORD:-}" > "$pwfile"
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA" >/dev/null
    rm -f "$pwfile"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    printf '\nhost all all all %s\n' "${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" >> "$PGDATA/pg_hba.conf"

    # A server on the socket only while the init scripts run, as the official image does.
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start >/dev/null
    export PGUSER="$POSTGRES_USER" PGPASSWORD="${POSTGRES_PASSWORD:-}"
    if [ "$POSTGRES_DB" != 'postgres' ]; then
        psql -v ON_ERROR_STOP=1 --no-psqlrc -d postgres -v db="$POSTGRES_DB" <<< 'CREATE DATABASE :"db";'
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh)
                if [ -x "$f" ]; then echo "$0: running $f"; "$f"
                else echo "$0: sourcing $f"; . "$f"; fi ;;
            *.sql) echo "$0: running $f"; psql -v ON_ERROR_STOP=1 --no-psqlrc -d "$POSTGRES_DB" -f "$f" ;;
            *.sql.gz) echo "$0: running $f"; gunzip -c "$f" | psql -v ON_ERROR_STOP=1 --no-psqlrc -d "$POSTGRES_DB" ;;
            *) if [ -e "$f" ]; then echo "$0: ignoring $f"; fi ;;
        esac
    done
    unset PGPASSWORD
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo 'PostgreSQL init process complete; ready for start up.'
fi

exec "$@"
