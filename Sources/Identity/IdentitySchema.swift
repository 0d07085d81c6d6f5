import DatongPostgres

/// identity-service owns the `identity` schema: users, the identities that point at them, the merges
/// between users (undoable), the history of unbinds, conflicts and refusals, and the invalidation
/// log that keeps every replica's cache fresh. It publishes one view for analysts,
/// `analytics.user_canonical`, which `analytics.events` joins to show every event's current user.
enum IdentitySchema {
    static let name = "identity"

    static let migrations: [Migration] = [
        Migration(
            version: 1, name: "users and identities",
            sql: """
                CREATE TABLE identity.users (
                    project    text        NOT NULL,
                    user_id    bigint      GENERATED ALWAYS AS IDENTITY,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (project, user_id)
                );
                CREATE TABLE identity.identities (
                    project    text        NOT NULL,
                    key        text        NOT NULL,
                    value      text        NOT NULL,
                    user_id    bigint      NOT NULL,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (project, key, value)
                );
                CREATE INDEX identities_user ON identity.identities (project, user_id);
                """),
        Migration(
            version: 2, name: "merges with undo, history, cache invalidations, canonical users",
            sql: """
                -- A merged user owns no identities; merged_into names the user that took them.
                ALTER TABLE identity.users ADD COLUMN merged_into bigint;

                CREATE TABLE identity.merges (
                    project    text        NOT NULL,
                    merge_id   bigint      GENERATED ALWAYS AS IDENTITY,
                    from_user  bigint      NOT NULL,
                    into_user  bigint      NOT NULL,
                    -- The identities the merge moved, so an undo moves exactly these back.
                    keys       text[]      NOT NULL,
                    vals       text[]      NOT NULL,
                    reason     text        NOT NULL,
                    actor      text        NOT NULL,
                    -- The record (or API call) that caused the merge.
                    cause      jsonb       NOT NULL,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    undone_at  timestamptz,
                    undone_by  text,
                    PRIMARY KEY (project, merge_id)
                );
                CREATE INDEX merges_into ON identity.merges (project, into_user);
                CREATE INDEX merges_from ON identity.merges (project, from_user);

                -- Unbinds, links through the API, conflicts (a merge refused because both users hold a
                -- different login id) and refused binds or unbinds.
                CREATE TABLE identity.history (
                    project    text        NOT NULL,
                    entry_id   bigint      GENERATED ALWAYS AS IDENTITY,
                    kind       text        NOT NULL CHECK (kind IN ('link', 'unbind', 'conflict', 'refused')),
                    user_id    bigint,
                    other_user bigint,
                    key        text,
                    value      text,
                    reason     text        NOT NULL,
                    actor      text        NOT NULL,
                    cause      jsonb       NOT NULL,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (project, entry_id)
                );
                CREATE INDEX history_user ON identity.history (project, user_id);
                CREATE INDEX history_other ON identity.history (project, other_user);

                -- Identities whose owner changed or that were detached, by the transaction that did
                -- it: every replica reads the entries of transactions that finished since its last look
                -- and forgets those identities from its cache.
                CREATE TABLE identity.invalidations (
                    xid        xid8        NOT NULL DEFAULT pg_current_xact_id(),
                    project    text        NOT NULL,
                    key        text        NOT NULL,
                    value      text        NOT NULL,
                    created_at timestamptz NOT NULL DEFAULT now()
                );
                CREATE INDEX invalidations_xid ON identity.invalidations (xid);

                -- Every merged user and the user its events belong to now (merges followed to the end).
                CREATE TABLE identity.user_map (
                    project           text   NOT NULL,
                    user_id           bigint NOT NULL,
                    canonical_user_id bigint NOT NULL,
                    PRIMARY KEY (project, user_id)
                );
                CREATE INDEX user_map_canonical ON identity.user_map (project, canonical_user_id);

                -- The view analytics.events joins. The collector may have made a placeholder with these
                -- columns first; replacing it keeps the views that depend on it.
                CREATE SCHEMA IF NOT EXISTS analytics;
                CREATE OR REPLACE VIEW analytics.user_canonical AS
                    SELECT project, user_id, canonical_user_id FROM identity.user_map;
                COMMENT ON VIEW analytics.user_canonical IS 'Users merged into another user, and the user their events belong to now.';
                """),
    ]
}
