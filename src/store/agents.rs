//! Agents; the configurable part is one JSON column so new fields need no migration.
//!
//! Every write that changes an existing agent marks the agents change marker
//! once committed and, on Postgres, sends the agent's id on
//! [`AGENTS_CHANNEL`] in the same statement, for
//! [`crate::http::agent_cache::AgentCache`] on every node.

use super::{Db, Store, StoreResult, notifying, with_pool, with_writer};
use crate::domain::agent::{AgentSpec, AgentStatus};
use crate::domain::{AgentId, OrgId};
use crate::store::nodes::AGENTS_CHANNEL;

/// An agent as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AgentRow {
    /// Agent id.
    pub id: AgentId,
    /// Owning workspace.
    pub org_id: OrgId,
    /// active, inactive or deleted.
    pub status: String,
    /// JSON of [`AgentSpec`].
    pub spec: String,
    /// Idle past the inactivity window; welcome audio not kept warm.
    pub dormant: bool,
    /// Last call or activation, Unix ms.
    pub last_active_at: i64,
    /// Creation time, Unix ms.
    pub created_at: i64,
    /// Last change, Unix ms.
    pub updated_at: i64,
}

impl AgentRow {
    /// The parsed spec; [`super::StoreError::CorruptColumn`] (logged) when it
    /// no longer parses.
    pub fn spec(&self) -> StoreResult<AgentSpec> {
        super::decode_json("agents", "spec", self.id, &self.spec)
    }

    /// The parsed status.
    pub fn status(&self) -> AgentStatus {
        AgentStatus::from_stored(&self.status)
    }
}

impl Store {
    /// Stores a new active agent.
    pub async fn insert_agent(
        &self,
        id: AgentId,
        org_id: OrgId,
        spec: &AgentSpec,
        now_ms: i64,
    ) -> StoreResult<AgentRow> {
        let json = serde_json::to_string(spec)?;
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO agents (id, org_id, name, status, spec, dormant, last_active_at, created_at, updated_at)
                 VALUES ($1, $2, $3, 'active', $4, FALSE, $5, $5, $5)",
            )
            .bind(id)
            .bind(org_id)
            .bind(&spec.name)
            .bind(&json)
            .bind(now_ms)
            .execute(pool)
            .await?;
        });
        Ok(AgentRow {
            id,
            org_id,
            status: "active".into(),
            spec: json,
            dormant: false,
            last_active_at: now_ms,
            created_at: now_ms,
            updated_at: now_ms,
        })
    }

    /// One agent of a workspace, deleted ones included.
    pub async fn agent(&self, org_id: OrgId, id: AgentId) -> StoreResult<Option<AgentRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, AgentRow>(
                "SELECT id, org_id, status, spec, dormant, last_active_at, created_at, updated_at
                 FROM agents WHERE id = $1 AND org_id = $2",
            )
            .bind(id)
            .bind(org_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// A workspace's agents that are not deleted, newest first.
    pub async fn agents(&self, org_id: OrgId) -> StoreResult<Vec<AgentRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, AgentRow>(
                "SELECT id, org_id, status, spec, dormant, last_active_at, created_at, updated_at
                 FROM agents WHERE org_id = $1 AND status <> 'deleted'
                 ORDER BY created_at DESC, id DESC",
            )
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// A workspace's soft-deleted agents (the ones restore can bring back), last changed first.
    pub async fn deleted_agents(&self, org_id: OrgId) -> StoreResult<Vec<AgentRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, AgentRow>(
                "SELECT id, org_id, status, spec, dormant, last_active_at, created_at, updated_at
                 FROM agents WHERE org_id = $1 AND status = 'deleted'
                 ORDER BY updated_at DESC, id DESC",
            )
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Replaces an agent's spec.
    pub async fn update_agent_spec(
        &self,
        org_id: OrgId,
        id: AgentId,
        spec: &AgentSpec,
        now_ms: i64,
    ) -> StoreResult<bool> {
        const UPDATE: &str = "UPDATE agents SET spec = $1, name = $2, updated_at = $3
             WHERE id = $4 AND org_id = $5 AND status <> 'deleted'";
        let json = serde_json::to_string(spec)?;
        let done = match &self.write_db {
            Db::Sqlite(pool) => {
                let query = sqlx::query(UPDATE)
                    .bind(&json)
                    .bind(&spec.name)
                    .bind(now_ms)
                    .bind(id)
                    .bind(org_id);
                query.execute(pool).await?.rows_affected()
            }
            Db::Postgres(pool) => {
                let sql = notifying(UPDATE, "id", 6);
                let query = sqlx::query(sql)
                    .bind(&json)
                    .bind(&spec.name)
                    .bind(now_ms)
                    .bind(id)
                    .bind(org_id)
                    .bind(AGENTS_CHANNEL);
                query.fetch_all(pool).await?.len() as u64
            }
        };
        if done > 0 {
            self.mark_agents_changed();
        }
        Ok(done > 0)
    }

    /// Moves an agent to `status`; `dormant` is cleared when `wake` is set.
    pub async fn set_agent_status(
        &self,
        org_id: OrgId,
        id: AgentId,
        status: AgentStatus,
        wake: bool,
        now_ms: i64,
    ) -> StoreResult<bool> {
        const UPDATE: &str = "UPDATE agents SET status = $1, updated_at = $2,
               dormant = CASE WHEN $3 THEN FALSE ELSE dormant END,
               last_active_at = CASE WHEN $3 THEN $2 ELSE last_active_at END
             WHERE id = $4 AND org_id = $5";
        let done = match &self.write_db {
            Db::Sqlite(pool) => {
                let query = sqlx::query(UPDATE)
                    .bind(status.as_str())
                    .bind(now_ms)
                    .bind(wake)
                    .bind(id)
                    .bind(org_id);
                query.execute(pool).await?.rows_affected()
            }
            Db::Postgres(pool) => {
                let sql = notifying(UPDATE, "id", 6);
                let query = sqlx::query(sql)
                    .bind(status.as_str())
                    .bind(now_ms)
                    .bind(wake)
                    .bind(id)
                    .bind(org_id)
                    .bind(AGENTS_CHANNEL);
                query.fetch_all(pool).await?.len() as u64
            }
        };
        if done > 0 {
            self.mark_agents_changed();
        }
        Ok(done > 0)
    }

    /// Marks agents idle since before `cutoff_ms` as dormant; returns how many changed.
    pub async fn mark_dormant_agents(&self, cutoff_ms: i64) -> StoreResult<u64> {
        const UPDATE: &str = "UPDATE agents SET dormant = TRUE
             WHERE dormant = FALSE AND status = 'active' AND last_active_at < $1";
        let done = match &self.write_db {
            Db::Sqlite(pool) => {
                let query = sqlx::query(UPDATE).bind(cutoff_ms);
                query.execute(pool).await?.rows_affected()
            }
            Db::Postgres(pool) => {
                let sql = notifying(UPDATE, "id", 2);
                let query = sqlx::query(sql).bind(cutoff_ms).bind(AGENTS_CHANNEL);
                query.fetch_all(pool).await?.len() as u64
            }
        };
        if done > 0 {
            self.mark_agents_changed();
        }
        Ok(done)
    }
}
