-- Issue 22, the web console: the people of a workspace and their sessions.
-- A person signs in with an email (unique across workspaces, stored
-- lowercase) and a password kept only as an argon2id PHC string.
CREATE TABLE users (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    email TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    created_at BIGINT NOT NULL,
    password_changed_at BIGINT NOT NULL
);
CREATE INDEX users_org ON users (org_id, created_at);

-- Server-side sessions: the cookie carries a random token, the table only
-- its SHA-256, so a read of the database opens no session. A session ends at
-- `expires_at`, on sign-out (`revoked_at`), or when its person is removed.
CREATE TABLE console_sessions (
    token_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    csrf_token TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX console_sessions_user ON console_sessions (user_id);
