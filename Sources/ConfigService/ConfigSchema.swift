import DatongPostgres

/// config-service owns the `config` schema: projects and immutable document versions.
enum ConfigSchema {
    static let name = "config"

    static let migrations: [Migration] = [
        Migration(version: 1, name: "projects and versioned documents", sql: """
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
        Migration(version: 2, name: "app-version targeting", sql: """
            -- Inclusive bounds on the app version a document version is for (NULL: unbounded), as
            -- integer arrays so that 2.10.0 sorts after 2.9.1.
            ALTER TABLE config.documents ADD COLUMN min_app_version integer[], ADD COLUMN max_app_version integer[];
            """),
    ]
}
