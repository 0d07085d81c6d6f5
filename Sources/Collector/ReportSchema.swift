import DatongPostgres

/// What Sensors' reports read, kept by the collector (`ReportRollup`), and the report functions
/// analysts call (docs/ANALYTICS.md, "Reports"): event trends, funnels, retention, distributions
/// and a person's events, in the project's time zone, people followed through their merges.
enum ReportSchema {
    static let migration = Migration(
        version: 15, name: "report rollups, the project's time zone and the report functions",
        sql: #"""
                -- Which transaction stored each event, so that the rollups read what is new since their last
                -- look (the snapshot technique identity's invalidation log uses). Events stored before this
                -- migration have none: the first look builds everything from every event.
                ALTER TABLE collector.events ADD COLUMN stored_xid bigint;
                ALTER TABLE collector.events ALTER COLUMN stored_xid SET DEFAULT pg_current_xact_id()::text::bigint;
                CREATE INDEX events_stored_xid ON collector.events USING brin (stored_xid) WITH (pages_per_range = 16);
                -- A person's events newest first (analytics.user_events) without sorting all of them.
                CREATE INDEX events_project_user_time ON collector.events (project, user_id, time);
                DROP INDEX collector.events_project_user;

                -- A project's time zone (an IANA name): its days and hours in every report and rollup.
                CREATE TABLE collector.report_settings (
                    project    text        PRIMARY KEY,
                    time_zone  text        NOT NULL,
                    updated_at timestamptz NOT NULL DEFAULT now()
                );
                CREATE FUNCTION collector.report_zone(project text) RETURNS text
                LANGUAGE sql STABLE AS $$
                    SELECT coalesce((SELECT s.time_zone FROM collector.report_settings s WHERE s.project = $1), 'UTC')
                $$;

                -- Events per project, event and local hour.
                CREATE TABLE collector.report_hours (
                    project text      NOT NULL,
                    event   text      NOT NULL,
                    hour    timestamp NOT NULL,
                    events  bigint    NOT NULL,
                    PRIMARY KEY (project, event, hour)
                );
                -- Per project, event, local day and the user each event was stored with (0: none), with the
                -- SDK and app version: how many events, and the first one's time. People are counted by
                -- following user_id through analytics.user_canonical when a report is asked, so a merge made
                -- later changes nothing here.
                CREATE TABLE collector.report_days (
                    project     text        NOT NULL,
                    event       text        NOT NULL,
                    day         date        NOT NULL,
                    user_id     bigint      NOT NULL,
                    lib         text        NOT NULL,
                    app_version text        NOT NULL,
                    events      bigint      NOT NULL,
                    first_at    timestamptz NOT NULL,
                    PRIMARY KEY (project, event, day, user_id, lib, app_version)
                );
                -- Days whose rollups are built again from collector.events (an erasure, retention); a NULL day:
                -- all of the project's (its time zone changed).
                CREATE TABLE collector.report_dirty (
                    project   text        NOT NULL,
                    day       date,
                    marked_at timestamptz NOT NULL DEFAULT now()
                );
                -- How far the rollups have read: the snapshot of the last look (NULL: build everything).
                CREATE TABLE collector.report_state (
                    one_row     boolean     PRIMARY KEY DEFAULT true CHECK (one_row),
                    snapshot    pg_snapshot,
                    rounds      bigint      NOT NULL DEFAULT 0,
                    finished_at timestamptz,
                    events_read bigint      NOT NULL DEFAULT 0
                );
                INSERT INTO collector.report_state DEFAULT VALUES;

                -- Adds to both rollups the events of collector.events that `condition` (SQL over `e`, with the
                -- parameters $1 … $4 of collector.report_round) selects.
                CREATE FUNCTION collector.report_add(condition text, prev pg_snapshot, projects text[], days date[], whole text[]) RETURNS bigint
                LANGUAGE plpgsql AS $fn$
                DECLARE
                    added bigint;
                BEGIN
                    EXECUTE format($q$
                        WITH picked AS MATERIALIZED (
                            SELECT e.project, e.event, e.time AT TIME ZONE coalesce(s.time_zone, 'UTC') AS local, e.time,
                                   coalesce(e.user_id, 0) AS user_id, coalesce(e.lib, '') AS lib, coalesce(e.app_version, '') AS app_version
                            FROM collector.events e LEFT JOIN collector.report_settings s ON s.project = e.project
                            WHERE %s
                        ), hours AS (
                            INSERT INTO collector.report_hours AS h (project, event, hour, events)
                            SELECT project, event, date_trunc('hour', local), count(*) FROM picked GROUP BY 1, 2, 3
                            ON CONFLICT (project, event, hour) DO UPDATE SET events = h.events + excluded.events
                        ), days AS (
                            INSERT INTO collector.report_days AS d (project, event, day, user_id, lib, app_version, events, first_at)
                            SELECT project, event, local::date, user_id, lib, app_version, count(*), min(time) FROM picked GROUP BY 1, 2, 3, 4, 5, 6
                            ON CONFLICT (project, event, day, user_id, lib, app_version)
                            DO UPDATE SET events = d.events + excluded.events, first_at = least(d.first_at, excluded.first_at)
                        )
                        SELECT count(*) FROM picked
                    $q$, condition) INTO added USING prev, projects, days, whole;
                    RETURN added;
                END $fn$;

                -- One look of the rollups, in a REPEATABLE READ transaction: rebuilds at most `max_days` marked
                -- days (or whole projects), then adds every event stored by a transaction the last look did not
                -- see finished, outside what was rebuilt. The look's snapshot is the next one's start, written in
                -- the same transaction: an event is added once, whatever crashes. Two collectors looking at once:
                -- the second fails to serialize and looks again later.
                CREATE FUNCTION collector.report_round(max_days integer) RETURNS TABLE (events_read bigint, days_rebuilt integer, days_waiting bigint)
                LANGUAGE plpgsql AS $fn$
                DECLARE
                    prev pg_snapshot;
                    cur pg_snapshot := pg_current_snapshot();
                    projects text[];
                    days date[];
                    whole text[];
                    n bigint := 0;
                BEGIN
                    IF current_setting('transaction_isolation') <> 'repeatable read' THEN
                        RAISE EXCEPTION 'collector.report_round runs in a REPEATABLE READ transaction';
                    END IF;
                    SELECT s.snapshot INTO prev FROM collector.report_state s FOR UPDATE;
                    IF prev IS NULL THEN
                        DELETE FROM collector.report_hours;
                        DELETE FROM collector.report_days;
                        DELETE FROM collector.report_dirty;
                        n := collector.report_add('true', NULL, NULL, NULL, NULL);
                        days_rebuilt := 0;
                    ELSE
                        WITH taken AS (
                            DELETE FROM collector.report_dirty r WHERE r.ctid = ANY(ARRAY(
                                SELECT ctid FROM collector.report_dirty ORDER BY day NULLS FIRST, marked_at LIMIT max_days))
                            RETURNING r.project, r.day
                        ), distinct_taken AS (SELECT DISTINCT t.project, t.day FROM taken t)
                        SELECT coalesce(array_agg(t.project), '{}'), coalesce(array_agg(t.day), '{}') INTO projects, days FROM distinct_taken t;
                        whole := ARRAY(SELECT p FROM unnest(projects, days) u(p, d) WHERE d IS NULL);
                        -- A project built whole needs none of its days built.
                        SELECT coalesce(array_agg(p), '{}'), coalesce(array_agg(d), '{}') INTO projects, days
                        FROM unnest(projects, days) u(p, d) WHERE d IS NOT NULL AND p <> ALL(whole);
                        days_rebuilt := cardinality(days) + cardinality(whole);
                        IF days_rebuilt > 0 THEN
                            DELETE FROM collector.report_hours h USING unnest(projects, days) u(p, d)
                            WHERE h.project = u.p AND h.hour >= u.d AND h.hour < u.d + 1;
                            DELETE FROM collector.report_hours h WHERE h.project = ANY(whole);
                            DELETE FROM collector.report_days r USING unnest(projects, days) u(p, d) WHERE r.project = u.p AND r.day = u.d;
                            DELETE FROM collector.report_days r WHERE r.project = ANY(whole);
                            n := n + collector.report_add('e.project = ANY($4)', prev, projects, days, whole);
                            n := n + collector.report_add($c$
                                EXISTS (SELECT 1 FROM unnest($2, $3) u(p, d) WHERE e.project = u.p
                                        AND e.time >= u.d::timestamp AT TIME ZONE coalesce(s.time_zone, 'UTC')
                                        AND e.time < (u.d + 1)::timestamp AT TIME ZONE coalesce(s.time_zone, 'UTC'))
                                $c$, prev, projects, days, whole);
                        END IF;
                        n := n + collector.report_add($c$
                            e.stored_xid >= pg_snapshot_xmin($1)::text::bigint
                            AND NOT pg_visible_in_snapshot(e.stored_xid::text::xid8, $1)
                            AND e.project <> ALL($4)
                            AND NOT EXISTS (SELECT 1 FROM unnest($2, $3) u(p, d)
                                            WHERE e.project = u.p AND u.d = (e.time AT TIME ZONE coalesce(s.time_zone, 'UTC'))::date)
                            $c$, prev, projects, days, whole);
                    END IF;
                    UPDATE collector.report_state
                    SET snapshot = cur, rounds = rounds + 1, finished_at = clock_timestamp(), events_read = report_state.events_read + n;
                    events_read := n;
                    SELECT count(*) INTO days_waiting FROM collector.report_dirty;
                    RETURN NEXT;
                END $fn$;

                -- Marks for rebuilding the local days of `project` from `lo` to `hi` (an erasure, a dropped month).
                CREATE FUNCTION collector.report_mark(project text, lo timestamptz, hi timestamptz) RETURNS void
                LANGUAGE sql AS $$
                    INSERT INTO collector.report_dirty (project, day)
                    SELECT $1, d::date FROM generate_series((lo AT TIME ZONE collector.report_zone($1))::date,
                                                            (hi AT TIME ZONE collector.report_zone($1))::date, interval '1 day') d
                $$;

                ------------------------------------------------------------------------------------------------
                -- The reports' shared checks and pieces of SQL. Every error is 22023 (invalid_parameter_value)
                -- with a message that says what is wrong.

                CREATE FUNCTION collector.report_fail(message text) RETURNS void
                LANGUAGE plpgsql AS $$
                BEGIN
                    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = message;
                END $$;

                -- The project exists (it has stored an event, or has a time zone set), the days are in order and
                -- at most `max_days` apart.
                CREATE FUNCTION collector.report_check_range(project text, from_day date, to_day date, max_days integer) RETURNS void
                LANGUAGE plpgsql STABLE AS $$
                BEGIN
                    IF project IS NULL OR NOT (EXISTS (SELECT 1 FROM collector.catalog_event_sources c WHERE c.project = $1)
                                               OR EXISTS (SELECT 1 FROM collector.report_settings s WHERE s.project = $1)) THEN
                        PERFORM collector.report_fail(format('unknown project %L: it has stored no event', project));
                    END IF;
                    IF from_day IS NULL OR to_day IS NULL THEN
                        PERFORM collector.report_fail('from_day and to_day are both needed');
                    END IF;
                    IF to_day < from_day THEN
                        PERFORM collector.report_fail(format('to_day %s is before from_day %s', to_day, from_day));
                    END IF;
                    IF to_day - from_day + 1 > max_days THEN
                        PERFORM collector.report_fail(format('%s days from %s to %s: this report covers at most %s days',
                                                             to_day - from_day + 1, from_day, to_day, max_days));
                    END IF;
                END $$;

                -- The event has been stored in the project and is not hidden.
                CREATE FUNCTION collector.report_check_event(project text, event text) RETURNS void
                LANGUAGE plpgsql STABLE AS $$
                BEGIN
                    IF event IS NULL OR event = '' THEN PERFORM collector.report_fail('an event name is needed'); END IF;
                    IF NOT EXISTS (SELECT 1 FROM collector.catalog_event_sources c WHERE c.project = $1 AND c.event = $2) THEN
                        PERFORM collector.report_fail(format('project %L has stored no event %L', project, event));
                    END IF;
                    IF EXISTS (SELECT 1 FROM collector.catalog_notes n WHERE n.project = $1 AND n.kind = 'event' AND n.name = $2 AND n.hidden) THEN
                        PERFORM collector.report_fail(format('event %L is hidden from analysts in project %L', event, project));
                    END IF;
                END $$;

                -- A property a report reads: `lib` and `app_version` (the event's SDK and app version),
                -- `user.NAME` (a profile property of the event's person) or `NAME` (an event property). Gives the
                -- SQL expression of its value (`as_type`: 'text' or 'number') and whether the profile is needed.
                CREATE FUNCTION collector.report_property(project text, ref text, as_type text, OUT expression text, OUT profile boolean, OUT type text)
                LANGUAGE plpgsql STABLE AS $$
                DECLARE
                    v_kind text := 'event';
                    v_name text := ref;
                    hidden boolean;
                BEGIN
                    profile := false;
                    IF ref IS NULL OR ref = '' THEN PERFORM collector.report_fail('a property name is needed'); END IF;
                    IF ref IN ('lib', 'app_version') AND as_type = 'text' THEN
                        expression := 'e.' || ref;
                        type := 'STRING';
                        RETURN;
                    END IF;
                    IF ref LIKE 'user.%' THEN
                        v_kind := 'profile';
                        v_name := substr(ref, 6);
                        profile := true;
                    END IF;
                    SELECT c.type INTO type FROM collector.catalog_properties c WHERE c.project = $1 AND c.kind = v_kind AND c.name = v_name;
                    IF type IS NULL THEN
                        PERFORM collector.report_fail(format('project %L has no %s property %L', project, v_kind, v_name));
                    END IF;
                    SELECT n.hidden INTO hidden FROM collector.catalog_notes n
                    WHERE n.project = $1 AND n.kind = v_kind || '_property' AND n.name = v_name;
                    IF coalesce(hidden, false) THEN
                        PERFORM collector.report_fail(format('%s property %L is hidden from analysts in project %L', v_kind, v_name, project));
                    END IF;
                    IF as_type = 'number' AND type <> 'NUMBER' THEN
                        PERFORM collector.report_fail(format('%s property %L is %s, not a NUMBER', v_kind, v_name, type));
                    END IF;
                    expression := format('analytics.as_%s(%s.properties, %L)', CASE WHEN as_type = 'number' THEN 'number' ELSE 'string' END,
                                         CASE WHEN profile THEN 'p' ELSE 'e' END, v_name);
                END $$;

                -- Property conditions as SQL over `e` (and `p`, the profile, when `profile`): a JSON array of
                -- {"property": REF, "op": OP, "value": V}, all of which must hold. OP: = != < <= > >= (V a value),
                -- in / not_in (V a list), contains (V a text: part of a text, or an element of a list), is_set, not_set.
                CREATE FUNCTION collector.report_conditions(project text, filters jsonb, OUT condition text, OUT profile boolean)
                LANGUAGE plpgsql STABLE AS $$
                DECLARE
                    f jsonb;
                    prop record;
                    op text;
                    v jsonb;
                    ref text;
                    typed text;
                    value_sql text;
                    parts text[] := '{}';
                BEGIN
                    profile := false;
                    IF filters IS NULL THEN filters := '[]'; END IF;
                    IF jsonb_typeof(filters) <> 'array' THEN
                        PERFORM collector.report_fail('filters is a JSON array of {"property": …, "op": …, "value": …}');
                    END IF;
                    IF jsonb_array_length(filters) > 20 THEN PERFORM collector.report_fail('at most 20 filters'); END IF;
                    FOR f IN SELECT * FROM jsonb_array_elements(filters) LOOP
                        IF jsonb_typeof(f) <> 'object' OR jsonb_typeof(f -> 'property') <> 'string' OR jsonb_typeof(f -> 'op') <> 'string' THEN
                            PERFORM collector.report_fail(format('filter %s: needs "property" and "op" texts', f));
                        END IF;
                        ref := f ->> 'property';
                        op := f ->> 'op';
                        v := f -> 'value';
                        SELECT * INTO prop FROM collector.report_property(project, ref, 'text');
                        profile := profile OR prop.profile;
                        -- Compare as the property's type: numbers as numbers, everything else as text.
                        IF prop.type = 'NUMBER' THEN
                            typed := replace(prop.expression, 'as_string', 'as_number');
                        ELSIF prop.type = 'BOOL' THEN
                            typed := replace(prop.expression, 'as_string', 'as_bool');
                        ELSE
                            typed := prop.expression;
                        END IF;
                        IF op IN ('=', '!=', '<', '<=', '>', '>=') THEN
                            IF v IS NULL OR jsonb_typeof(v) NOT IN ('string', 'number', 'boolean') THEN
                                PERFORM collector.report_fail(format('filter on %L: %s needs a text, number or boolean "value"', ref, op));
                            END IF;
                            IF prop.type = 'NUMBER' AND (jsonb_typeof(v) <> 'number') THEN
                                PERFORM collector.report_fail(format('filter on %L: the property is a NUMBER; "value" must be a number', ref));
                            END IF;
                            IF prop.type = 'BOOL' AND (jsonb_typeof(v) <> 'boolean') THEN
                                PERFORM collector.report_fail(format('filter on %L: the property is a BOOL; "value" must be true or false', ref));
                            END IF;
                            value_sql := CASE prop.type WHEN 'NUMBER' THEN format('%s::numeric', v #>> '{}') WHEN 'BOOL' THEN (v #>> '{}')
                                                        ELSE quote_literal(v #>> '{}') END;
                            parts := parts || format('(%s %s %s)', typed, CASE op WHEN '!=' THEN 'IS DISTINCT FROM' ELSE op END, value_sql);
                        ELSIF op IN ('in', 'not_in') THEN
                            IF jsonb_typeof(v) IS DISTINCT FROM 'array' OR jsonb_array_length(v) = 0 OR jsonb_array_length(v) > 1000 THEN
                                PERFORM collector.report_fail(format('filter on %L: %s needs a "value" list of 1 to 1000 values', ref, op));
                            END IF;
                            parts := parts || format('(%s %s (SELECT jsonb_array_elements_text(%L::jsonb)))', prop.expression,
                                                     CASE op WHEN 'in' THEN 'IN' ELSE 'NOT IN' END, v);
                            IF op = 'not_in' THEN parts[cardinality(parts)] := format('(%s IS NULL OR %s)', prop.expression, parts[cardinality(parts)]); END IF;
                        ELSIF op = 'contains' THEN
                            IF jsonb_typeof(v) IS DISTINCT FROM 'string' THEN
                                PERFORM collector.report_fail(format('filter on %L: contains needs a text "value"', ref));
                            END IF;
                            IF prop.type = 'LIST' THEN
                                parts := parts || format('(%s = ANY(%s))', quote_literal(v #>> '{}'), replace(prop.expression, 'as_string', 'as_list'));
                            ELSE
                                parts := parts || format('(strpos(%s, %L) > 0)', prop.expression, v #>> '{}');
                            END IF;
                        ELSIF op IN ('is_set', 'not_set') THEN
                            IF ref IN ('lib', 'app_version') THEN
                                parts := parts || format('(%s %s)', prop.expression, CASE op WHEN 'is_set' THEN 'IS NOT NULL' ELSE 'IS NULL' END);
                            ELSE
                                parts := parts || format('(%s(coalesce(%s.properties, ''{}'') ? %L))', CASE op WHEN 'is_set' THEN '' ELSE 'NOT ' END,
                                                         CASE WHEN prop.profile THEN 'p' ELSE 'e' END, CASE WHEN prop.profile THEN substr(ref, 6) ELSE ref END);
                            END IF;
                        ELSE
                            PERFORM collector.report_fail(format('filter on %L: unknown op %L (= != < <= > >= in not_in contains is_set not_set)', ref, op));
                        END IF;
                    END LOOP;
                    condition := CASE WHEN cardinality(parts) = 0 THEN 'true' ELSE array_to_string(parts, ' AND ') END;
                END $$;

                -- The FROM clause of a report that reads events: each event with its person now (`u`) and, when
                -- asked, the person's profile (`p`).
                CREATE FUNCTION collector.report_from(profile boolean) RETURNS text
                LANGUAGE sql IMMUTABLE AS $$
                    SELECT 'collector.events e LEFT JOIN analytics.user_canonical c ON c.project = e.project AND c.user_id = e.user_id'
                        || CASE WHEN profile THEN ' LEFT JOIN collector.profiles p ON p.project = e.project AND p.user_id = coalesce(c.canonical_user_id, e.user_id)' ELSE '' END
                $$;

                ------------------------------------------------------------------------------------------------
                -- The reports (docs/ANALYTICS.md, "Reports").

                CREATE FUNCTION analytics.event_trend(
                    project text, events text[], from_day date, to_day date, unit text DEFAULT 'day', measure text DEFAULT 'events',
                    property text DEFAULT NULL, group_by text DEFAULT NULL, filters jsonb DEFAULT '[]', top integer DEFAULT 10
                ) RETURNS TABLE (bucket timestamp, event text, group_value text, value numeric)
                LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
                DECLARE
                    zone text;
                    cond record;
                    grp_expr text;
                    grp_profile boolean := false;
                    val_expr text;
                    sql text;
                    name text;
                    any_event boolean := events = ARRAY['*'];
                    hidden text[];
                BEGIN
                    PERFORM collector.report_check_range(project, from_day, to_day, 400);
                    IF events IS NULL OR cardinality(events) = 0 OR cardinality(events) > 30 THEN
                        PERFORM collector.report_fail('events: name 1 to 30 events, or ''*'' for any event');
                    END IF;
                    IF NOT any_event THEN
                        FOREACH name IN ARRAY events LOOP PERFORM collector.report_check_event(project, name); END LOOP;
                    END IF;
                    -- Any event: every event but the hidden ones, counted as one event named '*'.
                    hidden := ARRAY(SELECT n.name FROM collector.catalog_notes n WHERE n.project = $1 AND n.kind = 'event' AND n.hidden);
                    IF unit IS NULL OR unit NOT IN ('hour', 'day', 'week', 'month', 'all') THEN
                        PERFORM collector.report_fail(format('unit %L: hour, day, week, month or all (one bucket for the whole range)', unit));
                    END IF;
                    IF unit = 'hour' AND to_day - from_day >= 31 THEN PERFORM collector.report_fail('unit hour covers at most 31 days'); END IF;
                    IF measure IS NULL OR measure NOT IN ('events', 'people', 'sum', 'avg', 'min', 'max') THEN
                        PERFORM collector.report_fail(format('measure %L: events, people, sum, avg, min or max', measure));
                    END IF;
                    IF (measure IN ('sum', 'avg', 'min', 'max')) <> (property IS NOT NULL) THEN
                        PERFORM collector.report_fail('property names the NUMBER property of sum, avg, min and max, and only of them');
                    END IF;
                    IF top IS NULL OR top NOT BETWEEN 1 AND 1000 THEN PERFORM collector.report_fail('top: 1 to 1000 groups'); END IF;
                    zone := collector.report_zone(project);
                    SELECT * INTO cond FROM collector.report_conditions(project, filters);
                    IF group_by IS NOT NULL THEN SELECT expression, profile INTO grp_expr, grp_profile FROM collector.report_property(project, group_by, 'text'); END IF;
                    IF property IS NOT NULL THEN val_expr := (collector.report_property(project, property, 'number')).expression; END IF;

                    IF cond.condition = 'true' AND measure = 'events' AND group_by IS NULL THEN
                        -- Counts: the hourly rollup.
                        sql := format($q$
                            SELECT %s, %s, NULL::text, sum(h.events)::numeric
                            FROM collector.report_hours h
                            WHERE h.project = $1 AND %s AND h.hour >= $3::timestamp AND h.hour < $4::timestamp + interval '1 day'
                            GROUP BY 1, 2$q$, CASE WHEN unit = 'all' THEN '$3::timestamp' ELSE format('date_trunc(%L, h.hour)', unit) END, CASE WHEN any_event THEN '''*''::text' ELSE 'h.event' END,
                            CASE WHEN any_event THEN 'h.event <> ALL($5)' ELSE 'h.event = ANY($2)' END);
                    ELSIF cond.condition = 'true' AND measure IN ('events', 'people') AND unit <> 'hour'
                          AND (group_by IS NULL OR group_by IN ('lib', 'app_version') OR grp_profile) THEN
                        -- People, and counts by SDK, app version or a profile property: the daily rollup.
                        sql := format($q$
                            SELECT %s, %s, %s, %s
                            FROM collector.report_days d
                            LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                            %s
                            WHERE d.project = $1 AND %s AND d.day >= $3 AND d.day <= $4
                            GROUP BY 1, 2, 3$q$, CASE WHEN unit = 'all' THEN '$3::timestamp' ELSE format('date_trunc(%L, d.day::timestamp)', unit) END, CASE WHEN any_event THEN '''*''::text' ELSE 'd.event' END,
                            CASE WHEN group_by IS NULL THEN 'NULL::text' WHEN grp_profile THEN grp_expr ELSE format('nullif(d.%s, %L)', group_by, '') END,
                            CASE measure WHEN 'events' THEN 'sum(d.events)::numeric'
                                         ELSE 'count(DISTINCT coalesce(c.canonical_user_id, d.user_id)) FILTER (WHERE d.user_id <> 0)::numeric' END,
                            CASE WHEN grp_profile THEN 'LEFT JOIN collector.profiles p ON p.project = d.project AND p.user_id = coalesce(c.canonical_user_id, d.user_id)' ELSE '' END,
                            CASE WHEN any_event THEN 'd.event <> ALL($5)' ELSE 'd.event = ANY($2)' END);
                    ELSE
                        -- Anything else reads the events.
                        sql := format($q$
                            SELECT %s, %s, %s, %s
                            FROM %s
                            WHERE e.project = $1 AND %s AND e.time >= $3::timestamp AT TIME ZONE %L
                              AND e.time < ($4 + 1)::timestamp AT TIME ZONE %L AND %s
                            GROUP BY 1, 2, 3$q$, CASE WHEN unit = 'all' THEN '$3::timestamp' ELSE format('date_trunc(%L, e.time AT TIME ZONE %L)', unit, zone) END, CASE WHEN any_event THEN '''*''::text' ELSE 'e.event' END,
                            coalesce(grp_expr, 'NULL::text'),
                            CASE measure WHEN 'events' THEN 'count(*)::numeric'
                                         WHEN 'people' THEN 'count(DISTINCT coalesce(c.canonical_user_id, e.user_id))::numeric'
                                         ELSE format('%s(%s)::numeric', measure, val_expr) END,
                            collector.report_from(coalesce(cond.profile, false) OR coalesce(grp_profile, false)),
                            CASE WHEN any_event THEN 'e.event <> ALL($5)' ELSE 'e.event = ANY($2)' END, zone, zone, cond.condition);
                    END IF;
                    IF group_by IS NULL THEN
                        RETURN QUERY EXECUTE sql || ' ORDER BY 1, 2' USING project, events, from_day, to_day, hidden;
                    ELSE
                        -- The `top` groups with the largest values over the whole range.
                        RETURN QUERY EXECUTE format($q$
                            WITH t(bucket, event, g, v) AS (%s),
                            ranked AS (SELECT g, row_number() OVER (ORDER BY sum(v) DESC, g NULLS LAST) AS n FROM t GROUP BY g)
                            SELECT t.bucket, t.event, t.g, t.v FROM t JOIN ranked r ON r.g IS NOT DISTINCT FROM t.g
                            WHERE r.n <= %s ORDER BY t.bucket, t.event, r.n$q$, sql, top) USING project, events, from_day, to_day, hidden;
                    END IF;
                END $fn$;

                -- A funnel step: an event name, or {"event": NAME, "filters": [...]}.
                CREATE FUNCTION analytics.funnel(
                    project text, steps jsonb, from_day date, to_day date, window_seconds integer DEFAULT 86400,
                    group_by text DEFAULT NULL, top integer DEFAULT 10
                ) RETURNS TABLE (group_value text, step integer, event text, people bigint, conversion numeric, median_seconds numeric)
                LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
                DECLARE
                    zone text;
                    n integer;
                    k integer;
                    s jsonb;
                    names text[] := '{}';
                    cond record;
                    grp_expr text;
                    grp_profile boolean := false;
                    parts text[] := '{}';
                    levels text[] := '{}';
                    sql text;
                BEGIN
                    PERFORM collector.report_check_range(project, from_day, to_day, 400);
                    IF steps IS NULL OR jsonb_typeof(steps) <> 'array' THEN PERFORM collector.report_fail('steps is a JSON array of 2 to 10 steps'); END IF;
                    n := jsonb_array_length(steps);
                    IF n NOT BETWEEN 2 AND 10 THEN
                        PERFORM collector.report_fail(format('%s steps: a funnel has 2 to 10', n));
                    END IF;
                    IF window_seconds IS NULL OR window_seconds NOT BETWEEN 1 AND 180 * 86400 THEN
                        PERFORM collector.report_fail(format('window_seconds %s: the conversion window is 1 second to 180 days (15552000)', window_seconds));
                    END IF;
                    IF top IS NULL OR top NOT BETWEEN 1 AND 1000 THEN PERFORM collector.report_fail('top: 1 to 1000 groups'); END IF;
                    zone := collector.report_zone(project);
                    IF group_by IS NOT NULL THEN SELECT expression, profile INTO grp_expr, grp_profile FROM collector.report_property(project, group_by, 'text'); END IF;
                    FOR k IN 1..n LOOP
                        s := steps -> (k - 1);
                        IF jsonb_typeof(s) = 'string' THEN s := jsonb_build_object('event', s); END IF;
                        IF jsonb_typeof(s) <> 'object' OR jsonb_typeof(s -> 'event') IS DISTINCT FROM 'string' THEN
                            PERFORM collector.report_fail(format('step %s: an event name or {"event": …, "filters": […]}', k));
                        END IF;
                        PERFORM collector.report_check_event(project, s ->> 'event');
                        names := names || (s ->> 'event');
                        SELECT * INTO cond FROM collector.report_conditions(project, s -> 'filters');
                        -- Step k's events: the first step's start in the range, the others up to a window after it.
                        parts := parts || format($q$
                            s%s AS (SELECT coalesce(c.canonical_user_id, e.user_id) AS u, e.time AS t%s
                                    FROM %s
                                    WHERE e.project = $1 AND e.event = %L AND e.user_id IS NOT NULL AND e.time >= $2 AND e.time < %s AND %s)$q$,
                            k, CASE WHEN k = 1 THEN format(', %s AS g', CASE WHEN group_by IS NULL THEN 'NULL::text' ELSE grp_expr END) ELSE '' END,
                            collector.report_from(cond.profile OR (k = 1 AND coalesce(grp_profile, false))),
                            s ->> 'event', CASE WHEN k = 1 THEN '$3' ELSE '$3 + $4' END, cond.condition);
                        IF k = 1 THEN
                            parts := array_append(parts, 'r1 AS (SELECT u, g, t, t AS s, t AS prev FROM s1)');
                        ELSE
                            -- Reaching step k: a step k event strictly after a reach of step k-1, within the window
                            -- of that chain's start; of the reaches before it, the one with the latest start.
                            parts := parts || format($q$
                                r%1$s AS (SELECT u, g, t, m[1] AS s, m[2] AS prev FROM (
                                    SELECT u, g, t, kind, max(m0) OVER (PARTITION BY u, g ORDER BY t, kind DESC ROWS UNBOUNDED PRECEDING) AS m
                                    FROM (SELECT u, g, t, 0 AS kind, ARRAY[s, t] AS m0 FROM r%2$s
                                          UNION ALL
                                          SELECT x.u, w.g, x.t, 1, NULL FROM s%1$s x JOIN (SELECT DISTINCT u, g FROM r%2$s) w ON w.u = x.u) a
                                    ) b WHERE kind = 1 AND m IS NOT NULL AND t - m[1] <= $4)$q$, k, k - 1);
                        END IF;
                        levels := levels || format($q$
                            SELECT g, %1$s AS step, count(*) AS people, %2$s AS median
                            FROM (SELECT DISTINCT ON (u, g) u, g, extract(epoch FROM t - prev) AS gap FROM r%1$s ORDER BY u, g, t) x GROUP BY g$q$,
                            k, CASE WHEN k = 1 THEN 'NULL::numeric' ELSE 'percentile_cont(0.5) WITHIN GROUP (ORDER BY gap)::numeric' END);
                    END LOOP;
                    sql := format($q$
                        WITH %s,
                        levels AS (%s),
                        firsts AS (SELECT g, people AS first, row_number() OVER (ORDER BY people DESC, g NULLS LAST) AS n FROM levels WHERE step = 1)
                        SELECT f.g, k.step, ($5::text[])[k.step], coalesce(l.people, 0), round(coalesce(l.people, 0)::numeric / f.first, 4), round(l.median, 3)
                        FROM firsts f CROSS JOIN generate_series(1, %s) AS k(step)
                        LEFT JOIN levels l ON l.g IS NOT DISTINCT FROM f.g AND l.step = k.step
                        WHERE f.n <= %s
                        ORDER BY f.n, k.step$q$,
                        array_to_string(parts, ', '), array_to_string(levels, ' UNION ALL '), n, top);
                    RETURN QUERY EXECUTE sql USING project, from_day::timestamp AT TIME ZONE zone, (to_day + 1)::timestamp AT TIME ZONE zone,
                        make_interval(secs => window_seconds), names;
                END $fn$;

                CREATE FUNCTION analytics.retention(
                    project text, start_event text, return_event text, from_day date, to_day date, unit text DEFAULT 'day',
                    periods integer DEFAULT 7, start_filters jsonb DEFAULT '[]', return_filters jsonb DEFAULT '[]'
                ) RETURNS TABLE (cohort date, people bigint, period integer, returned bigint, returned_within bigint)
                LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
                DECLARE
                    zone text;
                    len integer;
                    c_cond record;
                    r_cond record;
                    starts text;
                    returns text;
                    today date;
                BEGIN
                    PERFORM collector.report_check_range(project, from_day, to_day, 400);
                    PERFORM collector.report_check_event(project, start_event);
                    PERFORM collector.report_check_event(project, return_event);
                    IF unit IS NULL OR unit NOT IN ('day', 'week') THEN PERFORM collector.report_fail(format('unit %L: day or week', unit)); END IF;
                    IF periods IS NULL OR periods NOT BETWEEN 1 AND 30 THEN
                        PERFORM collector.report_fail(format('periods %s: 1 to 30 days or weeks', periods));
                    END IF;
                    len := CASE unit WHEN 'day' THEN 1 ELSE 7 END;
                    zone := collector.report_zone(project);
                    today := (now() AT TIME ZONE zone)::date;
                    SELECT * INTO c_cond FROM collector.report_conditions(project, start_filters);
                    SELECT * INTO r_cond FROM collector.report_conditions(project, return_filters);
                    -- (person, day) pairs of the start and the return event: the daily rollup, or the events
                    -- when a filter needs their properties.
                    starts := CASE WHEN c_cond.condition = 'true' THEN
                        'SELECT DISTINCT coalesce(c.canonical_user_id, d.user_id) AS u, d.day FROM collector.report_days d
                         LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                         WHERE d.project = $1 AND d.event = $2 AND d.user_id <> 0 AND d.day >= $4 AND d.day <= $5'
                        ELSE format('SELECT DISTINCT coalesce(c.canonical_user_id, e.user_id) AS u, (e.time AT TIME ZONE %L)::date AS day FROM %s
                         WHERE e.project = $1 AND e.event = $2 AND e.user_id IS NOT NULL AND e.time >= $4::timestamp AT TIME ZONE %L
                           AND e.time < ($5 + 1)::timestamp AT TIME ZONE %L AND %s', zone, collector.report_from(c_cond.profile), zone, zone, c_cond.condition) END;
                    returns := CASE WHEN r_cond.condition = 'true' THEN
                        'SELECT DISTINCT coalesce(c.canonical_user_id, d.user_id) AS u, d.day FROM collector.report_days d
                         LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                         WHERE d.project = $1 AND d.event = $3 AND d.user_id <> 0 AND d.day > $4 AND d.day <= $6'
                        ELSE format('SELECT DISTINCT coalesce(c.canonical_user_id, e.user_id) AS u, (e.time AT TIME ZONE %L)::date AS day FROM %s
                         WHERE e.project = $1 AND e.event = $3 AND e.user_id IS NOT NULL AND e.time >= ($4 + 1)::timestamp AT TIME ZONE %L
                           AND e.time < ($6 + 1)::timestamp AT TIME ZONE %L AND %s', zone, collector.report_from(r_cond.profile), zone, zone, r_cond.condition) END;
                    RETURN QUERY EXECUTE format($q$
                        WITH st AS (SELECT DISTINCT u, date_trunc(%1$L, day)::date AS cohort FROM (%2$s) x),
                        rt AS (SELECT DISTINCT u, date_trunc(%1$L, day)::date AS at FROM (%3$s) x),
                        hits AS (SELECT st.cohort, st.u, (rt.at - st.cohort) / %4$s AS k
                                 FROM st JOIN rt ON rt.u = st.u AND rt.at > st.cohort AND rt.at <= st.cohort + %4$s * $7),
                        firsts AS (SELECT cohort, u, min(k) AS k FROM hits GROUP BY 1, 2),
                        sizes AS (SELECT cohort, count(*) AS people FROM st GROUP BY 1),
                        exact AS (SELECT cohort, k, count(*) AS returned FROM hits GROUP BY 1, 2),
                        firstk AS (SELECT cohort, k, count(*) AS first FROM firsts GROUP BY 1, 2)
                        SELECT z.cohort, z.people, p.k,
                               CASE WHEN z.cohort + %4$s * (p.k + 1) - 1 > $8 THEN NULL ELSE coalesce(x.returned, 0) END,
                               CASE WHEN z.cohort + %4$s * (p.k + 1) - 1 > $8 THEN NULL
                                    ELSE coalesce(sum(f.first) OVER (PARTITION BY z.cohort ORDER BY p.k), 0) END::bigint
                        FROM sizes z CROSS JOIN generate_series(1, $7) AS p(k)
                        LEFT JOIN exact x ON x.cohort = z.cohort AND x.k = p.k
                        LEFT JOIN firstk f ON f.cohort = z.cohort AND f.k = p.k
                        ORDER BY 1, 3$q$, unit, starts, returns, len)
                    USING project, start_event, return_event, from_day, to_day, to_day + len * (periods + 1), periods, today;
                END $fn$;

                CREATE FUNCTION analytics.distribution(
                    project text, event text, from_day date, to_day date, measure text DEFAULT 'events', property text DEFAULT NULL,
                    buckets numeric[] DEFAULT NULL, filters jsonb DEFAULT '[]'
                ) RETURNS TABLE (bucket_from numeric, bucket_to numeric, people bigint)
                LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
                DECLARE
                    zone text;
                    cond record;
                    val_expr text;
                    per_person text;
                    edges numeric[];
                BEGIN
                    PERFORM collector.report_check_range(project, from_day, to_day, 400);
                    PERFORM collector.report_check_event(project, event);
                    IF measure IS NULL OR measure NOT IN ('events', 'sum') THEN PERFORM collector.report_fail(format('measure %L: events or sum', measure)); END IF;
                    IF (measure = 'sum') <> (property IS NOT NULL) THEN
                        PERFORM collector.report_fail('property names the NUMBER property of measure sum, and only of it');
                    END IF;
                    IF measure = 'sum' AND buckets IS NULL THEN PERFORM collector.report_fail('measure sum needs buckets (their lower bounds, ascending)'); END IF;
                    edges := coalesce(buckets, '{1,2,3,4,5,6,11,21,51,101}'::numeric[]);
                    IF cardinality(edges) NOT BETWEEN 1 AND 100 OR array_position(edges, NULL) IS NOT NULL
                       OR EXISTS (SELECT 1 FROM unnest(edges) WITH ORDINALITY a(v, i) JOIN unnest(edges) WITH ORDINALITY b(v, i) ON b.i = a.i + 1 WHERE b.v <= a.v) THEN
                        PERFORM collector.report_fail('buckets: 1 to 100 lower bounds, ascending');
                    END IF;
                    zone := collector.report_zone(project);
                    SELECT * INTO cond FROM collector.report_conditions(project, filters);
                    IF property IS NOT NULL THEN val_expr := (collector.report_property(project, property, 'number')).expression; END IF;
                    IF cond.condition = 'true' AND measure = 'events' THEN
                        per_person := 'SELECT sum(d.events)::numeric AS v FROM collector.report_days d
                            LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                            WHERE d.project = $1 AND d.event = $2 AND d.user_id <> 0 AND d.day >= $3 AND d.day <= $4
                            GROUP BY coalesce(c.canonical_user_id, d.user_id)';
                    ELSE
                        per_person := format('SELECT %s AS v FROM %s
                            WHERE e.project = $1 AND e.event = $2 AND e.user_id IS NOT NULL AND e.time >= $3::timestamp AT TIME ZONE %L
                              AND e.time < ($4 + 1)::timestamp AT TIME ZONE %L AND %s
                            GROUP BY coalesce(c.canonical_user_id, e.user_id)',
                            CASE measure WHEN 'events' THEN 'count(*)::numeric' ELSE format('coalesce(sum(%s), 0)', val_expr) END,
                            collector.report_from(cond.profile), zone, zone, cond.condition);
                    END IF;
                    RETURN QUERY EXECUTE format($q$
                        WITH v AS (%s),
                        b AS (SELECT i, $5[i] AS lo, $5[i + 1] AS hi FROM generate_subscripts($5, 1) i
                              UNION ALL SELECT 0, NULL, $5[1])
                        SELECT b.lo, b.hi, count(v.v)
                        FROM b LEFT JOIN v ON (b.lo IS NULL OR v.v >= b.lo) AND (b.hi IS NULL OR v.v < b.hi)
                        GROUP BY b.i, b.lo, b.hi
                        HAVING b.i > 0 OR count(v.v) > 0
                        ORDER BY b.i$q$, per_person)
                    USING project, event, from_day, to_day, edges;
                END $fn$;

                -- A person's events, newest first: every event of every user merged into the person now. `before`
                -- is the `next` of the last row of the page before.
                CREATE FUNCTION analytics.user_events(project text, user_id bigint, before text DEFAULT NULL, page_size integer DEFAULT 100)
                RETURNS TABLE ("time" timestamptz, event text, distinct_id text, lib text, hybrid_h5 boolean, stored_user_id bigint,
                               event_id uuid, properties jsonb, next text)
                LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
                DECLARE
                    person bigint;
                    users bigint[];
                    at timestamptz;
                    after_id uuid;
                BEGIN
                    IF project IS NULL OR NOT EXISTS (SELECT 1 FROM collector.catalog_event_sources c WHERE c.project = $1) THEN
                        PERFORM collector.report_fail(format('unknown project %L: it has stored no event', project));
                    END IF;
                    IF user_id IS NULL OR user_id <= 0 THEN PERFORM collector.report_fail('user_id: a user number (1, 2, …)'); END IF;
                    IF page_size IS NULL OR page_size NOT BETWEEN 1 AND 1000 THEN PERFORM collector.report_fail('page_size: 1 to 1000'); END IF;
                    IF before IS NOT NULL THEN
                        IF before !~ '^-?[0-9]{1,19}/[0-9a-f-]{36}$' THEN
                            PERFORM collector.report_fail('before: the next of a row of the page before');
                        END IF;
                        at := to_timestamp(split_part(before, '/', 1)::numeric / 1000000);
                        after_id := split_part(before, '/', 2)::uuid;
                    END IF;
                    person := coalesce((SELECT u.canonical_user_id FROM analytics.user_canonical u WHERE u.project = $1 AND u.user_id = $2), $2);
                    users := person || ARRAY(SELECT u.user_id FROM analytics.user_canonical u WHERE u.project = $1 AND u.canonical_user_id = person);
                    RETURN QUERY
                        SELECT e.time, e.event, e.distinct_id, e.lib, e.hybrid_h5, e.user_id, e.event_id,
                               CASE WHEN h.names IS NULL THEN e.properties ELSE e.properties - h.names END,
                               (extract(epoch FROM e.time) * 1000000)::bigint || '/' || e.event_id
                        FROM collector.events e
                        LEFT JOIN (SELECT array_agg(n.name) AS names FROM collector.catalog_notes n
                                   WHERE n.project = $1 AND n.kind = 'event_property' AND n.hidden) h ON true
                        WHERE e.project = $1 AND e.user_id = ANY(users)
                          AND (at IS NULL OR (e.time, e.event_id) < (at, after_id))
                          AND NOT EXISTS (SELECT 1 FROM collector.catalog_notes n
                                          WHERE n.project = $1 AND n.kind = 'event' AND n.name = e.event AND n.hidden)
                        ORDER BY e.time DESC, e.event_id DESC
                        LIMIT page_size;
                END $fn$;

                -- How far behind the rollups are: when the last look finished, and days marked to build again.
                CREATE VIEW analytics.report_status AS
                    SELECT s.finished_at AS rolled_up_at, s.rounds, s.events_read, (SELECT count(*) FROM collector.report_dirty) AS days_waiting
                    FROM collector.report_state s;
                COMMENT ON VIEW analytics.report_status IS 'The report rollups: when their last look finished, looks made, events read, days waiting to be built again.';
            """#)

    /// Every look bounded: the first look (after the upgrade that brought the rollups, over every
    /// stored event) and a project's rebuild in a new time zone used to build everything in one
    /// transaction (64 s at 10M events). Now they only mark each local day the project has events
    /// on, and every look builds at most `max_days` marked days, as it does after an erasure.
    static let boundedLooks = Migration(
        version: 16, name: "report rollups built a bounded number of days a look",
        sql: #"""
            CREATE OR REPLACE FUNCTION collector.report_round(max_days integer) RETURNS TABLE (events_read bigint, days_rebuilt integer, days_waiting bigint)
            LANGUAGE plpgsql AS $fn$
            DECLARE
                prev pg_snapshot;
                cur pg_snapshot := pg_current_snapshot();
                projects text[];
                days date[];
                whole text;
                zone text;
                lo timestamptz;
                hi timestamptz;
                n bigint := 0;
            BEGIN
                IF current_setting('transaction_isolation') <> 'repeatable read' THEN
                    RAISE EXCEPTION 'collector.report_round runs in a REPEATABLE READ transaction';
                END IF;
                SELECT s.snapshot INTO prev FROM collector.report_state s FOR UPDATE;
                IF prev IS NULL THEN
                    -- The first look: every project with events is built whole, a bounded number of days a look.
                    -- Every event this look sees is in a marked day, so none is added as new: the next look adds
                    -- what this one could not see.
                    DELETE FROM collector.report_dirty;
                    INSERT INTO collector.report_dirty (project, day)
                    WITH RECURSIVE p(project) AS (
                        SELECT min(e.project) FROM collector.events e
                        UNION ALL
                        SELECT (SELECT min(e.project) FROM collector.events e WHERE e.project > p.project) FROM p WHERE p.project IS NOT NULL
                    )
                    SELECT p.project, NULL FROM p WHERE p.project IS NOT NULL;
                    prev := cur;
                END IF;
                -- A project built whole (the first look, a new time zone): its rollups go, and each local day
                -- from its first event to its last is marked instead.
                FOR whole IN SELECT DISTINCT r.project FROM collector.report_dirty r WHERE r.day IS NULL LOOP
                    DELETE FROM collector.report_dirty r WHERE r.project = whole;
                    DELETE FROM collector.report_hours h WHERE h.project = whole;
                    DELETE FROM collector.report_days d WHERE d.project = whole;
                    SELECT min(e.time), max(e.time) INTO lo, hi FROM collector.events e WHERE e.project = whole;
                    IF lo IS NOT NULL THEN PERFORM collector.report_mark(whole, lo, hi); END IF;
                END LOOP;
                WITH taken AS (
                    DELETE FROM collector.report_dirty r WHERE r.ctid = ANY(ARRAY(
                        SELECT ctid FROM collector.report_dirty ORDER BY day, marked_at LIMIT max_days))
                    RETURNING r.project, r.day
                ), distinct_taken AS (SELECT DISTINCT t.project, t.day FROM taken t)
                SELECT coalesce(array_agg(t.project), '{}'), coalesce(array_agg(t.day), '{}') INTO projects, days FROM distinct_taken t;
                days_rebuilt := cardinality(days);
                IF days_rebuilt > 0 THEN
                    DELETE FROM collector.report_hours h USING unnest(projects, days) u(p, d)
                    WHERE h.project = u.p AND h.hour >= u.d AND h.hour < u.d + 1;
                    DELETE FROM collector.report_days r USING unnest(projects, days) u(p, d) WHERE r.project = u.p AND r.day = u.d;
                    -- Day by day, each a range of the primary key (project, time): an erasure's or a first
                    -- look's days read their own events, not every event of the project.
                    FOR i IN 1 .. days_rebuilt LOOP
                        zone := collector.report_zone(projects[i]);
                        n := n + collector.report_add(
                            format('e.project = %L AND e.time >= %L::timestamptz AND e.time < %L::timestamptz', projects[i],
                                   to_char(days[i]::timestamp AT TIME ZONE zone AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                                   to_char((days[i] + 1)::timestamp AT TIME ZONE zone AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
                            prev, NULL, NULL, NULL);
                    END LOOP;
                END IF;
                -- New events (stored by transactions the last look did not see finished), but those of the days
                -- just built, which counted them. An event of a day still marked is added now and again when
                -- its day is built, which first deletes what the day had.
                n := n + collector.report_add($c$
                    e.stored_xid >= pg_snapshot_xmin($1)::text::bigint
                    AND NOT pg_visible_in_snapshot(e.stored_xid::text::xid8, $1)
                    AND NOT EXISTS (SELECT 1 FROM unnest($2, $3) u(p, d)
                                    WHERE e.project = u.p AND u.d = (e.time AT TIME ZONE coalesce(s.time_zone, 'UTC'))::date)
                    $c$, prev, projects, days, NULL);
                UPDATE collector.report_state
                SET snapshot = cur, rounds = rounds + 1, finished_at = clock_timestamp(), events_read = report_state.events_read + n;
                events_read := n;
                SELECT count(*) INTO days_waiting FROM collector.report_dirty;
                RETURN NEXT;
            END $fn$;
            """#
    )

    /// The reports without JIT compilation, and a funnel that reads its first step once. PostgreSQL
    /// compiled the reports' generated queries (their estimates are far above what they read) on
    /// every call: 1.9 s of the 30-day funnel's 2.3 s query at 1M events (docs/BENCHMARKS.md, "Reports").
    /// The funnel's first step was copied into a chain of its own and sorted twice; now its people are
    /// counted by hashing and its events sorted once, only for people with a second step. Retention
    /// made its (person, day) pairs distinct twice; now once.
    static let withoutJIT = Migration(
        version: 17, name: "report functions without JIT; a funnel that sorts its first step once",
        sql: #"""
            -- A funnel step: an event name, or {"event": NAME, "filters": [...]}.
            CREATE OR REPLACE FUNCTION analytics.funnel(
                project text, steps jsonb, from_day date, to_day date, window_seconds integer DEFAULT 86400,
                group_by text DEFAULT NULL, top integer DEFAULT 10
            ) RETURNS TABLE (group_value text, step integer, event text, people bigint, conversion numeric, median_seconds numeric)
            LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
            DECLARE
                zone text;
                n integer;
                k integer;
                s jsonb;
                names text[] := '{}';
                cond record;
                grp_expr text;
                grp_profile boolean := false;
                parts text[] := '{}';
                levels text[] := '{}';
                sql text;
            BEGIN
                PERFORM collector.report_check_range(project, from_day, to_day, 400);
                IF steps IS NULL OR jsonb_typeof(steps) <> 'array' THEN PERFORM collector.report_fail('steps is a JSON array of 2 to 10 steps'); END IF;
                n := jsonb_array_length(steps);
                IF n NOT BETWEEN 2 AND 10 THEN
                    PERFORM collector.report_fail(format('%s steps: a funnel has 2 to 10', n));
                END IF;
                IF window_seconds IS NULL OR window_seconds NOT BETWEEN 1 AND 180 * 86400 THEN
                    PERFORM collector.report_fail(format('window_seconds %s: the conversion window is 1 second to 180 days (15552000)', window_seconds));
                END IF;
                IF top IS NULL OR top NOT BETWEEN 1 AND 1000 THEN PERFORM collector.report_fail('top: 1 to 1000 groups'); END IF;
                zone := collector.report_zone(project);
                IF group_by IS NOT NULL THEN SELECT expression, profile INTO grp_expr, grp_profile FROM collector.report_property(project, group_by, 'text'); END IF;
                FOR k IN 1..n LOOP
                    s := steps -> (k - 1);
                    IF jsonb_typeof(s) = 'string' THEN s := jsonb_build_object('event', s); END IF;
                    IF jsonb_typeof(s) <> 'object' OR jsonb_typeof(s -> 'event') IS DISTINCT FROM 'string' THEN
                        PERFORM collector.report_fail(format('step %s: an event name or {"event": …, "filters": […]}', k));
                    END IF;
                    PERFORM collector.report_check_event(project, s ->> 'event');
                    names := names || (s ->> 'event');
                    SELECT * INTO cond FROM collector.report_conditions(project, s -> 'filters');
                    -- Step k's events: the first step's start in the range, the others up to a window after it.
                    parts := parts || format($q$
                        s%s AS (SELECT coalesce(c.canonical_user_id, e.user_id) AS u, e.time AS t%s
                                FROM %s
                                WHERE e.project = $1 AND e.event = %L AND e.user_id IS NOT NULL AND e.time >= $2 AND e.time < %s AND %s)$q$,
                        k, CASE WHEN k = 1 THEN format(', %s AS g', CASE WHEN group_by IS NULL THEN 'NULL::text' ELSE grp_expr END) ELSE '' END,
                        collector.report_from(cond.profile OR (k = 1 AND coalesce(grp_profile, false))),
                        s ->> 'event', CASE WHEN k = 1 THEN '$3' ELSE '$3 + $4' END, cond.condition);
                    IF k = 1 THEN
                        parts := array_append(parts, 'p1 AS (SELECT DISTINCT u, g FROM s1)');
                    ELSIF k = 2 THEN
                        -- Reaching step 2: a step 2 event strictly after a step 1 event, within the window of it; of
                        -- the step 1 events before it, the latest (each starts its own chain, so one time stands for
                        -- its start and its step). Only the step 1 events of people with a step 2 event are sorted.
                        parts := array_append(parts, $q$
                            r2 AS (SELECT u, g, t, m AS s, m AS prev FROM (
                                SELECT u, g, t, kind, max(t) FILTER (WHERE kind = 0) OVER (PARTITION BY u, g ORDER BY t, kind DESC ROWS UNBOUNDED PRECEDING) AS m
                                FROM (SELECT u, g, t, 0 AS kind FROM s1 WHERE u IN (SELECT u FROM s2)
                                      UNION ALL
                                      SELECT x.u, w.g, x.t, 1 FROM s2 x JOIN p1 w ON w.u = x.u) a
                                ) b WHERE kind = 1 AND m IS NOT NULL AND t - m <= $4)$q$);
                    ELSE
                        -- Reaching step k: a step k event strictly after a reach of step k-1, within the window
                        -- of that chain's start; of the reaches before it, the one with the latest start.
                        parts := parts || format($q$
                            r%1$s AS (SELECT u, g, t, m[1] AS s, m[2] AS prev FROM (
                                SELECT u, g, t, kind, max(m0) OVER (PARTITION BY u, g ORDER BY t, kind DESC ROWS UNBOUNDED PRECEDING) AS m
                                FROM (SELECT u, g, t, 0 AS kind, ARRAY[s, t] AS m0 FROM r%2$s
                                      UNION ALL
                                      SELECT x.u, w.g, x.t, 1, NULL FROM s%1$s x JOIN (SELECT DISTINCT u, g FROM r%2$s) w ON w.u = x.u) a
                                ) b WHERE kind = 1 AND m IS NOT NULL AND t - m[1] <= $4)$q$, k, k - 1);
                    END IF;
                    levels := levels || CASE WHEN k = 1 THEN 'SELECT g, 1 AS step, count(*) AS people, NULL::numeric AS median FROM p1 GROUP BY g'
                        ELSE format($q$
                        SELECT g, %1$s AS step, count(*) AS people, percentile_cont(0.5) WITHIN GROUP (ORDER BY gap)::numeric AS median
                        FROM (SELECT DISTINCT ON (u, g) u, g, extract(epoch FROM t - prev) AS gap FROM r%1$s ORDER BY u, g, t) x GROUP BY g$q$, k) END;
                END LOOP;
                sql := format($q$
                    WITH %s,
                    levels AS (%s),
                    firsts AS (SELECT g, people AS first, row_number() OVER (ORDER BY people DESC, g NULLS LAST) AS n FROM levels WHERE step = 1)
                    SELECT f.g, k.step, ($5::text[])[k.step], coalesce(l.people, 0), round(coalesce(l.people, 0)::numeric / f.first, 4), round(l.median, 3)
                    FROM firsts f CROSS JOIN generate_series(1, %s) AS k(step)
                    LEFT JOIN levels l ON l.g IS NOT DISTINCT FROM f.g AND l.step = k.step
                    WHERE f.n <= %s
                    ORDER BY f.n, k.step$q$,
                    array_to_string(parts, ', '), array_to_string(levels, ' UNION ALL '), n, top);
                RETURN QUERY EXECUTE sql USING project, from_day::timestamp AT TIME ZONE zone, (to_day + 1)::timestamp AT TIME ZONE zone,
                    make_interval(secs => window_seconds), names;
            END $fn$;

            CREATE OR REPLACE FUNCTION analytics.retention(
                project text, start_event text, return_event text, from_day date, to_day date, unit text DEFAULT 'day',
                periods integer DEFAULT 7, start_filters jsonb DEFAULT '[]', return_filters jsonb DEFAULT '[]'
            ) RETURNS TABLE (cohort date, people bigint, period integer, returned bigint, returned_within bigint)
            LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
            DECLARE
                zone text;
                len integer;
                c_cond record;
                r_cond record;
                starts text;
                returns text;
                today date;
            BEGIN
                PERFORM collector.report_check_range(project, from_day, to_day, 400);
                PERFORM collector.report_check_event(project, start_event);
                PERFORM collector.report_check_event(project, return_event);
                IF unit IS NULL OR unit NOT IN ('day', 'week') THEN PERFORM collector.report_fail(format('unit %L: day or week', unit)); END IF;
                IF periods IS NULL OR periods NOT BETWEEN 1 AND 30 THEN
                    PERFORM collector.report_fail(format('periods %s: 1 to 30 days or weeks', periods));
                END IF;
                len := CASE unit WHEN 'day' THEN 1 ELSE 7 END;
                zone := collector.report_zone(project);
                today := (now() AT TIME ZONE zone)::date;
                SELECT * INTO c_cond FROM collector.report_conditions(project, start_filters);
                SELECT * INTO r_cond FROM collector.report_conditions(project, return_filters);
                -- (person, day) pairs of the start and the return event: the daily rollup, or the events
                -- when a filter needs their properties; made distinct once, by period, in st and rt.
                starts := CASE WHEN c_cond.condition = 'true' THEN
                    'SELECT coalesce(c.canonical_user_id, d.user_id) AS u, d.day FROM collector.report_days d
                     LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                     WHERE d.project = $1 AND d.event = $2 AND d.user_id <> 0 AND d.day >= $4 AND d.day <= $5'
                    ELSE format('SELECT coalesce(c.canonical_user_id, e.user_id) AS u, (e.time AT TIME ZONE %L)::date AS day FROM %s
                     WHERE e.project = $1 AND e.event = $2 AND e.user_id IS NOT NULL AND e.time >= $4::timestamp AT TIME ZONE %L
                       AND e.time < ($5 + 1)::timestamp AT TIME ZONE %L AND %s', zone, collector.report_from(c_cond.profile), zone, zone, c_cond.condition) END;
                returns := CASE WHEN r_cond.condition = 'true' THEN
                    'SELECT coalesce(c.canonical_user_id, d.user_id) AS u, d.day FROM collector.report_days d
                     LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                     WHERE d.project = $1 AND d.event = $3 AND d.user_id <> 0 AND d.day > $4 AND d.day <= $6'
                    ELSE format('SELECT coalesce(c.canonical_user_id, e.user_id) AS u, (e.time AT TIME ZONE %L)::date AS day FROM %s
                     WHERE e.project = $1 AND e.event = $3 AND e.user_id IS NOT NULL AND e.time >= ($4 + 1)::timestamp AT TIME ZONE %L
                       AND e.time < ($6 + 1)::timestamp AT TIME ZONE %L AND %s', zone, collector.report_from(r_cond.profile), zone, zone, r_cond.condition) END;
                RETURN QUERY EXECUTE format($q$
                    WITH st AS (SELECT DISTINCT u, date_trunc(%1$L, day)::date AS cohort FROM (%2$s) x),
                    rt AS (SELECT DISTINCT u, date_trunc(%1$L, day)::date AS at FROM (%3$s) x),
                    hits AS (SELECT st.cohort, st.u, (rt.at - st.cohort) / %4$s AS k
                             FROM st JOIN rt ON rt.u = st.u AND rt.at > st.cohort AND rt.at <= st.cohort + %4$s * $7),
                    firsts AS (SELECT cohort, u, min(k) AS k FROM hits GROUP BY 1, 2),
                    sizes AS (SELECT cohort, count(*) AS people FROM st GROUP BY 1),
                    exact AS (SELECT cohort, k, count(*) AS returned FROM hits GROUP BY 1, 2),
                    firstk AS (SELECT cohort, k, count(*) AS first FROM firsts GROUP BY 1, 2)
                    SELECT z.cohort, z.people, p.k,
                           CASE WHEN z.cohort + %4$s * (p.k + 1) - 1 > $8 THEN NULL ELSE coalesce(x.returned, 0) END,
                           CASE WHEN z.cohort + %4$s * (p.k + 1) - 1 > $8 THEN NULL
                                ELSE coalesce(sum(f.first) OVER (PARTITION BY z.cohort ORDER BY p.k), 0) END::bigint
                    FROM sizes z CROSS JOIN generate_series(1, $7) AS p(k)
                    LEFT JOIN exact x ON x.cohort = z.cohort AND x.k = p.k
                    LEFT JOIN firstk f ON f.cohort = z.cohort AND f.k = p.k
                    ORDER BY 1, 3$q$, unit, starts, returns, len)
                USING project, start_event, return_event, from_day, to_day, to_day + len * (periods + 1), periods, today;
            END $fn$;

            -- Every report without JIT, the two just replaced included.
            DO $do$
            DECLARE
                f regprocedure;
            BEGIN
                FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
                         WHERE p.pronamespace = 'analytics'::regnamespace
                           AND p.proname IN ('event_trend', 'funnel', 'retention', 'distribution', 'user_events') LOOP
                    EXECUTE format('ALTER FUNCTION %s SET jit = off', f);
                END LOOP;
            END $do$;
            """#
    )

    static let periodBits = Migration(
        version: 18, name: "retention over each person's periods as bits; distributions bucketed by width_bucket",
        sql: #"""
            -- Retention: each person's start and return periods as the bits of two integers (when the
            -- cohorts and their periods span at most 63), counted by their shape, instead of joining every
            -- start with every return; one read of the rollup when the two events are the same. At 10M
            -- events a 7-day retention of 14 daily cohorts went from 2.3-2.7 s to 0.72 s.
            CREATE OR REPLACE FUNCTION analytics.retention(
                project text, start_event text, return_event text, from_day date, to_day date, unit text DEFAULT 'day',
                periods integer DEFAULT 7, start_filters jsonb DEFAULT '[]', return_filters jsonb DEFAULT '[]'
            ) RETURNS TABLE (cohort date, people bigint, period integer, returned bigint, returned_within bigint)
            LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $fn$
            DECLARE
                zone text;
                len integer;
                c_cond record;
                r_cond record;
                starts text;
                returns text;
                today date;
                base date;
                last_cohort integer;
                on_k text;
                within_k text;
                read_sql text;
            BEGIN
                PERFORM collector.report_check_range(project, from_day, to_day, 400);
                PERFORM collector.report_check_event(project, start_event);
                PERFORM collector.report_check_event(project, return_event);
                IF unit IS NULL OR unit NOT IN ('day', 'week') THEN PERFORM collector.report_fail(format('unit %L: day or week', unit)); END IF;
                IF periods IS NULL OR periods NOT BETWEEN 1 AND 30 THEN
                    PERFORM collector.report_fail(format('periods %s: 1 to 30 days or weeks', periods));
                END IF;
                len := CASE unit WHEN 'day' THEN 1 ELSE 7 END;
                zone := collector.report_zone(project);
                today := (now() AT TIME ZONE zone)::date;
                SELECT * INTO c_cond FROM collector.report_conditions(project, start_filters);
                SELECT * INTO r_cond FROM collector.report_conditions(project, return_filters);
                -- (person, day) pairs of the start and the return event: the daily rollup, or the events
                -- when a filter needs their properties.
                starts := CASE WHEN c_cond.condition = 'true' THEN
                    'SELECT coalesce(c.canonical_user_id, d.user_id) AS u, d.day FROM collector.report_days d
                     LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                     WHERE d.project = $1 AND d.event = $2 AND d.user_id <> 0 AND d.day >= $4 AND d.day <= $5'
                    ELSE format('SELECT coalesce(c.canonical_user_id, e.user_id) AS u, (e.time AT TIME ZONE %L)::date AS day FROM %s
                     WHERE e.project = $1 AND e.event = $2 AND e.user_id IS NOT NULL AND e.time >= $4::timestamp AT TIME ZONE %L
                       AND e.time < ($5 + 1)::timestamp AT TIME ZONE %L AND %s', zone, collector.report_from(c_cond.profile), zone, zone, c_cond.condition) END;
                returns := CASE WHEN r_cond.condition = 'true' THEN
                    'SELECT coalesce(c.canonical_user_id, d.user_id) AS u, d.day FROM collector.report_days d
                     LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                     WHERE d.project = $1 AND d.event = $3 AND d.user_id <> 0 AND d.day > $4 AND d.day <= $6'
                    ELSE format('SELECT coalesce(c.canonical_user_id, e.user_id) AS u, (e.time AT TIME ZONE %L)::date AS day FROM %s
                     WHERE e.project = $1 AND e.event = $3 AND e.user_id IS NOT NULL AND e.time >= ($4 + 1)::timestamp AT TIME ZONE %L
                       AND e.time < ($6 + 1)::timestamp AT TIME ZONE %L AND %s', zone, collector.report_from(r_cond.profile), zone, zone, r_cond.condition) END;
                base := date_trunc(unit, from_day)::date;
                last_cohort := (date_trunc(unit, to_day)::date - base) / len;
                IF last_cohort + periods <= 62 THEN
                    -- Each person's periods as the bits of two integers: sb for the start event, rb for the return
                    -- event (bit i: period i from the first cohort), read once when both events are the same one,
                    -- unfiltered (a return on the first day is in no cohort's periods, so every day is a return).
                    -- People with the same two integers (a shape) are counted together; w: the returns in the
                    -- `periods` periods after one of a shape's cohorts, bit k - 1 for period k.
                    read_sql := CASE WHEN start_event = return_event AND c_cond.condition = 'true' AND r_cond.condition = 'true' THEN
                        'SELECT coalesce(c.canonical_user_id, d.user_id) AS u, d.day, d.day <= $5 AS s, true AS r FROM collector.report_days d
                         LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                         WHERE d.project = $1 AND d.event = $2 AND d.user_id <> 0 AND d.day >= $4 AND d.day <= $6'
                        ELSE format('SELECT u, day, true AS s, false AS r FROM (%s) x UNION ALL SELECT u, day, false, true FROM (%s) x', starts, returns) END;
                    on_k := (SELECT string_agg(format('coalesce(sum(n) FILTER (WHERE w & %s <> 0), 0)', 1::bigint << (k - 1)), ', ' ORDER BY k) FROM generate_series(1, periods) k);
                    within_k := (SELECT string_agg(format('coalesce(sum(n) FILTER (WHERE w & %s <> 0), 0)', (1::bigint << k) - 1), ', ' ORDER BY k) FROM generate_series(1, periods) k);
                    RETURN QUERY EXECUTE format($q$
                        WITH pairs AS (SELECT u, (day - $9) / %1$s AS i, s, r FROM (%2$s) x),
                        bits AS (SELECT bit_or(1::bigint << i) FILTER (WHERE s) AS sb, bit_or(1::bigint << i) FILTER (WHERE r AND i <= $10 + $7) AS rb
                                 FROM pairs GROUP BY u),
                        shapes AS (SELECT sb, rb, count(*)::integer AS n FROM bits WHERE sb IS NOT NULL GROUP BY sb, rb),
                        cohorts AS (SELECT c, n, coalesce(rb >> (c + 1), 0) & ((1::bigint << $7) - 1) AS w
                                    FROM shapes CROSS JOIN LATERAL generate_series(0, $10) c WHERE sb & (1::bigint << c) <> 0),
                        counts AS (SELECT c, sum(n) AS people, ARRAY[%3$s] AS on_k, ARRAY[%4$s] AS within_k FROM cohorts GROUP BY c)
                        SELECT $9 + %1$s * x.c, x.people, p.k::integer,
                               CASE WHEN $9 + %1$s * x.c + %1$s * (p.k + 1) - 1 > $8 THEN NULL ELSE x.on_k[p.k] END,
                               CASE WHEN $9 + %1$s * x.c + %1$s * (p.k + 1) - 1 > $8 THEN NULL ELSE x.within_k[p.k] END
                        FROM counts x CROSS JOIN generate_series(1, $7) AS p(k)
                        ORDER BY 1, 3$q$, len, read_sql, on_k, within_k)
                    USING project, start_event, return_event, from_day, to_day, to_day + len * (periods + 1), periods, today, base, last_cohort;
                    RETURN;
                END IF;
                RETURN QUERY EXECUTE format($q$
                    WITH st AS (SELECT DISTINCT u, date_trunc(%1$L, day)::date AS cohort FROM (%2$s) x),
                    rt AS (SELECT DISTINCT u, date_trunc(%1$L, day)::date AS at FROM (%3$s) x),
                    hits AS (SELECT st.cohort, st.u, (rt.at - st.cohort) / %4$s AS k
                             FROM st JOIN rt ON rt.u = st.u AND rt.at > st.cohort AND rt.at <= st.cohort + %4$s * $7),
                    firsts AS (SELECT cohort, u, min(k) AS k FROM hits GROUP BY 1, 2),
                    sizes AS (SELECT cohort, count(*) AS people FROM st GROUP BY 1),
                    exact AS (SELECT cohort, k, count(*) AS returned FROM hits GROUP BY 1, 2),
                    firstk AS (SELECT cohort, k, count(*) AS first FROM firsts GROUP BY 1, 2)
                    SELECT z.cohort, z.people, p.k,
                           CASE WHEN z.cohort + %4$s * (p.k + 1) - 1 > $8 THEN NULL ELSE coalesce(x.returned, 0) END,
                           CASE WHEN z.cohort + %4$s * (p.k + 1) - 1 > $8 THEN NULL
                                ELSE coalesce(sum(f.first) OVER (PARTITION BY z.cohort ORDER BY p.k), 0) END::bigint
                    FROM sizes z CROSS JOIN generate_series(1, $7) AS p(k)
                    LEFT JOIN exact x ON x.cohort = z.cohort AND x.k = p.k
                    LEFT JOIN firstk f ON f.cohort = z.cohort AND f.k = p.k
                    ORDER BY 1, 3$q$, unit, starts, returns, len)
                USING project, start_event, return_event, from_day, to_day, to_day + len * (periods + 1), periods, today;
            END $fn$;

            CREATE OR REPLACE FUNCTION analytics.distribution(
                project text, event text, from_day date, to_day date, measure text DEFAULT 'events', property text DEFAULT NULL,
                buckets numeric[] DEFAULT NULL, filters jsonb DEFAULT '[]'
            ) RETURNS TABLE (bucket_from numeric, bucket_to numeric, people bigint)
            LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $fn$
            DECLARE
                zone text;
                cond record;
                val_expr text;
                per_person text;
                edges numeric[];
            BEGIN
                PERFORM collector.report_check_range(project, from_day, to_day, 400);
                PERFORM collector.report_check_event(project, event);
                IF measure IS NULL OR measure NOT IN ('events', 'sum') THEN PERFORM collector.report_fail(format('measure %L: events or sum', measure)); END IF;
                IF (measure = 'sum') <> (property IS NOT NULL) THEN
                    PERFORM collector.report_fail('property names the NUMBER property of measure sum, and only of it');
                END IF;
                IF measure = 'sum' AND buckets IS NULL THEN PERFORM collector.report_fail('measure sum needs buckets (their lower bounds, ascending)'); END IF;
                edges := coalesce(buckets, '{1,2,3,4,5,6,11,21,51,101}'::numeric[]);
                IF cardinality(edges) NOT BETWEEN 1 AND 100 OR array_position(edges, NULL) IS NOT NULL
                   OR EXISTS (SELECT 1 FROM unnest(edges) WITH ORDINALITY a(v, i) JOIN unnest(edges) WITH ORDINALITY b(v, i) ON b.i = a.i + 1 WHERE b.v <= a.v) THEN
                    PERFORM collector.report_fail('buckets: 1 to 100 lower bounds, ascending');
                END IF;
                zone := collector.report_zone(project);
                SELECT * INTO cond FROM collector.report_conditions(project, filters);
                IF property IS NOT NULL THEN val_expr := (collector.report_property(project, property, 'number')).expression; END IF;
                IF cond.condition = 'true' AND measure = 'events' THEN
                    per_person := 'SELECT sum(d.events)::numeric AS v FROM collector.report_days d
                        LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                        WHERE d.project = $1 AND d.event = $2 AND d.user_id <> 0 AND d.day >= $3 AND d.day <= $4
                        GROUP BY coalesce(c.canonical_user_id, d.user_id)';
                ELSE
                    per_person := format('SELECT %s AS v FROM %s
                        WHERE e.project = $1 AND e.event = $2 AND e.user_id IS NOT NULL AND e.time >= $3::timestamp AT TIME ZONE %L
                          AND e.time < ($4 + 1)::timestamp AT TIME ZONE %L AND %s
                        GROUP BY coalesce(c.canonical_user_id, e.user_id)',
                        CASE measure WHEN 'events' THEN 'count(*)::numeric' ELSE format('coalesce(sum(%s), 0)', val_expr) END,
                        collector.report_from(cond.profile), zone, zone, cond.condition);
                END IF;
                -- Each person's bucket found by width_bucket (0: below the first edge), not by joining every
                -- person with every bucket.
                RETURN QUERY EXECUTE format($q$
                    WITH v AS (%s),
                    h AS (SELECT width_bucket(v.v, $5) AS i, count(*) AS n FROM v WHERE v.v IS NOT NULL GROUP BY 1),
                    b AS (SELECT i, $5[i] AS lo, $5[i + 1] AS hi FROM generate_subscripts($5, 1) i
                          UNION ALL SELECT 0, NULL, $5[1])
                    SELECT b.lo, b.hi, coalesce(h.n, 0)
                    FROM b LEFT JOIN h ON h.i = b.i
                    WHERE b.i > 0 OR h.n > 0
                    ORDER BY b.i$q$, per_person)
                USING project, event, from_day, to_day, edges;
            END $fn$;
            """#
    )

    /// Distinct people a day, counted when a day closes (`collector.report_people_days`), so that
    /// daily active users read a few rows a day instead of every (event, person) of the day:
    /// 1.7 s at 10M events for 30 days by SDK (docs/BENCHMARKS.md, "Reports"). A count stays exact
    /// under merges made after it: each look compares `analytics.user_canonical` with the copy the
    /// counts were made with (`collector.report_canon`) and counts again the days of every user whose
    /// canonical user changed; a report makes the same comparison and counts those days itself, so
    /// a merge is in every report at once. A changed day is counted again a minute after it first
    /// changed, not at every look. The comparison reads every merged user (20–40 ms for 50k at 10M
    /// events); a change log kept by identity would read only the new merges.
    static let peopleDays = Migration(
        version: 19, name: "distinct people a day counted when the day closes",
        sql: #"""
            -- Per project, local day, event ('*': any event) and SDK (NULL: all of them; '': none): the
            -- distinct people (users after merges, as collector.report_canon maps them). Only closed days
            -- (before the project's today) are counted; a change to a day's report_days rows drops its
            -- counts and marks it in report_people_pending, counted again by a later look.
            CREATE TABLE collector.report_people_days (
                project text   NOT NULL,
                day     date   NOT NULL,
                event   text   NOT NULL,
                lib     text,
                people  bigint NOT NULL
            );
            CREATE INDEX report_people_days_day ON collector.report_people_days (project, day);
            CREATE TABLE collector.report_people_pending (
                project   text        NOT NULL,
                day       date        NOT NULL,
                marked_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (project, day)
            );
            -- analytics.user_canonical as the counts were made with it.
            CREATE TABLE collector.report_canon (
                project           text   NOT NULL,
                user_id           bigint NOT NULL,
                canonical_user_id bigint NOT NULL,
                PRIMARY KEY (project, user_id)
            );
            ALTER TABLE collector.report_state ADD COLUMN canon_at timestamptz;  -- the last comparison of the map
            INSERT INTO collector.report_people_pending (project, day) SELECT DISTINCT project, day FROM collector.report_days;
            INSERT INTO collector.report_canon (project, user_id, canonical_user_id)
            SELECT project, user_id, canonical_user_id FROM analytics.user_canonical;

            -- Whatever adds or removes report_days rows (a look adding events, a rebuilt day, a new time
            -- zone) drops the counts of the days it touched and marks them. An update (more events of a
            -- person already there) changes no one's presence.
            CREATE FUNCTION collector.report_days_changed() RETURNS trigger
            LANGUAGE plpgsql SET jit = off AS $fn$
            BEGIN
                WITH days AS (SELECT DISTINCT project, day FROM changed),
                dropped AS (DELETE FROM collector.report_people_days p USING days WHERE p.project = days.project AND p.day = days.day)
                INSERT INTO collector.report_people_pending (project, day) SELECT project, day FROM days ON CONFLICT DO NOTHING;
                RETURN NULL;
            END $fn$;
            CREATE TRIGGER report_days_inserted AFTER INSERT ON collector.report_days
                REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION collector.report_days_changed();
            CREATE TRIGGER report_days_deleted AFTER DELETE ON collector.report_days
                REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION collector.report_days_changed();

            -- Users whose canonical user is not what the counts were made with, in `project` (NULL: every
            -- project).
            CREATE FUNCTION collector.report_canon_changed(project text) RETURNS TABLE (project text, user_id bigint)
            LANGUAGE sql STABLE AS $$
                SELECT coalesce(c.project, k.project), coalesce(c.user_id, k.user_id)
                FROM (SELECT u.project, u.user_id, u.canonical_user_id FROM analytics.user_canonical u WHERE $1 IS NULL OR u.project = $1) c
                FULL JOIN (SELECT k.project, k.user_id, k.canonical_user_id FROM collector.report_canon k WHERE $1 IS NULL OR k.project = $1) k
                    ON k.project = c.project AND k.user_id = c.user_id
                WHERE c.canonical_user_id IS DISTINCT FROM k.canonical_user_id
            $$;

            -- Closed days (before their project's today) waiting for their people to be counted, marked at
            -- least `quiet` ago (NULL: whenever).
            CREATE FUNCTION collector.report_people_closed(quiet interval) RETURNS TABLE (project text, day date)
            LANGUAGE sql STABLE AS $$
                SELECT q.project, q.day FROM collector.report_people_pending q LEFT JOIN collector.report_settings s ON s.project = q.project
                WHERE q.day < (now() AT TIME ZONE coalesce(s.time_zone, 'UTC'))::date AND ($1 IS NULL OR q.marked_at <= now() - $1)
            $$;

            -- How many closed days wait (analytics.report_status shows it to analysts, who cannot read collector's tables).
            CREATE FUNCTION collector.report_people_waiting() RETURNS bigint
            LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
                SELECT count(*) FROM collector.report_people_closed(NULL)
            $$;

            -- The events of a project's report_days, an index probe each (a loose scan of the primary key),
            -- so that a day's rows are read by the key (project, event, day, …) rather than by a scan.
            CREATE FUNCTION collector.report_day_events(project text) RETURNS text[]
            LANGUAGE sql STABLE AS $$
                SELECT ARRAY(WITH RECURSIVE n(e) AS (
                                 SELECT min(d.event) FROM collector.report_days d WHERE d.project = $1
                                 UNION ALL
                                 SELECT (SELECT min(d.event) FROM collector.report_days d WHERE d.project = $1 AND d.event > n.e) FROM n WHERE n.e IS NOT NULL)
                             SELECT n.e FROM n WHERE n.e IS NOT NULL)
            $$;

            -- The people counts' part of a look, after collector.report_round in its transaction: marks the
            -- days of users merged (or unmerged, or erased) since the counts were made, takes the map as it
            -- is now, and counts at most `max_days` closed days marked at least `quiet` ago (so that a day
            -- still receiving late records is counted once in that time, not at every look). Gives the
            -- closed days still waiting.
            CREATE FUNCTION collector.report_people_round(max_days integer, quiet interval) RETURNS bigint
            LANGUAGE plpgsql SET jit = off AS $fn$
            DECLARE
                day_projects text[];
                day_dates date[];
                projects text[];
                users bigint[] := '{}';
                i integer;
            BEGIN
                IF current_setting('transaction_isolation') <> 'repeatable read' THEN
                    RAISE EXCEPTION 'collector.report_people_round runs in a REPEATABLE READ transaction';
                END IF;
                SELECT coalesce(array_agg(t.project), '{}'), coalesce(array_agg(t.day), '{}') INTO day_projects, day_dates
                FROM (SELECT * FROM collector.report_people_closed(quiet) c ORDER BY c.day DESC LIMIT max_days) t;
                -- The comparison reads every merged user: made before days are counted, else once in `quiet`
                -- (reports make it themselves meanwhile).
                IF cardinality(day_dates) > 0 OR EXISTS (SELECT 1 FROM collector.report_state r WHERE r.canon_at IS NULL OR r.canon_at <= now() - quiet) THEN
                    SELECT coalesce(array_agg(x.project), '{}'), coalesce(array_agg(x.user_id), '{}') INTO projects, users
                    FROM collector.report_canon_changed(NULL) x;
                    UPDATE collector.report_state SET canon_at = now();
                END IF;
                IF cardinality(users) > 0 THEN
                    -- Their days were counted under the old map: count them again (in projects with counts).
                    WITH days AS (
                        SELECT DISTINCT u.p AS project, (e.time AT TIME ZONE coalesce(s.time_zone, 'UTC'))::date AS day
                        FROM (SELECT * FROM unnest(projects, users) u(p, id)
                              WHERE EXISTS (SELECT 1 FROM collector.report_people_days d WHERE d.project = u.p)) u
                        JOIN collector.events e ON e.project = u.p AND e.user_id = u.id
                        LEFT JOIN collector.report_settings s ON s.project = u.p
                    ), dropped AS (DELETE FROM collector.report_people_days d USING days WHERE d.project = days.project AND d.day = days.day)
                    INSERT INTO collector.report_people_pending (project, day) SELECT days.project, days.day FROM days ON CONFLICT DO NOTHING;
                    DELETE FROM collector.report_canon k USING unnest(projects, users) u(p, id) WHERE k.project = u.p AND k.user_id = u.id;
                    INSERT INTO collector.report_canon (project, user_id, canonical_user_id)
                    SELECT c.project, c.user_id, c.canonical_user_id
                    FROM analytics.user_canonical c JOIN unnest(projects, users) u(p, id) ON c.project = u.p AND c.user_id = u.id;
                END IF;

                -- The days taken, counted with the map as it is now (a day the comparison marked again too).
                DELETE FROM collector.report_people_pending q USING unnest(day_projects, day_dates) t(p, d) WHERE q.project = t.p AND q.day = t.d;
                FOR i IN 1 .. cardinality(day_dates) LOOP
                    INSERT INTO collector.report_people_days (project, day, event, lib, people)
                    SELECT day_projects[i], day_dates[i], CASE WHEN grouping(d.event) = 1 THEN '*' ELSE d.event END,
                           CASE WHEN grouping(d.lib) = 1 THEN NULL ELSE d.lib END,
                           count(DISTINCT coalesce(c.canonical_user_id, d.user_id)) FILTER (WHERE d.user_id <> 0)
                    FROM collector.report_days d
                    LEFT JOIN collector.report_canon c ON c.project = d.project AND c.user_id = d.user_id
                    WHERE d.project = day_projects[i] AND d.event = ANY(collector.report_day_events(day_projects[i])) AND d.day = day_dates[i]
                    GROUP BY GROUPING SETS ((d.event, d.lib), (d.event), (d.lib), ())
                    HAVING count(*) > 0;  -- a day with no rows left (a dropped month) has no counts, not zeros
                END LOOP;
                RETURN collector.report_people_waiting();
            END $fn$;

            -- How far behind the rollups are, the people counts' closed days waiting too.
            CREATE OR REPLACE VIEW analytics.report_status AS
                SELECT s.finished_at AS rolled_up_at, s.rounds, s.events_read, (SELECT count(*) FROM collector.report_dirty) AS days_waiting,
                       collector.report_people_waiting() AS counts_waiting
                FROM collector.report_state s;
            COMMENT ON VIEW analytics.report_status IS 'The report rollups: when their last look finished, looks made, events read, days waiting to be built again, closed days whose distinct people wait to be counted.';

            -- event_trend reads the counts for people a day (by SDK or not, events without filters); what it
            -- did before, for every other report, is collector.report_trend_scan.
            ALTER FUNCTION analytics.event_trend(text, text[], date, date, text, text, text, text, jsonb, integer) SET SCHEMA collector;
            ALTER FUNCTION collector.event_trend(text, text[], date, date, text, text, text, text, jsonb, integer) RENAME TO report_trend_scan;
            CREATE FUNCTION analytics.event_trend(
                project text, events text[], from_day date, to_day date, unit text DEFAULT 'day', measure text DEFAULT 'events',
                property text DEFAULT NULL, group_by text DEFAULT NULL, filters jsonb DEFAULT '[]', top integer DEFAULT 10
            ) RETURNS TABLE (bucket timestamp, event text, group_value text, value numeric)
            LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $fn$
            DECLARE
                zone text;
                name text;
                any_event boolean := events = ARRAY['*'];
                by_lib boolean := group_by IS NOT DISTINCT FROM 'lib';
                changed bigint[];
                stale date[] := '{}';
                counted date[];
                live date[];
                names text[] := events;
                sql text;
            BEGIN
                IF measure IS DISTINCT FROM 'people' OR unit IS DISTINCT FROM 'day' OR property IS NOT NULL OR (group_by IS NOT NULL AND NOT by_lib)
                   OR coalesce(filters, '[]') <> '[]' OR top IS NULL OR top NOT BETWEEN 1 AND 1000
                   OR events IS NULL OR cardinality(events) NOT BETWEEN 1 AND 30
                   OR (any_event AND EXISTS (SELECT 1 FROM collector.catalog_notes n WHERE n.project = $1 AND n.kind = 'event' AND n.hidden)) THEN
                    RETURN QUERY SELECT * FROM collector.report_trend_scan(project, events, from_day, to_day, unit, measure, property, group_by, filters, top);
                    RETURN;
                END IF;
                PERFORM collector.report_check_range(project, from_day, to_day, 400);
                IF NOT any_event THEN
                    FOREACH name IN ARRAY events LOOP PERFORM collector.report_check_event(project, name); END LOOP;
                END IF;
                zone := collector.report_zone(project);
                -- The counted days, but those with events of users whose canonical user changed since
                -- they were counted; the other days (today, days waiting, those) from report_days, as
                -- report_trend_scan counts them.
                changed := ARRAY(SELECT c.user_id FROM collector.report_canon_changed($1) c);
                IF cardinality(changed) > 0 THEN
                    stale := ARRAY(SELECT DISTINCT (e.time AT TIME ZONE zone)::date FROM collector.events e
                                   WHERE e.project = $1 AND e.user_id = ANY(changed)
                                     AND e.time >= $3::timestamp AT TIME ZONE zone AND e.time < ($4 + 1)::timestamp AT TIME ZONE zone);
                END IF;
                counted := ARRAY(SELECT p.day FROM collector.report_people_days p
                                 WHERE p.project = $1 AND p.event = '*' AND p.lib IS NULL AND p.day >= $3 AND p.day <= $4 AND p.day <> ALL(stale));
                live := ARRAY(SELECT g::date FROM generate_series($3, $4, interval '1 day') g WHERE g::date <> ALL(counted));
                IF any_event THEN
                    names := collector.report_day_events($1);
                END IF;
                sql := format($q$
                    SELECT p.day::timestamp, p.event, nullif(p.lib, ''), p.people::numeric FROM collector.report_people_days p
                    WHERE p.project = $1 AND p.day = ANY($5) AND p.event = ANY($2) AND p.lib IS %1$s NULL
                    UNION ALL
                    SELECT d.day::timestamp, %2$s, %3$s, count(DISTINCT coalesce(c.canonical_user_id, d.user_id)) FILTER (WHERE d.user_id <> 0)::numeric
                    FROM collector.report_days d
                    LEFT JOIN analytics.user_canonical c ON c.project = d.project AND c.user_id = d.user_id
                    WHERE d.project = $1 AND d.event = ANY($7) AND d.day = ANY($6)
                    GROUP BY 1, 2, 3$q$,
                    CASE WHEN by_lib THEN 'NOT' ELSE '' END, CASE WHEN any_event THEN '''*''::text' ELSE 'd.event' END,
                    CASE WHEN by_lib THEN 'nullif(d.lib, '''')' ELSE 'NULL::text' END);
                IF NOT by_lib THEN
                    RETURN QUERY EXECUTE sql || ' ORDER BY 1, 2' USING project, events, from_day, to_day, counted, live, names;
                ELSE
                    -- The `top` SDKs with the most people over the whole range, ranked as report_trend_scan ranks groups.
                    RETURN QUERY EXECUTE format($q$
                        WITH t(bucket, event, g, v) AS (%s),
                        ranked AS (SELECT g, row_number() OVER (ORDER BY sum(v) DESC, g NULLS LAST) AS n FROM t GROUP BY g)
                        SELECT t.bucket, t.event, t.g, t.v FROM t JOIN ranked r ON r.g IS NOT DISTINCT FROM t.g
                        WHERE r.n <= %s ORDER BY t.bucket, t.event, r.n$q$, sql, top) USING project, events, from_day, to_day, counted, live, names;
                END IF;
            END $fn$;
            """#
    )
}
