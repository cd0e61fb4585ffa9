//! Workspace-wide figures over ratings: counts by status with the overall
//! and per-agent averages, and the score distribution of each column.

use super::exports::each_rating;
use super::query::RatingFilterQuery;
use super::reads::ColumnView;
use crate::http::MessageBody;
use crate::http::auth::Caller;
use crate::http::error::ApiResult;
use crate::http::extract::ApiQuery;
use crate::store::Store;
use crate::store::{RatingFilter, decode_json};
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

/// One agent's averages.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentAverage {
    /// Agent id.
    pub agent_id: String,
    /// Agent name.
    pub agent_name: String,
    /// Its done ratings.
    pub rated: i64,
    /// Their mean overall.
    pub average_overall: Option<f64>,
}

/// Counts by status and averages across the workspace.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RatingStats {
    /// Every rating.
    pub total: i64,
    /// Waiting to be scored.
    pub pending: i64,
    /// Scored.
    pub done: i64,
    /// Given up (see `error`; regenerate or reload to retry).
    pub failed: i64,
    /// Mean overall of the done ratings.
    pub average_overall: Option<f64>,
    /// Per agent, by agent id.
    pub agents: Vec<AgentAverage>,
}

/// How many scores fell on one value.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Bucket {
    /// The score, 0–10 (decimal scores are rounded).
    pub score: u8,
    /// Ratings with it.
    pub count: i64,
}

/// The distribution of one column's (or the overall) scores.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Distribution {
    /// Column name (`overall` for the overall rating).
    pub name: String,
    /// Scores counted.
    pub count: i64,
    /// Their mean.
    pub average: Option<f64>,
    /// Eleven buckets, scores 0 to 10.
    pub buckets: Vec<Bucket>,
}

impl Distribution {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            count: 0,
            average: None,
            buckets: (0..=10).map(|score| Bucket { score, count: 0 }).collect(),
        }
    }

    fn add(&mut self, score: f64) {
        let bucket = score.round().clamp(0.0, 10.0) as usize;
        self.buckets[bucket].count += 1;
        let sum = self.average.unwrap_or(0.0) * self.count as f64 + score;
        self.count += 1;
        self.average = Some(sum / self.count as f64);
    }

    fn rounded(mut self) -> Self {
        self.average = self.average.map(round2);
        self
    }
}

/// Score distributions of the done ratings.
#[derive(Debug, Serialize, ToSchema)]
pub struct RatingAnalytics {
    /// Done ratings counted.
    pub total: i64,
    /// The overall rating's distribution.
    pub overall: Distribution,
    /// One per column name, in order of first appearance.
    pub columns: Vec<Distribution>,
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Counts by status, the average overall and each agent's average.
#[utoipa::path(get, path = "/api/ratings/stats", tag = "ratings",
    responses((status = 200, body = RatingStats)))]
pub(super) async fn rating_stats(
    State(store): State<Store>,
    caller: Caller,
) -> ApiResult<Json<RatingStats>> {
    let (counts, agents) = store.rating_stats(caller.org_id).await?;
    Ok(Json(RatingStats {
        total: counts.total,
        pending: counts.pending,
        done: counts.done,
        failed: counts.failed,
        average_overall: counts.average_overall.map(round2),
        agents: agents
            .into_iter()
            .map(|a| AgentAverage {
                agent_id: a.agent_id.to_string(),
                agent_name: a.agent_name,
                rated: a.rated,
                average_overall: a.average_overall.map(round2),
            })
            .collect(),
    }))
}

/// The distribution of each column's scores (11 buckets, 0–10) and of the
/// overall, over done ratings (filters `agentId`, `from`, `to` as in the list).
#[utoipa::path(get, path = "/api/ratings/analytics", tag = "ratings",
    params(RatingFilterQuery),
    responses((status = 200, body = RatingAnalytics), (status = 400, body = MessageBody)))]
pub(super) async fn rating_analytics(
    State(store): State<Store>,
    caller: Caller,
    ApiQuery(query): ApiQuery<RatingFilterQuery>,
) -> ApiResult<Json<RatingAnalytics>> {
    let filter = RatingFilter {
        status: "done".into(),
        ..query.into_filter("done")?
    };
    let mut overall = Distribution::new("overall");
    let mut columns: Vec<Distribution> = Vec::new();
    let mut total = 0;
    each_rating(&store, caller.org_id, &filter, |rows| {
        for row in rows {
            total += 1;
            if let Some(o) = row.overall {
                overall.add(o);
            }
            let scored: Vec<ColumnView> =
                decode_json("ratings", "columns", row.call_id, &row.columns)?;
            for column in scored {
                let at = match columns.iter().position(|d| d.name == column.name) {
                    Some(at) => at,
                    None => {
                        columns.push(Distribution::new(&column.name));
                        columns.len() - 1
                    }
                };
                columns[at].add(column.score);
            }
        }
        Ok(())
    })
    .await?;
    Ok(Json(RatingAnalytics {
        total,
        overall: overall.rounded(),
        columns: columns.into_iter().map(Distribution::rounded).collect(),
    }))
}
