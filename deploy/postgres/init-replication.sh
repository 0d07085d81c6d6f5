#!/bin/sh
# Run by the postgres image at the primary's first start (docker-entrypoint-initdb.d): lets the
# standby stream WAL (a replication connection with the services' role and password; the image's
# pg_hba.conf admits only ordinary connections from other hosts).
set -eu
echo "host replication $POSTGRES_USER all scram-sha-256" >>"$PGDATA/pg_hba.conf"
