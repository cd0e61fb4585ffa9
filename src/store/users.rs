//! The console's people and their sessions. Passwords arrive here already
//! hashed (argon2id PHC strings) and session tokens as their SHA-256: the
//! store never sees a secret a person typed or a cookie carries.

use super::{Store, StoreResult, conflict_or, with_pool, with_writer};
use crate::domain::{OrgId, Role, UserId};

/// A person as listed and signed in.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UserRow {
    /// Person id.
    pub id: UserId,
    /// Their workspace.
    pub org_id: OrgId,
    /// Sign-in address, lowercase.
    pub email: String,
    /// What they may do.
    pub role: Role,
    /// When they were added, Unix ms.
    pub created_at: i64,
}

/// A person with their password hash, for signing in.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UserCredentials {
    /// Person id.
    pub id: UserId,
    /// Their workspace.
    pub org_id: OrgId,
    /// argon2id PHC string.
    pub password_hash: String,
}

/// Fields of a new person.
#[derive(Debug, Clone)]
pub struct NewUser<'a> {
    /// Person id.
    pub id: UserId,
    /// Their workspace.
    pub org_id: OrgId,
    /// Sign-in address; stored lowercase.
    pub email: &'a str,
    /// argon2id PHC string.
    pub password_hash: &'a str,
    /// What they may do.
    pub role: Role,
    /// Creation time, Unix ms.
    pub now_ms: i64,
}

/// A live session with the person it belongs to.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SessionRow {
    /// The person.
    pub user_id: UserId,
    /// Their workspace.
    pub org_id: OrgId,
    /// Their sign-in address.
    pub email: String,
    /// Their workspace's name.
    pub workspace: String,
    /// Their role now (a change applies to open sessions at once).
    pub role: Role,
    /// The session's CSRF token.
    pub csrf_token: String,
    /// When the session ends, Unix ms.
    pub expires_at: i64,
}

/// Fields of a new session.
#[derive(Debug, Clone)]
pub struct NewSession<'a> {
    /// SHA-256 (hex) of the cookie's token.
    pub token_hash: &'a str,
    /// The person.
    pub user_id: UserId,
    /// The session's CSRF token.
    pub csrf_token: &'a str,
    /// Creation time, Unix ms.
    pub now_ms: i64,
    /// End time, Unix ms.
    pub expires_at: i64,
}

const USER_COLUMNS: &str = "id, org_id, email, role, created_at";

