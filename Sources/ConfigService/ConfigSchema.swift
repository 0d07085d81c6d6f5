import DatongPostgres

/// config-service owns the `config` schema: projects and immutable document versions.
enum ConfigSchema {
    static let name = "config"

    static let migrations: [Migration] = [
        Migration(
            version: 1, name: "projects and versioned documents",
            sql: """
                CREATE TABLE config.projects (
                    name       text        PRIMARY KEY,
                    created_at timestamptz NOT NULL DEFAULT now()
                );
                INSERT INTO config.projects (name) VALUES ('default');
                CREATE TABLE config.documents (
                    project    text        NOT NULL REFERENCES config.projects (name),
                    kind       text        NOT NULL,
                    platform   text        NOT NULL DEFAULT '',
                    app_id     text        NOT NULL DEFAULT '',
                    version    integer     NOT NULL,
                    body       jsonb       NOT NULL,
                    etag       text        NOT NULL,
                    note       text,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (project, kind, platform, app_id, version)
                );
                """),
        Migration(
            version: 2, name: "app-version targeting",
            sql: """
                -- Inclusive bounds on the app version a document version is for (NULL: unbounded), as
                -- integer arrays so that 2.10.0 sorts after 2.9.1.
                ALTER TABLE config.documents ADD COLUMN min_app_version integer[], ADD COLUMN max_app_version integer[];
                """),
        Migration(
            version: 3, name: "admin tokens and the audit trail",
            sql: """
                -- Admin tokens made through the API, kept only as the hex SHA-256 of the token.
                CREATE TABLE config.admin_tokens (
                    name       text        PRIMARY KEY,
                    sha256     text        NOT NULL UNIQUE,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    created_by text        NOT NULL
                );
                -- Who changed what, when: written in the transaction that makes the change.
                CREATE TABLE config.audit (
                    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    at       timestamptz NOT NULL DEFAULT now(),
                    actor    text        NOT NULL,
                    action   text        NOT NULL,
                    project  text,
                    kind     text,
                    platform text,
                    app_id   text,
                    version  integer,
                    detail   text
                );
                CREATE INDEX audit_project_at ON config.audit (project, at);
                """),
        Migration(
            version: 4, name: "project ingestion tokens",
            sql: """
                -- When set, uploads to the project must carry the token whose hex SHA-256 this is.
                ALTER TABLE config.projects ADD COLUMN token_sha256 text;
                """),
        Migration(
            version: 5, name: "encryption key pairs and transport encryption",
            sql: """
                -- The key pairs SDKs encrypt uploads for. Private keys only ever sealed (AES-256-GCM under
                -- the master key from the environment); a pkv is never reused within a project, and a
                -- key is never deleted, only retired by an admin.
                CREATE TABLE config.encryption_keys (
                    project        text        NOT NULL REFERENCES config.projects (name),
                    pkv            integer     NOT NULL CHECK (pkv > 0),
                    type           text        NOT NULL CHECK (type IN ('rsa', 'ec')),
                    public_key     text        NOT NULL,
                    sealed_private bytea       NOT NULL,
                    created_at     timestamptz NOT NULL DEFAULT now(),
                    created_by     text        NOT NULL,
                    retired_at     timestamptz,
                    retired_by     text,
                    PRIMARY KEY (project, pkv)
                );
                ALTER TABLE config.projects ADD COLUMN transport_encryption boolean NOT NULL DEFAULT false;
                """),
        Migration(
            version: 6, name: "documents kept as the text that was checked",
            sql: """
                -- A document is served as the canonical text config-service checked and hashed into
                -- its ETag, byte for byte. As jsonb it came back with spaces after every ':' and ','
                -- (a 996,902-byte tracking table was served as 1,116,902 bytes, over the limit) and
                -- with numbers reformatted (1e300 as 301 digits). Versions stored before keep
                -- jsonb's text.
                ALTER TABLE config.documents ALTER COLUMN body TYPE text USING body::text;
                """),
        Migration(
            version: 7, name: "erasure jobs and suppressed ids",
            sql: """
                -- A user's erasure (Erasures.swift): carried out step by step by any replica holding
                -- its lease; `subject` (the users and ids) is emptied when it is done.
                CREATE TABLE config.erasures (
                    erasure_id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    project          text        NOT NULL REFERENCES config.projects (name),
                    requested        jsonb       NOT NULL,
                    actor            text        NOT NULL,
                    suppress         boolean     NOT NULL,
                    subject          jsonb       NOT NULL,
                    user_ids         bigint[]    NOT NULL,
                    identity_count   integer     NOT NULL,
                    state            text        NOT NULL CHECK (state IN ('identity', 'collector', 'done')),
                    not_before       timestamptz NOT NULL,
                    lease_until      timestamptz,
                    identity_counts  jsonb,
                    collector_counts jsonb,
                    last_error       text,
                    created_at       timestamptz NOT NULL DEFAULT now(),
                    finished_at      timestamptz
                );
                CREATE INDEX erasures_project ON config.erasures (project, erasure_id);
                CREATE INDEX erasures_open ON config.erasures (not_before) WHERE state <> 'done';
                -- Ids whose records the gateways drop (an erased user's), until an operator lifts them.
                CREATE TABLE config.suppressions (
                    project    text        NOT NULL REFERENCES config.projects (name),
                    key        text        NOT NULL,
                    value      text        NOT NULL,
                    erasure_id bigint,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    created_by text        NOT NULL,
                    PRIMARY KEY (project, key, value)
                );
                -- Changes with every suppression added or lifted: the gateways revalidate the list
                -- with an ETag made from it and the token, so an unchanged list costs a 304.
                ALTER TABLE config.projects ADD COLUMN suppression_version bigint NOT NULL DEFAULT 0;
                """),
        Migration(
            version: 8, name: "enrichment settings per project",
            sql: """
                -- What the gateways add to the project's records and how they store the client's
                -- address (EnrichmentPolicy as JSON); NULL for the defaults, Sensors' own.
                ALTER TABLE config.projects ADD COLUMN enrichment text;
                """),
    ]
}
