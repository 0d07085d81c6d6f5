-- The read-only role analysts query Datong with: the documented views in schema `analytics` and
-- nothing else (no service tables, no identity graph internals, no token digests), every session
-- read-only. Run it as the role the services connect as, once the database exists; it is safe to
-- run again. docker-compose runs it at the database's first start (deploy/postgres/init-analyst.sh),
-- `scripts/dev up` on every start. Set the password separately:
--   ALTER ROLE datong_analyst PASSWORD '…';
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'datong_analyst') THEN
        CREATE ROLE datong_analyst LOGIN;
    END IF;
END
$$;
ALTER ROLE datong_analyst NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION LOGIN;
ALTER ROLE datong_analyst SET default_transaction_read_only = on;
-- A report or query that runs away is stopped after a minute (docs/ANALYTICS.md, "Reports");
-- a session that needs longer can SET statement_timeout itself.
ALTER ROLE datong_analyst SET statement_timeout = '60s';

-- The services create their views in `analytics` later (migrations at start-up), as the role that
-- runs this script: default privileges give the analysts SELECT on each one as it is made, and on
-- each view a later migration replaces.
CREATE SCHEMA IF NOT EXISTS analytics;
REVOKE ALL ON SCHEMA public FROM datong_analyst;
GRANT USAGE ON SCHEMA analytics TO datong_analyst;
GRANT SELECT ON ALL TABLES IN SCHEMA analytics TO datong_analyst;
ALTER DEFAULT PRIVILEGES IN SCHEMA analytics GRANT SELECT ON TABLES TO datong_analyst;
