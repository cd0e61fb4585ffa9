//! The Wallet and numbers page: the balance and this month's minutes, the
//! wallet ledger (paginated, newest first) and the rented numbers. An admin
//! may rent a number here, through the same operation as
//! `voxline admin number add`.

use super::agents::{AgentChoice, agent_choices};
use crate::admin::ops;
use crate::console::{Chrome, ConsoleError, ConsoleUser, Nav, render};
use crate::domain::agent::TELEPHONY_PROVIDERS;
use crate::domain::clock::{SharedClock, iso, ist_month_key};
use crate::domain::{Paise, PhoneNumber, Role};
use crate::http::state::AppState;
use crate::store::{NumberRow, WalletTxRow};
use crate::store::{Store, StoreError};
use askama::Template;
use axum::Router;
use axum::extract::{Form, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

/// Ledger rows per page.
const PAGE_ROWS: i64 = 25;

/// The page's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/wallet", get(wallet_page))
        .route("/wallet/numbers", post(add_number))
}

/// An amount of money for people: `₹1,234.50`, `-₹12.00`.
pub fn rupees(amount: Paise) -> String {
    let paise = amount.get();
    let sign = if paise < 0 { "-" } else { "" };
    let abs = paise.unsigned_abs();
    let whole = (abs / 100).to_string();
    let mut grouped = String::with_capacity(whole.len() + whole.len() / 3);
    for (i, digit) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    format!("{sign}₹{grouped}.{:02}", abs % 100)
}

/// A time for people: `2026-12-01 09:30 UTC`.
fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| iso(ms))
}

/// One ledger row as shown.
struct LedgerLine {
    when: String,
    kind: String,
    amount: String,
    debit: bool,
    balance_after: String,
    call_id: Option<String>,
    number_id: Option<String>,
}

impl From<WalletTxRow> for LedgerLine {
    fn from(t: WalletTxRow) -> Self {
        Self {
            when: when(t.created_at),
            kind: t.kind,
            debit: t.amount_paise.get() < 0,
            amount: rupees(t.amount_paise),
            balance_after: rupees(t.balance_after_paise),
            call_id: t.call_id.map(|id| id.to_string()),
            number_id: t.number_id.map(|id| id.to_string()),
        }
    }
}

/// One rented number as shown.
struct NumberLine {
    id: String,
    phone: String,
    provider: String,
    status: String,
    is_default: bool,
    rent: String,
    renews: String,
    /// The answering agent's name, if any.
    answered_by: Option<String>,
    inbound_enabled: bool,
}

impl NumberLine {
    /// `n` as shown, its agent named from `agents`.
    fn new(n: NumberRow, agents: &[AgentChoice]) -> Self {
        let answered_by = n.inbound_agent_id.map(|id| {
            let id = id.to_string();
            agents
                .iter()
                .find(|a| a.id == id)
                .map(|a| a.name.clone())
                .unwrap_or(id)
        });
        Self {
            id: n.id.to_string(),
            answered_by,
            inbound_enabled: n.inbound_enabled,
            phone: n.phone,
            provider: n.provider,
            status: n.status,
            is_default: n.is_default,
            rent: rupees(n.monthly_rent_paise),
            renews: when(n.renews_at),
        }
    }
}

/// What the person typed into the add-number form.
#[derive(Debug, Default, Deserialize)]
struct NumberForm {
    #[serde(default)]
    phone: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    is_default: Option<String>,
    #[serde(default)]
    rent: String,
}

/// Errors beside the add-number form's fields.
#[derive(Debug, Default)]
struct NumberErrors {
    phone: Option<String>,
    provider: Option<String>,
    rent: Option<String>,
}

#[derive(Template)]
#[template(path = "console/wallet.html")]
struct WalletPage {
    chrome: Chrome,
    balance: String,
    low_balance: bool,
    minutes_used: i64,
    minute_quota: i64,
    ledger: Vec<LedgerLine>,
    page: i64,
    pages: i64,
    numbers: Vec<NumberLine>,
    can_add: bool,
    added: bool,
    form: NumberForm,
    errors: NumberErrors,
    providers: &'static [&'static str],
}

#[derive(Debug, Deserialize)]
struct WalletQuery {
    #[serde(default)]
    page: Option<String>,
    #[serde(default)]
    added: Option<String>,
}

