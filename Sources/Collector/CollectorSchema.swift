import DatongPostgres

/// The collector owns the `collector` schema (events, profile and item records, rejected records)
/// and the analyst-facing views over them in `analytics`.
enum CollectorSchema {
    static let name = "collector"

    static let migrations: [Migration] = [
        Migration(version: 1, name: "events, profile records, rejected records, analytics views", sql: """
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
    ]
}
