//! `/api/wallet`, `/api/balances`, `/api/recordings`.

use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::ApiQuery;
use crate::access::rate_limit::RateLimiter;
use crate::domain::clock::SharedClock;
use crate::domain::clock::{iso, ist_month_key};
use crate::domain::page::{ListEnvelope, PageRequest};
use crate::http::state::AppState;
use crate::store::Store;
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The account routes.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_wallet))
        .routes(routes!(list_wallet_transactions))
        .routes(routes!(get_balances))
        .routes(routes!(list_recordings))
}

/// The wallet balance.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WalletView {
    /// Balance in paise.
    pub balance_paise: i64,
    /// Always INR.
    pub currency: &'static str,
}

/// Read the wallet balance.
#[utoipa::path(get, path = "/api/wallet", tag = "wallet", responses((status = 200, body = WalletView)))]
async fn get_wallet(State(store): State<Store>, caller: Caller) -> ApiResult<Json<WalletView>> {
    let org = store
        .org(caller.org_id)
        .await?
        .ok_or_else(|| ApiError::NotFound("Workspace not found".into()))?;
    Ok(Json(WalletView {
        balance_paise: org.wallet_paise.get(),
        currency: "INR",
    }))
}

/// One wallet movement.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WalletTxView {
    /// Transaction id.
    pub id: String,
    /// credit, call-charge or number-renewal.
    pub kind: String,
    /// Signed amount.
    pub amount_paise: i64,
    /// Balance after.
    pub balance_after_paise: i64,
    /// Charged call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Renewed number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub number_id: Option<String>,
    /// Time.
    pub created_at: String,
}

/// List wallet movements, newest first.
#[utoipa::path(get, path = "/api/wallet/transactions", tag = "wallet",
    params(PageRequest),
    responses((status = 200, body = ListEnvelope<WalletTxView>)))]
async fn list_wallet_transactions(
    State(store): State<Store>,
    caller: Caller,
    ApiQuery(page): ApiQuery<PageRequest>,
) -> ApiResult<Json<ListEnvelope<WalletTxView>>> {
    let (rows, total) = store
        .wallet_transactions(caller.org_id, i64::from(page.limit), page.offset())
        .await?;
    let rows = rows
        .into_iter()
        .map(|t| WalletTxView {
            id: t.id.to_string(),
            kind: t.kind,
            amount_paise: t.amount_paise.get(),
            balance_after_paise: t.balance_after_paise.get(),
            call_id: t.call_id.map(|id| id.to_string()),
            number_id: t.number_id.map(|id| id.to_string()),
            created_at: iso(t.created_at),
        })
        .collect();
    Ok(Json(ListEnvelope::new(rows, total, page)))
}

/// The calling key's request usage.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyUsageView {
    /// Daily cap.
    pub daily_limit: i64,
    /// Admitted today (IST).
    pub daily_used: i64,
    /// Monthly cap.
    pub monthly_limit: i64,
    /// Admitted this month (IST).
    pub monthly_used: i64,
}

/// Wallet, minute quota and API usage in one read.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BalancesView {
    /// Wallet balance.
    pub wallet_paise: i64,
    /// Monthly minute quota.
    pub minute_quota: i64,
    /// Minutes billed this month.
    pub minutes_used: i64,
    /// Minutes left this month.
    pub minutes_remaining: i64,
    /// This key's request usage.
    pub api_key: KeyUsageView,
}

/// Read wallet, minutes and API-key usage.
#[utoipa::path(get, path = "/api/balances", tag = "balances", responses((status = 200, body = BalancesView)))]
async fn get_balances(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(limiter): State<Arc<RateLimiter>>,
    caller: Caller,
) -> ApiResult<Json<BalancesView>> {
    let org_id = caller.org_id;
    let org = store
        .org(org_id)
        .await?
        .ok_or_else(|| ApiError::NotFound("Workspace not found".into()))?;
    let minutes_used = store
        .minutes_used(org_id, &ist_month_key(clock.now()))
        .await?;
    let key = crate::store::KeyAuthRow {
        id: caller.key_id,
        org_id,
        daily_limit: caller.daily_limit,
        monthly_limit: caller.monthly_limit,
        revoked_at: None,
    };
    let usage = limiter.usage(&key).await?;
    Ok(Json(BalancesView {
        wallet_paise: org.wallet_paise.get(),
        minute_quota: org.minute_quota,
        minutes_used,
        minutes_remaining: (org.minute_quota - minutes_used).max(0),
        api_key: KeyUsageView {
            daily_limit: caller.daily_limit,
            daily_used: usage.daily,
            monthly_limit: caller.monthly_limit,
            monthly_used: usage.monthly,
        },
    }))
}

/// A retained call recording.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordingView {
    /// The recorded call.
    pub call_id: String,
    /// wav or ogg.
    pub format: String,
    /// Length in seconds.
    pub duration_seconds: f64,
    /// File size.
    pub bytes: i64,
    /// Time written.
    pub created_at: String,
}

/// List the workspace's retained recordings.
#[utoipa::path(get, path = "/api/recordings", tag = "recordings",
    params(PageRequest),
    responses((status = 200, body = ListEnvelope<RecordingView>)))]
async fn list_recordings(
    State(store): State<Store>,
    caller: Caller,
    ApiQuery(page): ApiQuery<PageRequest>,
) -> ApiResult<Json<ListEnvelope<RecordingView>>> {
    let (rows, total) = store
        .recordings(caller.org_id, i64::from(page.limit), page.offset())
        .await?;
    let rows = rows
        .into_iter()
        .map(|r| RecordingView {
            call_id: r.call_id.to_string(),
            format: r.format,
            duration_seconds: r.duration_ms as f64 / 1000.0,
            bytes: r.bytes,
            created_at: iso(r.created_at),
        })
        .collect();
    Ok(Json(ListEnvelope::new(rows, total, page)))
}
