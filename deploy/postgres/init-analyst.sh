#!/bin/sh
# Run by the postgres image at the database's first start (docker-entrypoint-initdb.d), as the
# services' role: creates the analysts' read-only role with DATONG_ANALYST_PASSWORD.
set -eu
if [ -z "${DATONG_ANALYST_PASSWORD:-}" ]; then
    echo "init-analyst: DATONG_ANALYST_PASSWORD is empty; set it to the analysts' password (there is no default)" >&2
    exit 1
fi
psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -f /datong/analyst-role.sql
# From standard input: psql interpolates :'password' (quoted as a literal) there, not in -c.
echo "ALTER ROLE datong_analyst PASSWORD :'password';" \
    | psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -v password="$DATONG_ANALYST_PASSWORD"