impl Store {
    /// Adds a person; a taken email is a [`super::StoreError::Conflict`].
    pub async fn insert_user(&self, user: &NewUser<'_>) -> StoreResult<()> {
        let email = user.email.to_lowercase();
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO users (id, org_id, email, password_hash, role, created_at, password_changed_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $6)",
            )
            .bind(user.id)
            .bind(user.org_id)
            .bind(&email)
            .bind(user.password_hash)
            .bind(user.role)
            .bind(user.now_ms)
            .execute(pool)
            .await
            .map_err(|e| conflict_or(e, &format!("{email} already has a sign-in")))?;
        });
        Ok(())
    }

    /// The person signing in as `email` (any case), with their hash.
    pub async fn user_credentials(&self, email: &str) -> StoreResult<Option<UserCredentials>> {
        let email = email.to_lowercase();
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, UserCredentials>(
                "SELECT id, org_id, password_hash FROM users WHERE email = $1",
            )
            .bind(&email)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// A person's password hash, by id.
    pub async fn user_password_hash(&self, id: UserId) -> StoreResult<Option<String>> {
        let row: Option<(String,)> = with_pool!(self, pool => {
            sqlx::query_as("SELECT password_hash FROM users WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(|r| r.0))
    }

    /// One person of a workspace.
    pub async fn user(&self, org_id: OrgId, id: UserId) -> StoreResult<Option<UserRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, UserRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {USER_COLUMNS} FROM users WHERE org_id = $1 AND id = $2"
            )))
            .bind(org_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// Every person of a workspace, oldest first.
    pub async fn users(&self, org_id: OrgId) -> StoreResult<Vec<UserRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, UserRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {USER_COLUMNS} FROM users WHERE org_id = $1 ORDER BY created_at, id"
            )))
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// How many owners a workspace has.
    pub async fn owner_count(&self, org_id: OrgId) -> StoreResult<i64> {
        let (n,): (i64,) = with_pool!(self, pool => {
            sqlx::query_as("SELECT COUNT(*) FROM users WHERE org_id = $1 AND role = 'owner'")
                .bind(org_id)
                .fetch_one(pool)
                .await?
        });
        Ok(n)
    }

    /// Changes a person's role; false when no such person is in the workspace.
    /// The workspace keeps at least one owner: demoting the last one changes
    /// nothing and answers a [`super::StoreError::Conflict`].
    pub async fn set_user_role(&self, org_id: OrgId, id: UserId, role: Role) -> StoreResult<bool> {
        let changed = with_writer!(self, pool => {
            sqlx::query(
                "UPDATE users SET role = $1 WHERE org_id = $2 AND id = $3
                   AND ($1 = 'owner' OR role <> 'owner'
                        OR (SELECT COUNT(*) FROM users o WHERE o.org_id = $2 AND o.role = 'owner') > 1)",
            )
            .bind(role)
            .bind(org_id)
            .bind(id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        if changed == 0 && self.user(org_id, id).await?.is_some() {
            return Err(super::StoreError::Conflict(
                "a workspace keeps at least one owner".to_string(),
            ));
        }
        Ok(changed > 0)
    }

    /// Removes a person and ends their sessions; false when no such person is
    /// in the workspace. The last owner cannot be removed (a conflict).
    pub async fn delete_user(&self, org_id: OrgId, id: UserId) -> StoreResult<bool> {
        let deleted = with_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query("DELETE FROM console_sessions WHERE user_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            let n = sqlx::query(
                "DELETE FROM users WHERE org_id = $1 AND id = $2
                   AND (role <> 'owner'
                        OR (SELECT COUNT(*) FROM users o WHERE o.org_id = $1 AND o.role = 'owner') > 1)",
            )
            .bind(org_id)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            tx.commit().await?;
            n
        });
        if deleted == 0 && self.user(org_id, id).await?.is_some() {
            return Err(super::StoreError::Conflict(
                "a workspace keeps at least one owner".to_string(),
            ));
        }
        Ok(deleted > 0)
    }

    /// Replaces a person's password hash and ends every session of theirs
    /// but `keep` (the one that made the change, if any).
    pub async fn set_user_password(
        &self,
        id: UserId,
        password_hash: &str,
        keep: Option<&str>,
        now_ms: i64,
    ) -> StoreResult<bool> {
        let changed = with_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            let n = sqlx::query(
                "UPDATE users SET password_hash = $1, password_changed_at = $2 WHERE id = $3",
            )
            .bind(password_hash)
            .bind(now_ms)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            sqlx::query(
                "UPDATE console_sessions SET revoked_at = $1
                 WHERE user_id = $2 AND revoked_at IS NULL AND token_hash <> $3",
            )
            .bind(now_ms)
            .bind(id)
            .bind(keep.unwrap_or(""))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            n
        });
        Ok(changed > 0)
    }

    /// Opens a session.
    pub async fn insert_console_session(&self, session: &NewSession<'_>) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO console_sessions (token_hash, user_id, csrf_token, created_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(session.token_hash)
            .bind(session.user_id)
            .bind(session.csrf_token)
            .bind(session.now_ms)
            .bind(session.expires_at)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// The live session whose token hashes to `token_hash`: not revoked, not
    /// expired at `now_ms`, of a person who still exists.
    pub async fn console_session(
        &self,
        token_hash: &str,
        now_ms: i64,
    ) -> StoreResult<Option<SessionRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, SessionRow>(
                "SELECT u.id AS user_id, u.org_id, u.email, o.name AS workspace, u.role, s.csrf_token, s.expires_at
                 FROM console_sessions s JOIN users u ON u.id = s.user_id JOIN orgs o ON o.id = u.org_id
                 WHERE s.token_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > $2",
            )
            .bind(token_hash)
            .bind(now_ms)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// Ends a session (sign-out).
    pub async fn revoke_console_session(&self, token_hash: &str, now_ms: i64) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "UPDATE console_sessions SET revoked_at = $1 WHERE token_hash = $2 AND revoked_at IS NULL",
            )
            .bind(now_ms)
            .bind(token_hash)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Deletes sessions that ended before `before_ms`; returns how many.
    pub async fn prune_console_sessions(&self, before_ms: i64) -> StoreResult<u64> {
        let n = with_writer!(self, pool => {
            sqlx::query(
                "DELETE FROM console_sessions WHERE expires_at < $1 OR revoked_at < $1",
            )
            .bind(before_ms)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }
}
