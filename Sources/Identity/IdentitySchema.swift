import DatongPostgres

/// identity-service owns the `identity` schema: users and the identities that point at them.
enum IdentitySchema {
    static let name = "identity"

    static let migrations: [Migration] = [
        Migration(version: 1, name: "users and identities", sql: """
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
    ]
}