/// Everything the page shows, with the add-number form as given.
async fn page_of(
    store: &Store,
    clock: &SharedClock,
    user: &ConsoleUser,
    page: i64,
    added: bool,
    form: NumberForm,
    errors: NumberErrors,
) -> Result<WalletPage, ConsoleError> {
    let org = store
        .org(user.org_id)
        .await?
        .ok_or(ConsoleError::NotFound)?;
    let minutes_used = store
        .minutes_used(user.org_id, &ist_month_key(clock.now()))
        .await?;
    let (ledger, total) = store
        .wallet_transactions(user.org_id, PAGE_ROWS, (page - 1) * PAGE_ROWS)
        .await?;
    let numbers = store.numbers(user.org_id).await?;
    let agents = agent_choices(store, user.org_id).await?;
    Ok(WalletPage {
        chrome: Chrome::new(user, Nav::Wallet),
        balance: rupees(org.wallet_paise),
        low_balance: org.wallet_paise.get() <= 0,
        minutes_used,
        minute_quota: org.minute_quota,
        ledger: ledger.into_iter().map(LedgerLine::from).collect(),
        page,
        pages: ((total + PAGE_ROWS - 1) / PAGE_ROWS).max(1),
        numbers: numbers
            .into_iter()
            .map(|n| NumberLine::new(n, &agents))
            .collect(),
        can_add: user.can(Role::Admin),
        added,
        form,
        errors,
        providers: TELEPHONY_PROVIDERS,
    })
}

async fn wallet_page(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Query(query): Query<WalletQuery>,
) -> Result<Html<String>, ConsoleError> {
    let page = query
        .page
        .as_deref()
        .and_then(|p| p.trim().parse::<i64>().ok())
        .filter(|p| *p >= 1 && *p <= i64::from(i32::MAX))
        .unwrap_or(1);
    let added = query.added.is_some();
    let form = NumberForm {
        provider: "sim".into(),
        ..NumberForm::default()
    };
    render(
        &page_of(
            &store,
            &clock,
            &user,
            page,
            added,
            form,
            NumberErrors::default(),
        )
        .await?,
    )
}

/// Rupees as typed (`500`, `499.50`) into paise; empty means the default rent.
fn parse_rent(raw: &str) -> Result<Option<Paise>, String> {
    let raw = raw.trim().trim_start_matches('₹').trim();
    if raw.is_empty() {
        return Ok(None);
    }
    let refused = || "Enter the monthly rent in rupees, such as 500 or 499.50.".to_string();
    let (whole, fraction) = raw.split_once('.').unwrap_or((raw, ""));
    if whole.is_empty() && fraction.is_empty()
        || fraction.len() > 2
        || !whole.chars().all(|c| c.is_ascii_digit())
        || !fraction.chars().all(|c| c.is_ascii_digit())
    {
        return Err(refused());
    }
    let whole: i64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| refused())?
    };
    let fraction: i64 = format!("{fraction:0<2}").parse().map_err(|_| refused())?;
    whole
        .checked_mul(100)
        .and_then(|p| p.checked_add(fraction))
        .map(|p| Some(Paise(p)))
        .ok_or_else(refused)
}

/// `POST /wallet/numbers` (admin): rents a number; the first month counts
/// as paid, as with the admin CLI.
async fn add_number(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Form(form): Form<NumberForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let mut errors = NumberErrors::default();
    let phone = PhoneNumber::parse(&form.phone)
        .map_err(|e| errors.phone = Some(format!("The number {e}.")))
        .ok();
    if !TELEPHONY_PROVIDERS.contains(&form.provider.as_str()) {
        errors.provider = Some(format!("Choose one of {}.", TELEPHONY_PROVIDERS.join(", ")));
    }
    let rent = parse_rent(&form.rent)
        .map_err(|message| errors.rent = Some(message))
        .ok();
    if let (Some(phone), Some(rent), None) = (phone, rent, &errors.provider) {
        let added = ops::add_number(
            &store,
            user.org_id,
            phone.as_str(),
            &form.provider,
            form.is_default.is_some(),
            rent,
            clock.now(),
        )
        .await;
        match added {
            Ok(_) => return Ok(Redirect::to("/wallet?added=1").into_response()),
            Err(StoreError::Conflict(message)) => {
                errors.phone = Some(format!("This {message}."));
            }
            Err(err) => return Err(err.into()),
        }
    }
    let page = page_of(&store, &clock, &user, 1, false, form, errors).await?;
    Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rupees_group_thousands_and_keep_the_sign() {
        assert_eq!(rupees(Paise(123_456_789)), "₹1,234,567.89");
        assert_eq!(rupees(Paise(-1_200)), "-₹12.00");
        assert_eq!(rupees(Paise(5)), "₹0.05");
        assert_eq!(rupees(Paise(100_000)), "₹1,000.00");
    }

    #[test]
    fn rent_is_read_in_rupees() {
        assert_eq!(parse_rent(""), Ok(None));
        assert_eq!(parse_rent("500"), Ok(Some(Paise(50_000))));
        assert_eq!(parse_rent("₹499.5"), Ok(Some(Paise(49_950))));
        assert!(parse_rent("-1").is_err());
        assert!(parse_rent("1.234").is_err());
        assert!(parse_rent(".").is_err());
    }
}
