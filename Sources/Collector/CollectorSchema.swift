import DatongPostgres

/// The collector owns the `collector` schema (events, profile and item records, rejected records)
/// and the analyst-facing views over them in `analytics`.
package enum CollectorSchema {
    package static let name = "collector"

    package static let migrations: [Migration] = [
        Migration(
            version: 1, name: "events, profile records, rejected records, analytics views",
            sql: """
                CREATE TABLE collector.events (
                    project      text        NOT NULL,
                    time         timestamptz NOT NULL,
                    event_id     uuid        NOT NULL,
                    type         text        NOT NULL,
                    event        text        NOT NULL,
                    received_at  timestamptz NOT NULL,
                    distinct_id  text        NOT NULL,
                    user_id      bigint,
                    anonymous_id text,
                    login_id     text,
                    lib          text,
                    lib_version  text,
                    app_version  text,
                    hybrid_h5    boolean     NOT NULL DEFAULT false,
                    properties   jsonb       NOT NULL,
                    PRIMARY KEY (project, time, event_id)
                ) PARTITION BY RANGE (time);
                CREATE INDEX events_project_event_time ON collector.events (project, event, time);
                CREATE INDEX events_project_user ON collector.events (project, user_id);

                CREATE TABLE collector.profile_records (
                    project     text        NOT NULL,
                    record_id   uuid        NOT NULL,
                    type        text        NOT NULL,
                    time        timestamptz NOT NULL,
                    received_at timestamptz NOT NULL,
                    distinct_id text,
                    user_id     bigint,
                    item_type   text,
                    item_id     text,
                    properties  jsonb       NOT NULL,
                    PRIMARY KEY (project, record_id)
                );
                CREATE INDEX profile_records_user ON collector.profile_records (project, user_id, time);

                CREATE TABLE collector.rejected (
                    id          bigint      GENERATED ALWAYS AS IDENTITY,
                    project     text        NOT NULL,
                    received_at timestamptz NOT NULL,
                    reason      text        NOT NULL,
                    raw         text        NOT NULL,
                    PRIMARY KEY (project, id)
                );
                CREATE INDEX rejected_received_at ON collector.rejected (received_at);

                CREATE SCHEMA IF NOT EXISTS analytics;
                CREATE VIEW analytics.events AS
                    SELECT project, event_id, type, event, time, received_at, distinct_id, user_id,
                           anonymous_id, login_id, lib, lib_version, app_version, hybrid_h5, properties
                    FROM collector.events;
                COMMENT ON VIEW analytics.events IS 'One row per stored event (track, $SignUp, $BindID, $UnbindID).';
                CREATE VIEW analytics.rejected AS
                    SELECT received_at, project, reason, raw FROM collector.rejected;
                COMMENT ON VIEW analytics.rejected IS 'Records that could never be stored, with the reason and the record as received.';
                """),
        Migration(
            version: 2, name: "profiles and items folded from their records, ingest counts",
            sql: """
                -- One step of a profile or item: the state after applying one record to it. JSON null
                -- is a deleted profile or item; a later set starts it again from nothing.
                CREATE FUNCTION collector.profile_step(state jsonb, op text, props jsonb) RETURNS jsonb
                LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
                DECLARE
                    k text;
                    v jsonb;
                    cur jsonb;
                BEGIN
                    IF op IN ('profile_delete', 'item_delete') THEN RETURN 'null'::jsonb; END IF;
                    IF jsonb_typeof(state) IS DISTINCT FROM 'object' THEN state := '{}'::jsonb; END IF;
                    IF jsonb_typeof(props) IS DISTINCT FROM 'object' THEN RETURN state; END IF;
                    IF op IN ('profile_set', 'item_set') THEN RETURN state || props; END IF;
                    IF op = 'profile_unset' THEN RETURN state - ARRAY(SELECT jsonb_object_keys(props)); END IF;
                    FOR k, v IN SELECT * FROM jsonb_each(props) LOOP
                        cur := state -> k;
                        IF op = 'profile_set_once' THEN
                            IF cur IS NULL THEN state := state || jsonb_build_object(k, v); END IF;
                        ELSIF op = 'profile_increment' THEN
                            -- Numbers add up; a value that is not a number on either side is left alone.
                            IF jsonb_typeof(v) = 'number' AND (cur IS NULL OR jsonb_typeof(cur) = 'number') THEN
                                state := state || jsonb_build_object(k, COALESCE(cur::numeric, 0) + v::numeric);
                            END IF;
                        ELSIF op = 'profile_append' THEN
                            IF jsonb_typeof(v) = 'array' THEN
                                state := state || jsonb_build_object(k, CASE WHEN jsonb_typeof(cur) = 'array' THEN cur || v ELSE v END);
                            END IF;
                        END IF;
                    END LOOP;
                    RETURN state;
                END $$;

                -- Folds a user's (or an item's) records in record-time order, so records that arrive out
                -- of order give the same profile as records that arrive in order.
                CREATE AGGREGATE collector.profile_fold(text, jsonb) (
                    SFUNC = collector.profile_step, STYPE = jsonb, INITCOND = '{}'
                );

                CREATE TABLE collector.profiles (
                    project     text        NOT NULL,
                    user_id     bigint      NOT NULL,
                    distinct_id text        NOT NULL,
                    properties  jsonb       NOT NULL,
                    updated_at  timestamptz NOT NULL,
                    PRIMARY KEY (project, user_id)
                );
                CREATE TABLE collector.items (
                    project    text        NOT NULL,
                    item_type  text        NOT NULL,
                    item_id    text        NOT NULL,
                    properties jsonb       NOT NULL,
                    updated_at timestamptz NOT NULL,
                    PRIMARY KEY (project, item_type, item_id)
                );
                CREATE INDEX profile_records_item ON collector.profile_records (project, item_type, item_id, time)
                    WHERE item_type IS NOT NULL;

                -- Per project and minute, written in the transaction that stores the batch. `slot`
                -- spreads concurrent writers over a few rows so they do not queue on one row lock.
                CREATE TABLE collector.ingest_counts (
                    project    text        NOT NULL,
                    minute     timestamptz NOT NULL,
                    slot       smallint    NOT NULL,
                    received   bigint      NOT NULL,
                    stored     bigint      NOT NULL,
                    duplicates bigint      NOT NULL,
                    rejected   bigint      NOT NULL,
                    PRIMARY KEY (project, minute, slot),
                    CHECK (received = stored + duplicates + rejected)
                );

                CREATE VIEW analytics.profiles AS
                    SELECT project, user_id, distinct_id, properties, updated_at FROM collector.profiles;
                COMMENT ON VIEW analytics.profiles IS 'One row per user with a profile: every profile record applied in record-time order.';
                CREATE VIEW analytics.items AS
                    SELECT project, item_type, item_id, properties, updated_at FROM collector.items;
                COMMENT ON VIEW analytics.items IS 'One row per item: item_set records applied in record-time order; item_delete removes it.';
                CREATE VIEW analytics.ingest_counts AS
                    SELECT project, minute, sum(received)::bigint AS received, sum(stored)::bigint AS stored,
                           sum(duplicates)::bigint AS duplicates, sum(rejected)::bigint AS rejected
                    FROM collector.ingest_counts GROUP BY project, minute;
                COMMENT ON VIEW analytics.ingest_counts IS 'Records received per project and minute: received = stored + duplicates + rejected.';
                """),
        Migration(
            version: 3, name: "analytics.events shows each event's current user",
            sql: """
                -- identity-service publishes analytics.user_canonical (merged users and the user they
                -- belong to now). When the collector migrates first, an empty placeholder with the same
                -- columns stands in; identity-service replaces it and this view reads the real one.
                DO $$
                BEGIN
                    IF to_regclass('analytics.user_canonical') IS NULL THEN
                        CREATE VIEW analytics.user_canonical AS
                            SELECT NULL::text AS project, NULL::bigint AS user_id, NULL::bigint AS canonical_user_id WHERE false;
                    END IF;
                END $$;
                CREATE OR REPLACE VIEW analytics.events AS
                    SELECT e.project, e.event_id, e.type, e.event, e.time, e.received_at, e.distinct_id,
                           COALESCE(c.canonical_user_id, e.user_id) AS user_id,
                           e.anonymous_id, e.login_id, e.lib, e.lib_version, e.app_version, e.hybrid_h5, e.properties,
                           e.user_id AS stored_user_id
                    FROM collector.events e
                    LEFT JOIN analytics.user_canonical c ON c.project = e.project AND c.user_id = e.user_id;
                COMMENT ON VIEW analytics.events IS 'One row per stored event (track, $SignUp, $BindID, $UnbindID); user_id is the current user (merges followed), stored_user_id the user it was stored with.';
                """),
        Migration(
            version: 4, name: "events keep how they were made (lib_method, lib_detail), original_id and identities",
            sql: """
                -- New columns go last: the collector COPYs rows in column order.
                ALTER TABLE collector.events
                    ADD COLUMN lib_method  text,
                    ADD COLUMN lib_detail  text,
                    ADD COLUMN original_id text,
                    ADD COLUMN identities  jsonb;
                CREATE OR REPLACE VIEW analytics.events AS
                    SELECT e.project, e.event_id, e.type, e.event, e.time, e.received_at, e.distinct_id,
                           COALESCE(c.canonical_user_id, e.user_id) AS user_id,
                           e.anonymous_id, e.login_id, e.lib, e.lib_version, e.app_version, e.hybrid_h5, e.properties,
                           e.user_id AS stored_user_id, e.lib_method, e.lib_detail, e.original_id, e.identities
                    FROM collector.events e
                    LEFT JOIN analytics.user_canonical c ON c.project = e.project AND c.user_id = e.user_id;
                COMMENT ON COLUMN analytics.events.lib_method IS 'How the event was made: code, autoTrack, or visual (codeless tracking).';
                """),
        Migration(
            version: 5, name: "records are identified by their track id; profile and item records keep their order",
            sql: """
                -- A record's `_track_id` (RecordKey.swift, KeyRule). Records stored before this
                -- migration were keyed by their content: records whose time is before it keep that
                -- key, so the retries of what is stored are still found. A database that holds no
                -- record yet has no such time.
                ALTER TABLE collector.events ADD COLUMN track_id bigint;
                ALTER TABLE collector.profile_records ADD COLUMN track_id bigint, ADD COLUMN seq bigint;
                CREATE TABLE collector.record_keys (
                    content_keys_before timestamptz NOT NULL,
                    one_row             boolean     PRIMARY KEY DEFAULT true CHECK (one_row)
                );
                INSERT INTO collector.record_keys (content_keys_before)
                SELECT CASE WHEN EXISTS (SELECT 1 FROM collector.events) OR EXISTS (SELECT 1 FROM collector.profile_records)
                            THEN now() ELSE '-infinity' END;
                -- The order profile and item records arrived in: a request's records in the order sent,
                -- requests in the order written. Folds break ties of time and receipt time with it.
                CREATE SEQUENCE collector.profile_record_order;
                CREATE OR REPLACE VIEW analytics.events AS
                    SELECT e.project, e.event_id, e.type, e.event, e.time, e.received_at, e.distinct_id,
                           COALESCE(c.canonical_user_id, e.user_id) AS user_id,
                           e.anonymous_id, e.login_id, e.lib, e.lib_version, e.app_version, e.hybrid_h5, e.properties,
                           e.user_id AS stored_user_id, e.lib_method, e.lib_detail, e.original_id, e.identities, e.track_id
                    FROM collector.events e
                    LEFT JOIN analytics.user_canonical c ON c.project = e.project AND c.user_id = e.user_id;
                COMMENT ON COLUMN analytics.events.track_id IS 'The _track_id the SDK gave the record; with project, type, event, time and distinct_id it identifies the record (a retry is stored once).';
                """),
        Migration(
            version: 6, name: "the multi-entity protocol: events on items, details",
            sql: """
                -- The item schema of an event on an item (a version 2.0 `track` record of an item
                -- schema); NULL for a user's event.
                ALTER TABLE collector.events ADD COLUMN schema text;
                CREATE OR REPLACE VIEW analytics.events AS
                    SELECT e.project, e.event_id, e.type, e.event, e.time, e.received_at, e.distinct_id,
                           COALESCE(c.canonical_user_id, e.user_id) AS user_id,
                           e.anonymous_id, e.login_id, e.lib, e.lib_version, e.app_version, e.hybrid_h5, e.properties,
                           e.user_id AS stored_user_id, e.lib_method, e.lib_detail, e.original_id, e.identities, e.track_id, e.schema
                    FROM collector.events e
                    LEFT JOIN analytics.user_canonical c ON c.project = e.project AND c.user_id = e.user_id;
                COMMENT ON COLUMN analytics.events.schema IS 'For an event on an item (multi-entity protocol), the item schema; NULL for a user''s event.';

                -- detail_set and detail_delete apply as item_set and item_delete do.
                CREATE OR REPLACE FUNCTION collector.profile_step(state jsonb, op text, props jsonb) RETURNS jsonb
                LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
                DECLARE
                    k text;
                    v jsonb;
                    cur jsonb;
                BEGIN
                    IF op IN ('profile_delete', 'item_delete', 'detail_delete') THEN RETURN 'null'::jsonb; END IF;
                    IF jsonb_typeof(state) IS DISTINCT FROM 'object' THEN state := '{}'::jsonb; END IF;
                    IF jsonb_typeof(props) IS DISTINCT FROM 'object' THEN RETURN state; END IF;
                    IF op IN ('profile_set', 'item_set', 'detail_set') THEN RETURN state || props; END IF;
                    IF op = 'profile_unset' THEN RETURN state - ARRAY(SELECT jsonb_object_keys(props)); END IF;
                    FOR k, v IN SELECT * FROM jsonb_each(props) LOOP
                        cur := state -> k;
                        IF op = 'profile_set_once' THEN
                            IF cur IS NULL THEN state := state || jsonb_build_object(k, v); END IF;
                        ELSIF op = 'profile_increment' THEN
                            -- Numbers add up; a value that is not a number on either side is left alone.
                            IF jsonb_typeof(v) = 'number' AND (cur IS NULL OR jsonb_typeof(cur) = 'number') THEN
                                state := state || jsonb_build_object(k, COALESCE(cur::numeric, 0) + v::numeric);
                            END IF;
                        ELSIF op = 'profile_append' THEN
                            IF jsonb_typeof(v) = 'array' THEN
                                state := state || jsonb_build_object(k, CASE WHEN jsonb_typeof(cur) = 'array' THEN cur || v ELSE v END);
                            END IF;
                        END IF;
                    END LOOP;
                    RETURN state;
                END $$;

                -- A detail (明细): a row of a detail schema, keyed by schema and id, folded from its
                -- detail_set / detail_delete records as items are; user_id is the user its newest
                -- record named (NULL for a detail of an item).
                CREATE TABLE collector.details (
                    project    text        NOT NULL,
                    schema     text        NOT NULL,
                    detail_id  text        NOT NULL,
                    user_id    bigint,
                    properties jsonb       NOT NULL,
                    updated_at timestamptz NOT NULL,
                    PRIMARY KEY (project, schema, detail_id)
                );
                CREATE INDEX details_user ON collector.details (project, user_id) WHERE user_id IS NOT NULL;
                CREATE VIEW analytics.details AS
                    SELECT d.project, d.schema, d.detail_id, COALESCE(c.canonical_user_id, d.user_id) AS user_id, d.properties, d.updated_at
                    FROM collector.details d
                    LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id;
                COMMENT ON VIEW analytics.details IS 'One row per detail (multi-entity protocol): detail_set records applied in record order; detail_delete removes it. user_id follows merges.';
                """),
        Migration(
            version: 7, name: "profile operations with Sensors' meaning, and why one did not apply",
            sql: """
                -- Why a profile_increment or profile_append does not apply to the profile `state` it
                -- meets, or NULL: Sensors adds numbers to a NUMBER property only (and a sum must stay
                -- a double), and appends to a LIST property only. The gateway already refused values
                -- of the wrong kind; these depend on what the profile holds.
                CREATE FUNCTION collector.profile_problem(state jsonb, op text, props jsonb) RETURNS text
                LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
                DECLARE
                    k text;
                    v jsonb;
                    cur jsonb;
                BEGIN
                    IF op NOT IN ('profile_increment', 'profile_append') OR jsonb_typeof(props) IS DISTINCT FROM 'object' THEN RETURN NULL; END IF;
                    IF jsonb_typeof(state) IS DISTINCT FROM 'object' THEN state := '{}'::jsonb; END IF;
                    FOR k, v IN SELECT * FROM jsonb_each(props) LOOP
                        cur := state -> k;
                        IF cur IS NULL OR jsonb_typeof(cur) = 'null' THEN CONTINUE; END IF;
                        IF op = 'profile_increment' THEN
                            IF jsonb_typeof(cur) <> 'number' THEN
                                RETURN format('profile_increment of %s not applied: the profile holds a %s there, not a number', k, jsonb_typeof(cur));
                            END IF;
                            IF jsonb_typeof(v) = 'number' AND abs(cur::numeric + v::numeric) > 1.7976931348623157e308 THEN
                                RETURN format('profile_increment of %s not applied: the sum is beyond what a double holds', k);
                            END IF;
                        ELSIF jsonb_typeof(cur) <> 'array' THEN
                            RETURN format('profile_append to %s not applied: the profile holds a %s there, not a list', k, jsonb_typeof(cur));
                        END IF;
                    END LOOP;
                    RETURN NULL;
                END $$;

                -- A record that does not apply (profile_problem) leaves the profile as it was: before,
                -- an append over a number replaced it, and increments summed past a double.
                CREATE OR REPLACE FUNCTION collector.profile_step(state jsonb, op text, props jsonb) RETURNS jsonb
                LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
                DECLARE
                    k text;
                    v jsonb;
                    cur jsonb;
                BEGIN
                    IF op IN ('profile_delete', 'item_delete', 'detail_delete') THEN RETURN 'null'::jsonb; END IF;
                    IF jsonb_typeof(state) IS DISTINCT FROM 'object' THEN state := '{}'::jsonb; END IF;
                    IF jsonb_typeof(props) IS DISTINCT FROM 'object' THEN RETURN state; END IF;
                    IF op IN ('profile_set', 'item_set', 'detail_set') THEN RETURN state || props; END IF;
                    IF op = 'profile_unset' THEN RETURN state - ARRAY(SELECT jsonb_object_keys(props)); END IF;
                    IF collector.profile_problem(state, op, props) IS NOT NULL THEN RETURN state; END IF;
                    FOR k, v IN SELECT * FROM jsonb_each(props) LOOP
                        cur := state -> k;
                        IF op = 'profile_set_once' THEN
                            IF cur IS NULL THEN state := state || jsonb_build_object(k, v); END IF;
                        ELSIF op = 'profile_increment' THEN
                            -- A JSON null counts as nothing yet (profile_problem lets it through).
                            IF jsonb_typeof(v) = 'number' THEN
                                state := state || jsonb_build_object(k, COALESCE(CASE WHEN jsonb_typeof(cur) = 'number' THEN cur::numeric END, 0) + v::numeric);
                            END IF;
                        ELSIF op = 'profile_append' THEN
                            IF jsonb_typeof(v) = 'array' THEN
                                state := state || jsonb_build_object(k, CASE WHEN jsonb_typeof(cur) = 'array' THEN cur ELSE '[]'::jsonb END || v);
                            END IF;
                        END IF;
                    END LOOP;
                    RETURN state;
                END $$;
                """),
        Migration(
            version: 8, name: "events split by project within each month; retention per project",
            sql: """
                -- A project's own retention in months (PartitionMaintenance); projects without a
                -- row keep RETENTION_DAYS.
                CREATE TABLE collector.retention (
                    project    text        PRIMARY KEY,
                    months     integer     NOT NULL CHECK (months BETWEEN 1 AND 1200),
                    updated_at timestamptz NOT NULL DEFAULT now()
                );
                -- Months are now split by project (a table per project and month, dropped whole by
                -- its project's retention). Months without events yet are dropped here and made
                -- again split when needed; months holding events stay one table for all projects.
                DO $$
                DECLARE
                    month regclass;
                    has_rows boolean;
                BEGIN
                    FOR month IN
                        SELECT c.oid::regclass FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                        WHERE i.inhparent = 'collector.events'::regclass AND c.relkind = 'r'
                    LOOP
                        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', month);
                        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', month) INTO has_rows;
                        IF NOT has_rows THEN EXECUTE format('DROP TABLE %s', month); END IF;
                    END LOOP;
                END $$;
                """),
        Migration(
            version: 9, name: "typed reads of properties that never fail",
            sql: #"""
                -- A property read as one of Sensors' types: its value when it is of that type (or
                -- converts as Sensors converts), else NULL, never an error, so one bad row cannot
                -- fail a query. SQL functions, inlined into the query that calls them.

                -- A Sensors date-time or date text (`yyyy-MM-dd HH:mm:ss.SSS`, `yyyy-MM-dd`) as a
                -- timestamp; NULL for any other text, an impossible date included. The tests run
                -- in order (CASE), so a cast only sees text that holds.
                CREATE FUNCTION analytics.sensors_datetime(value text) RETURNS timestamp
                LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
                    SELECT CASE
                        WHEN value IS NULL OR value !~ '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])( ([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,3})?)?$' THEN NULL
                        WHEN left(value, 4) = '0000' THEN NULL
                        WHEN substr(value, 9, 2)::int > extract(day FROM make_date(left(value, 4)::int, substr(value, 6, 2)::int, 1) + interval '1 month' - interval '1 day') THEN NULL
                        ELSE value::timestamp
                    END
                $$;

                -- NUMBER: a number, or a text that is one ("9.90", at most 400 characters, an
                -- exponent of at most three digits: what numeric holds); NULL otherwise.
                CREATE FUNCTION analytics.as_number(properties jsonb, name text) RETURNS numeric
                LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
                    SELECT CASE jsonb_typeof(properties -> name)
                        WHEN 'number' THEN (properties -> name)::numeric
                        WHEN 'string' THEN CASE
                            WHEN length(properties ->> name) > 400 THEN NULL
                            WHEN (properties ->> name) ~ '^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]{1,3})?\s*$'
                            THEN (properties ->> name)::numeric
                        END
                    END
                $$;

                -- STRING: a text, or a number or boolean as its text (Sensors stores them so).
                CREATE FUNCTION analytics.as_string(properties jsonb, name text) RETURNS text
                LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
                    SELECT CASE WHEN jsonb_typeof(properties -> name) IN ('string', 'number', 'boolean') THEN properties ->> name END
                $$;

                -- BOOL: true or false, or the texts "true" and "false".
                CREATE FUNCTION analytics.as_bool(properties jsonb, name text) RETURNS boolean
                LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
                    SELECT CASE jsonb_typeof(properties -> name)
                        WHEN 'boolean' THEN (properties -> name)::boolean
                        WHEN 'string' THEN CASE lower(properties ->> name) WHEN 'true' THEN true WHEN 'false' THEN false END
                    END
                $$;

                -- DATETIME and DATE: a Sensors date-time or date text.
                CREATE FUNCTION analytics.as_datetime(properties jsonb, name text) RETURNS timestamp
                LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
                    SELECT CASE WHEN jsonb_typeof(properties -> name) = 'string' THEN analytics.sensors_datetime(properties ->> name) END
                $$;
                CREATE FUNCTION analytics.as_date(properties jsonb, name text) RETURNS date
                LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
                    SELECT analytics.as_datetime(properties, name)::date
                $$;

                -- LIST: a list of texts; NULL for a list holding anything else.
                CREATE FUNCTION analytics.as_list(properties jsonb, name text) RETURNS text[]
                LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
                    SELECT CASE
                        WHEN jsonb_typeof(properties -> name) IS DISTINCT FROM 'array' THEN NULL
                        WHEN jsonb_path_exists(properties -> name, '$[*] ? (@.type() != "string")') THEN NULL
                        ELSE ARRAY(SELECT jsonb_array_elements_text(properties -> name))
                    END
                $$;
                """#),
        Migration(
            version: 10, name: "the catalog of events and properties",
            sql: """
                -- What each project sends, kept while storing (Catalog.swift). Days are UTC days on
                -- which the collector stored a record carrying it.
                CREATE TABLE collector.catalog_properties (
                    project text NOT NULL,
                    kind text NOT NULL CHECK (kind IN ('event', 'profile')),
                    name text NOT NULL,
                    type text NOT NULL CHECK (type IN ('NUMBER', 'BOOL', 'STRING', 'LIST', 'DATETIME', 'DATE')),
                    first_day date NOT NULL,
                    last_day date NOT NULL,
                    sample text NOT NULL,
                    PRIMARY KEY (project, kind, name)
                );
                CREATE TABLE collector.catalog_event_properties (
                    project text NOT NULL,
                    event text NOT NULL,
                    name text NOT NULL,
                    type text NOT NULL,
                    first_day date NOT NULL,
                    last_day date NOT NULL,
                    PRIMARY KEY (project, event, name, type)
                );
                -- A property's events (analytics.catalog_properties, the API's conflicts): by name,
                -- not a walk of every event of the project for each property.
                CREATE INDEX catalog_event_properties_by_name ON collector.catalog_event_properties (project, name);
                CREATE TABLE collector.catalog_event_sources (
                    project text NOT NULL,
                    event text NOT NULL,
                    lib text NOT NULL,
                    app_version text NOT NULL,
                    first_day date NOT NULL,
                    last_day date NOT NULL,
                    PRIMARY KEY (project, event, lib, app_version)
                );
                -- Added to in the transaction that stores the events, on the connection's own
                -- row (slot), as ingest_counts.
                CREATE TABLE collector.catalog_event_counts (
                    project text NOT NULL,
                    event text NOT NULL,
                    day date NOT NULL,
                    slot smallint NOT NULL,
                    count bigint NOT NULL,
                    PRIMARY KEY (project, event, day, slot)
                );

                CREATE VIEW analytics.catalog_events AS
                    SELECT s.project, s.event, min(s.first_day) AS first_day, max(s.last_day) AS last_day,
                           coalesce((SELECT sum(c.count) FROM collector.catalog_event_counts c
                                     WHERE c.project = s.project AND c.event = s.event), 0)::bigint AS count,
                           array_agg(DISTINCT s.lib ORDER BY s.lib) FILTER (WHERE s.lib <> '') AS libs,
                           array_agg(DISTINCT s.app_version ORDER BY s.app_version) FILTER (WHERE s.app_version <> '') AS app_versions
                    FROM collector.catalog_event_sources s GROUP BY s.project, s.event;
                COMMENT ON VIEW analytics.catalog_events IS 'Each event a project sent: days first and last seen (UTC), events stored, the $libs and app versions that sent it.';
                CREATE VIEW analytics.catalog_event_days AS
                    SELECT project, event, day, sum(count)::bigint AS count FROM collector.catalog_event_counts GROUP BY project, event, day;
                COMMENT ON VIEW analytics.catalog_event_days IS 'Events stored per project, event name and UTC day of receipt.';
                CREATE VIEW analytics.catalog_properties AS
                    SELECT p.project, p.kind, p.name, p.type, p.first_day, p.last_day, p.sample,
                           ARRAY(SELECT DISTINCT e.event FROM collector.catalog_event_properties e
                                 WHERE e.project = p.project AND e.name = p.name AND p.kind = 'event' ORDER BY e.event) AS events
                    FROM collector.catalog_properties p;
                COMMENT ON VIEW analytics.catalog_properties IS 'Each event and profile property a project sent, with the Sensors type of its first value and that value as a sample.';
                CREATE VIEW analytics.catalog_event_properties AS
                    SELECT e.project, e.event, e.name, e.type, e.first_day, e.last_day, e.type = p.type AS matches_type
                    FROM collector.catalog_event_properties e
                    JOIN collector.catalog_properties p ON p.project = e.project AND p.kind = 'event' AND p.name = e.name;
                COMMENT ON VIEW analytics.catalog_event_properties IS 'Which properties each event carried with which type; matches_type is false where the type differs from the property''s.';
                """),
        Migration(
            version: 11, name: "display names and descriptions of catalog entries",
            sql: """
                -- What the data team calls an event or property and means by it (PUT …/metadata/notes);
                -- the views show an empty text as NULL.
                CREATE TABLE collector.catalog_notes (
                    project text NOT NULL,
                    kind text NOT NULL CHECK (kind IN ('event', 'event_property', 'profile_property')),
                    name text NOT NULL,
                    display_name text NOT NULL,
                    description text NOT NULL,
                    updated_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (project, kind, name)
                );
                CREATE OR REPLACE VIEW analytics.catalog_events AS
                    SELECT s.project, s.event, min(s.first_day) AS first_day, max(s.last_day) AS last_day,
                           coalesce((SELECT sum(c.count) FROM collector.catalog_event_counts c
                                     WHERE c.project = s.project AND c.event = s.event), 0)::bigint AS count,
                           array_agg(DISTINCT s.lib ORDER BY s.lib) FILTER (WHERE s.lib <> '') AS libs,
                           array_agg(DISTINCT s.app_version ORDER BY s.app_version) FILTER (WHERE s.app_version <> '') AS app_versions,
                           (SELECT nullif(n.display_name, '') FROM collector.catalog_notes n
                            WHERE n.project = s.project AND n.kind = 'event' AND n.name = s.event) AS display_name,
                           (SELECT nullif(n.description, '') FROM collector.catalog_notes n
                            WHERE n.project = s.project AND n.kind = 'event' AND n.name = s.event) AS description
                    FROM collector.catalog_event_sources s GROUP BY s.project, s.event;
                CREATE OR REPLACE VIEW analytics.catalog_properties AS
                    SELECT p.project, p.kind, p.name, p.type, p.first_day, p.last_day, p.sample,
                           ARRAY(SELECT DISTINCT e.event FROM collector.catalog_event_properties e
                                 WHERE e.project = p.project AND e.name = p.name AND p.kind = 'event' ORDER BY e.event) AS events,
                           nullif(n.display_name, '') AS display_name, nullif(n.description, '') AS description
                    FROM collector.catalog_properties p
                    LEFT JOIN collector.catalog_notes n ON n.project = p.project AND n.kind = p.kind || '_property' AND n.name = p.name;
                """),
        Migration(
            version: 12, name: "declared types and events, strict validation, type refusals and drops",
            sql: """
                -- A property's type is its first value's, or one an admin declared (PUT
                -- …/metadata/types, or POST …/metadata/declarations to declare what was seen),
                -- which raises the project's version: every collector watches the versions and
                -- checks records under the new rules. A property declared before any value came
                -- has no days yet.
                ALTER TABLE collector.catalog_properties
                    ADD COLUMN declared_at timestamptz,
                    ALTER COLUMN first_day DROP NOT NULL,
                    ALTER COLUMN last_day DROP NOT NULL;
                COMMENT ON COLUMN collector.catalog_properties.declared_at IS 'When an admin declared the property (set its type); NULL: typed by its first value.';
                CREATE TABLE collector.catalog_type_versions (
                    project text PRIMARY KEY,
                    version bigint NOT NULL
                );
                -- Per project: strict validation (declared events and properties only) and what a
                -- value of another type costs (the record, or only the property).
                CREATE TABLE collector.catalog_settings (
                    project text PRIMARY KEY,
                    strict boolean NOT NULL DEFAULT false,
                    wrong_type text NOT NULL DEFAULT 'refuse' CHECK (wrong_type IN ('refuse', 'drop_property')),
                    updated_at timestamptz NOT NULL DEFAULT now()
                );
                CREATE TABLE collector.catalog_declared_events (
                    project text NOT NULL,
                    event text NOT NULL,
                    declared_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (project, event)
                );
                -- Properties dropped from stored records (undeclared in a strict project, or of
                -- another type where the project drops only the property), per UTC day of
                -- receipt; added to in the storing transaction, on the connection's own row.
                CREATE TABLE collector.catalog_drops (
                    project text NOT NULL,
                    day date NOT NULL,
                    kind text NOT NULL,
                    name text NOT NULL,
                    reason text NOT NULL CHECK (reason IN ('undeclared', 'wrong_type')),
                    slot smallint NOT NULL,
                    count bigint NOT NULL,
                    PRIMARY KEY (project, day, kind, name, reason, slot)
                );
                CREATE OR REPLACE VIEW analytics.catalog_properties AS
                    SELECT p.project, p.kind, p.name, p.type, p.first_day, p.last_day, p.sample,
                           ARRAY(SELECT DISTINCT e.event FROM collector.catalog_event_properties e
                                 WHERE e.project = p.project AND e.name = p.name AND p.kind = 'event' ORDER BY e.event) AS events,
                           nullif(n.display_name, '') AS display_name, nullif(n.description, '') AS description,
                           p.declared_at
                    FROM collector.catalog_properties p
                    LEFT JOIN collector.catalog_notes n ON n.project = p.project AND n.kind = p.kind || '_property' AND n.name = p.name;
                CREATE VIEW analytics.catalog_declared_events AS
                    SELECT project, event, declared_at FROM collector.catalog_declared_events;
                COMMENT ON VIEW analytics.catalog_declared_events IS 'Events declared per project: a strict project stores no other (but the SDKs'' $ events).';
                -- Records refused for a value not of its property's type, by day, property and types.
                CREATE VIEW analytics.type_refusals AS
                    SELECT r.project, (r.received_at AT TIME ZONE 'UTC')::date AS day, m[1] AS property, m[2] AS type, m[3] AS sent_type,
                           count(*)::bigint AS records, max(r.received_at) AS last_received_at
                    FROM collector.rejected r
                    CROSS JOIN LATERAL regexp_match(r.reason, '^PROPERTY_WITH_WRONG_TYPE: property ''(.*)'' is ([A-Z]+); the value .* is ([A-Z]+)$') AS m
                    WHERE r.reason LIKE 'PROPERTY_WITH_WRONG_TYPE:%'
                    GROUP BY 1, 2, 3, 4, 5;
                COMMENT ON VIEW analytics.type_refusals IS 'Records refused with PROPERTY_WITH_WRONG_TYPE per project, UTC day, property, its type and the type sent; analytics.rejected has the records.';
                -- Events a strict project refused as not declared (never stored, so not in the
                -- catalog): what to declare, or to stop sending.
                CREATE VIEW analytics.undeclared_events AS
                    SELECT r.project, (r.received_at AT TIME ZONE 'UTC')::date AS day, m[1] AS event,
                           count(*)::bigint AS records, max(r.received_at) AS last_received_at
                    FROM collector.rejected r
                    CROSS JOIN LATERAL regexp_match(r.reason, '^EVENT_NOT_DECLARED: event ''(.*)'' is not declared') AS m
                    WHERE r.reason LIKE 'EVENT_NOT_DECLARED:%'
                    GROUP BY 1, 2, 3;
                COMMENT ON VIEW analytics.undeclared_events IS 'Records refused with EVENT_NOT_DECLARED per project, UTC day and event; analytics.rejected has the records.';
                CREATE VIEW analytics.dropped_properties AS
                    SELECT project, day, kind, name, reason, sum(count)::bigint AS count
                    FROM collector.catalog_drops GROUP BY project, day, kind, name, reason;
                COMMENT ON VIEW analytics.dropped_properties IS 'Properties left out of stored records per project, UTC day and reason: undeclared (a strict project) or wrong_type (a project that drops only the property).';
                """),
        Migration(
            version: 13, name: "catalog entries hidden from analysts",
            sql: """
                -- A note can hide an event (its rows leave analytics.events) or a property (it
                -- leaves the properties of analytics.events or analytics.profiles). Hidden, not
                -- erased: collector.events keeps the rows, and unhiding shows them again.
                ALTER TABLE collector.catalog_notes ADD COLUMN hidden boolean NOT NULL DEFAULT false;
                CREATE OR REPLACE VIEW analytics.events AS
                    SELECT e.project, e.event_id, e.type, e.event, e.time, e.received_at, e.distinct_id,
                           COALESCE(c.canonical_user_id, e.user_id) AS user_id,
                           e.anonymous_id, e.login_id, e.lib, e.lib_version, e.app_version, e.hybrid_h5,
                           CASE WHEN h.names IS NULL THEN e.properties ELSE e.properties - h.names END AS properties,
                           e.user_id AS stored_user_id, e.lib_method, e.lib_detail, e.original_id, e.identities, e.track_id, e.schema
                    FROM collector.events e
                    LEFT JOIN analytics.user_canonical c ON c.project = e.project AND c.user_id = e.user_id
                    LEFT JOIN (SELECT project, array_agg(name) AS names FROM collector.catalog_notes
                               WHERE kind = 'event_property' AND hidden GROUP BY project) h ON h.project = e.project
                    WHERE NOT EXISTS (SELECT 1 FROM collector.catalog_notes n
                                      WHERE n.project = e.project AND n.kind = 'event' AND n.name = e.event AND n.hidden);
                CREATE OR REPLACE VIEW analytics.profiles AS
                    SELECT p.project, p.user_id, p.distinct_id,
                           CASE WHEN h.names IS NULL THEN p.properties ELSE p.properties - h.names END AS properties, p.updated_at
                    FROM collector.profiles p
                    LEFT JOIN (SELECT project, array_agg(name) AS names FROM collector.catalog_notes
                               WHERE kind = 'profile_property' AND hidden GROUP BY project) h ON h.project = p.project;
                CREATE OR REPLACE VIEW analytics.catalog_events AS
                    SELECT s.project, s.event, min(s.first_day) AS first_day, max(s.last_day) AS last_day,
                           coalesce((SELECT sum(c.count) FROM collector.catalog_event_counts c
                                     WHERE c.project = s.project AND c.event = s.event), 0)::bigint AS count,
                           array_agg(DISTINCT s.lib ORDER BY s.lib) FILTER (WHERE s.lib <> '') AS libs,
                           array_agg(DISTINCT s.app_version ORDER BY s.app_version) FILTER (WHERE s.app_version <> '') AS app_versions,
                           (SELECT nullif(n.display_name, '') FROM collector.catalog_notes n
                            WHERE n.project = s.project AND n.kind = 'event' AND n.name = s.event) AS display_name,
                           (SELECT nullif(n.description, '') FROM collector.catalog_notes n
                            WHERE n.project = s.project AND n.kind = 'event' AND n.name = s.event) AS description,
                           coalesce((SELECT n.hidden FROM collector.catalog_notes n
                                     WHERE n.project = s.project AND n.kind = 'event' AND n.name = s.event), false) AS hidden
                    FROM collector.catalog_event_sources s GROUP BY s.project, s.event;
                CREATE OR REPLACE VIEW analytics.catalog_properties AS
                    SELECT p.project, p.kind, p.name, p.type, p.first_day, p.last_day, p.sample,
                           ARRAY(SELECT DISTINCT e.event FROM collector.catalog_event_properties e
                                 WHERE e.project = p.project AND e.name = p.name AND p.kind = 'event' ORDER BY e.event) AS events,
                           nullif(n.display_name, '') AS display_name, nullif(n.description, '') AS description,
                           p.declared_at, coalesce(n.hidden, false) AS hidden
                    FROM collector.catalog_properties p
                    LEFT JOIN collector.catalog_notes n ON n.project = p.project AND n.kind = p.kind || '_property' AND n.name = p.name;
                """),
        Migration(
            version: 14, name: "hidden properties hidden from details, items and catalog samples",
            sql: """
                -- A hidden event property leaves every record that is not a profile: events (13),
                -- details and items (the multi-entity protocol's properties are not catalogued
                -- apart); a hidden property's catalog entry shows no sample.
                CREATE OR REPLACE VIEW analytics.details AS
                    SELECT d.project, d.schema, d.detail_id, COALESCE(c.canonical_user_id, d.user_id) AS user_id,
                           CASE WHEN h.names IS NULL THEN d.properties ELSE d.properties - h.names END AS properties, d.updated_at
                    FROM collector.details d
                    LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                    LEFT JOIN (SELECT project, array_agg(name) AS names FROM collector.catalog_notes
                               WHERE kind = 'event_property' AND hidden GROUP BY project) h ON h.project = d.project;
                CREATE OR REPLACE VIEW analytics.items AS
                    SELECT i.project, i.item_type, i.item_id,
                           CASE WHEN h.names IS NULL THEN i.properties ELSE i.properties - h.names END AS properties, i.updated_at
                    FROM collector.items i
                    LEFT JOIN (SELECT project, array_agg(name) AS names FROM collector.catalog_notes
                               WHERE kind = 'event_property' AND hidden GROUP BY project) h ON h.project = i.project;
                CREATE OR REPLACE VIEW analytics.catalog_properties AS
                    SELECT p.project, p.kind, p.name, p.type, p.first_day, p.last_day,
                           CASE WHEN coalesce(n.hidden, false) THEN NULL ELSE p.sample END AS sample,
                           ARRAY(SELECT DISTINCT e.event FROM collector.catalog_event_properties e
                                 WHERE e.project = p.project AND e.name = p.name AND p.kind = 'event' ORDER BY e.event) AS events,
                           nullif(n.display_name, '') AS display_name, nullif(n.description, '') AS description,
                           p.declared_at, coalesce(n.hidden, false) AS hidden
                    FROM collector.catalog_properties p
                    LEFT JOIN collector.catalog_notes n ON n.project = p.project AND n.kind = p.kind || '_property' AND n.name = p.name;
                """),
        ReportSchema.migration,
        ReportSchema.boundedLooks,
        ReportSchema.withoutJIT,
        ReportSchema.periodBits,
        ReportSchema.peopleDays,
    ]
}
