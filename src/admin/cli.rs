//! `voxline admin …`: the platform console (decisions §3). Every command
//! prints exactly one JSON object on stdout; errors go to stderr.

use crate::admin::{ops, people};
use crate::config::{NodeSettings, StorageArgs, StorageSettings};
use crate::domain::agent::TELEPHONY_PROVIDERS;
use crate::domain::clock::iso;
use crate::domain::{ApiKeyId, Email, NodeId, OrgId, Paise, PhoneNumber, Role, WebhookId};
use crate::secrets::credentials::{CredentialCipher, CredentialKind};
use crate::secrets::workspace_credentials;
use crate::store::users::UserRow;
use crate::store::{DeliveryLogFilter, Store};
use crate::webhooks::subscriptions::{self, SubscriptionError};
use anyhow::{Context, anyhow, bail};
use chrono::Utc;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

/// Admin command groups.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Workspaces.
    #[command(subcommand)]
    Org(OrgCommand),
    /// API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Wallets.
    #[command(subcommand)]
    Wallet(WalletCommand),
    /// Phone numbers.
    #[command(subcommand)]
    Number(NumberCommand),
    /// Workspace provider credentials.
    #[command(subcommand)]
    Credential(CredentialCommand),
    /// Webhook subscriptions.
    #[command(subcommand)]
    Webhook(WebhookCommand),
    /// Console sign-ins: the people of a workspace.
    #[command(subcommand)]
    User(UserCommand),
    /// List the nodes sharing the database, with their status and load.
    Nodes,
    /// One node.
    #[command(subcommand)]
    Node(NodeCommand),
    /// The simulated world: ring a workspace's number as a carrier would.
    #[command(subcommand)]
    Sim(SimCommand),
}

/// `admin sim …`
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Ring a workspace number through the Twilio inbound webhook and media
    /// stream, exactly as Twilio would, and play a caller script on the call.
    Call {
        /// The workspace number to ring (E.164); a sim or twilio number.
        #[arg(long)]
        to: String,
        /// The caller's number.
        #[arg(long, default_value = "+919800000001")]
        from: String,
        /// The caller's lines as a JSON array (the sim callee's script steps).
        #[arg(long)]
        script: Option<String>,
        /// The server's base URL as carriers reach it (its public URL).
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        server: String,
    },
}

/// `admin user …`
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a person; their one-time password is printed only here.
    Create {
        /// Workspace id.
        #[arg(long)]
        org: String,
        /// Sign-in address.
        #[arg(long)]
        email: String,
        /// owner, admin, member or viewer.
        #[arg(long)]
        role: String,
    },
    /// List a workspace's people with their roles.
    List {
        /// Workspace id.
        #[arg(long)]
        org: String,
    },
    /// Change a person's role (the last owner keeps theirs).
    Role {
        /// Workspace id.
        #[arg(long)]
        org: String,
        /// The person: their id or sign-in address.
        person: String,
        /// owner, admin, member or viewer.
        #[arg(long)]
        role: String,
    },
    /// Remove a person and end their sessions (never the last owner).
    Remove {
        /// Workspace id.
        #[arg(long)]
        org: String,
        /// The person: their id or sign-in address.
        person: String,
    },
}

/// The person of `org_id` that `person` names, by id or by address.
async fn require_person(store: &Store, org_id: OrgId, person: &str) -> anyhow::Result<UserRow> {
    if let Ok(found) = people::person(store, org_id, person).await {
        return Ok(found);
    }
    let email = person.trim().to_lowercase();
    store
        .users(org_id)
        .await?
        .into_iter()
        .find(|u| u.email == email)
        .ok_or_else(|| anyhow!("no person {person} in workspace {org_id}"))
}

/// A person as the CLI prints them.
fn person_json(person: &UserRow) -> Value {
    json!({
        "id": person.id,
        "email": person.email,
        "role": person.role.as_str(),
        "createdAt": iso(person.created_at),
    })
}

/// Runs one `admin user …` command.
async fn manage_users(store: &Store, command: UserCommand, now_ms: i64) -> anyhow::Result<Value> {
    let parse_role = |raw: &str| -> anyhow::Result<Role> {
        raw.parse::<Role>().map_err(|e| anyhow!("--role {e}"))
    };
    match command {
        UserCommand::Create { org, email, role } => {
            let org_id = require_org(store, &org).await?;
            let email = Email::parse(&email).map_err(|e| anyhow!("--email {e}"))?;
            let role = parse_role(&role)?;
            let added = people::add_person(store, org_id, &email, role, now_ms).await?;
            let mut out = person_json(&added.person);
            out["org"] = json!(org);
            out["password"] = json!(added.one_time_password);
            Ok(out)
        }
        UserCommand::List { org } => {
            let org_id = require_org(store, &org).await?;
            let listed: Vec<Value> = store.users(org_id).await?.iter().map(person_json).collect();
            Ok(json!({"org": org, "users": listed}))
        }
        UserCommand::Role { org, person, role } => {
            let org_id = require_org(store, &org).await?;
            let role = parse_role(&role)?;
            let found = require_person(store, org_id, &person).await?;
            people::change_role(store, org_id, found.id, role).await?;
            Ok(json!({"id": found.id, "email": found.email, "role": role.as_str()}))
        }
        UserCommand::Remove { org, person } => {
            let org_id = require_org(store, &org).await?;
            let found = require_person(store, org_id, &person).await?;
            people::remove_person(store, org_id, found.id, None).await?;
            Ok(json!({"id": found.id, "email": found.email, "removed": true}))
        }
    }
}

/// `admin node …`
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Stop the node taking new calls (its live calls finish), e.g. before an upgrade.
    Drain {
        /// Node id, as `admin nodes` lists it.
        id: String,
    },
    /// Let a drained node take new calls again.
    Undrain {
        /// Node id, as `admin nodes` lists it.
        id: String,
    },
}

/// `admin org …`
#[derive(Debug, Subcommand)]
pub enum OrgCommand {
    /// Create a workspace.
    Create {
        /// Display name.
        #[arg(long)]
        name: String,
        /// Concurrent call slots (default 10).
        #[arg(long)]
        concurrency: Option<i64>,
        /// Monthly minute quota (default 10,000).
        #[arg(long)]
        minute_quota: Option<i64>,
    },
}

/// `admin key …`
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Create a key; the full key is printed only here.
    Create {
        /// Workspace id.
        #[arg(long)]
        org: String,
        /// Descriptive name.
        #[arg(long)]
        name: String,
    },
    /// List a workspace's keys with today's usage.
    List {
        /// Workspace id.
        #[arg(long)]
        org: String,
    },
    /// Revoke a key; effective on its next request.
    Revoke {
        /// Key id.
        key_id: String,
    },
    /// Override a key's request caps.
    Limits(KeyLimits),
}

/// Arguments of `admin key limits`.
#[derive(Debug, Args)]
pub struct KeyLimits {
    /// Key id.
    pub key_id: String,
    /// Daily cap.
    #[arg(long)]
    pub daily: Option<i64>,
    /// Monthly cap.
    #[arg(long)]
    pub monthly: Option<i64>,
}

/// `admin wallet …`
#[derive(Debug, Subcommand)]
pub enum WalletCommand {
    /// Add money to a workspace's wallet.
    Credit {
        /// Workspace id.
        #[arg(long)]
        org: String,
        /// Amount in paise.
        #[arg(long)]
        paise: i64,
    },
}

/// `admin number …`
#[derive(Debug, Subcommand)]
pub enum NumberCommand {
    /// Rent a number for a workspace.
    Add {
        /// Workspace id.
        #[arg(long)]
        org: String,
        /// E.164 number.
        #[arg(long)]
        phone: String,
        /// sim, twilio, plivo, exotel, vonage or telnyx.
        #[arg(long, default_value = "sim")]
        provider: String,
        /// Make it the workspace's default caller ID.
        #[arg(long)]
        default: bool,
        /// Monthly rent in paise (default 0 for sim, 50,000 otherwise).
        #[arg(long)]
        rent_paise: Option<i64>,
    },
    /// Put an agent on a number and set how it answers calls (as
    /// `PATCH /api/numbers/{id}` does); options not given keep their value.
    Inbound {
        /// Workspace id.
        #[arg(long)]
        org: String,
        /// The number's id, as `GET /api/numbers` shows it.
        #[arg(long)]
        number: String,
        /// The agent that answers (`none` takes it off).
        #[arg(long)]
        agent: Option<String>,
        /// Answer calls (`true`) or not (`false`).
        #[arg(long)]
        enabled: Option<bool>,
        /// `reject` or `queue`: what a caller gets when every slot is taken.
        #[arg(long)]
        when_busy: Option<String>,
        /// Seconds a held caller waits for a slot (5 to 600).
        #[arg(long)]
        queue_seconds: Option<i64>,
        /// What a held caller hears (empty restores the default).
        #[arg(long)]
        hold_message: Option<String>,
    },
    /// Read or change the workspace's dialing rules (as
    /// `PATCH /api/numbers/dialing-settings` does); options not given keep their value.
    Dialing {
        /// Workspace id.
        #[arg(long)]
        org: String,
        /// Dial attempts per number per rolling 24 hours (1 to 100).
        #[arg(long)]
        cap_per_day: Option<i64>,
        /// Dial attempts per number per rolling 7 days (1 to 100).
        #[arg(long)]
        cap_per_week: Option<i64>,
        /// Calling hours as JSON (`{"start":"09:00","end":"21:00","days":["mon",…],
        /// "timeZone":"callee"}`), or `default` for the server's.
        #[arg(long)]
        calling_hours: Option<String>,
    },
}

/// `admin credential …`
#[derive(Debug, Subcommand)]
pub enum CredentialCommand {
    /// Store (replace) a workspace's own provider credential.
    Set {
        /// Workspace id.
        #[arg(long)]
        org: String,
        /// openai, deepgram, elevenlabs, twilio, plivo, exotel, vonage or telnyx.
        #[arg(long)]
        kind: String,
        /// The credential as a JSON object.
        #[arg(long)]
        json: String,
    },
}

/// `admin webhook …`
#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Subscribe a URL to events.
    Add {
        /// Workspace id.
        #[arg(long)]
        org: String,
        /// Delivery URL (http or https).
        #[arg(long)]
        url: String,
        /// Events to deliver (default call.completed and call.analyzed, its
        /// follow-up when the analysis finished after the wait); repeatable.
        #[arg(long = "event")]
        events: Vec<String>,
        /// Hosts the URL may name although they resolve to loopback, private,
        /// link-local or metadata addresses: the server's allow-list, read from
        /// the same variable (comma-separated).
        #[arg(
            long = "allow-host",
            env = "VOXLINE_WEBHOOK_ALLOW_HOSTS",
            value_delimiter = ','
        )]
        allow_hosts: Vec<String>,
    },
    /// List a workspace's subscriptions, disabled ones too (secrets are not shown).
    List {
        /// Workspace id.
        #[arg(long)]
        org: String,
    },
    /// Stop delivering to a subscription: it gets no new events, and its
    /// pending deliveries wait until it is enabled again.
    Disable {
        /// Subscription id, as `admin webhook list` shows it.
        id: String,
    },
    /// Deliver to a disabled subscription again.
    Enable {
        /// Subscription id.
        id: String,
    },
    /// Delete a subscription and its delivery log.
    Delete {
        /// Subscription id.
        id: String,
    },
    /// Give a subscription a new secret (printed only here). The old one
    /// keeps signing beside it for the overlap: deliveries carry
    /// `v1=<new>,v1=<old>` until it ends, then only the new one.
    RotateSecret {
        /// Subscription id.
        id: String,
        /// How long the old secret stays valid, e.g. `24h`, `30m`, `0s`.
        #[arg(long, default_value = DEFAULT_OVERLAP)]
        overlap: humantime::Duration,
    },
    /// The delivery log of a workspace, newest first: event, event id,
    /// attempts, last status and error, next attempt, delivered at.
    Deliveries {
        /// Workspace id.
        #[arg(long)]
        org: String,
        /// Only failed deliveries: given up, or awaiting a retry after a failure.
        #[arg(long)]
        failed: bool,
        /// Only this subscription's.
        #[arg(long)]
        subscription: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
}

/// How long a rotated webhook secret keeps signing beside the new one by default.
pub const DEFAULT_OVERLAP: &str = "24h";

/// The subscription `id` names; a text that is no subscription id names none.
async fn require_webhook(store: &Store, id: &str) -> anyhow::Result<WebhookId> {
    let missing = || anyhow!("no webhook subscription with id {id}");
    let parsed: WebhookId = id.parse().map_err(|_| missing())?;
    store
        .webhook(parsed)
        .await?
        .map(|row| row.id)
        .ok_or_else(missing)
}

/// Runs one `admin webhook …` command.
async fn manage_webhook(
    store: &Store,
    command: WebhookCommand,
    now_ms: i64,
) -> anyhow::Result<Value> {
    match command {
        WebhookCommand::Add {
            org,
            url,
            events,
            allow_hosts,
        } => {
            let org_id = require_org(store, &org).await?;
            let added = subscriptions::add(store, org_id, &url, &events, &allow_hosts, now_ms)
                .await
                .map_err(|e| match e {
                    SubscriptionError::UnknownEvent(_) => anyhow!("--event {e}"),
                    SubscriptionError::Refused(why) => anyhow!(
                        "--url is refused: {why}, a loopback, private, link-local or metadata address; \
                         only hosts on the allow-list (--allow-host or VOXLINE_WEBHOOK_ALLOW_HOSTS) may receive webhooks"
                    ),
                    SubscriptionError::Store(store) => store.into(),
                    other => anyhow!("--url {other}"),
                })?;
            Ok(json!({
                "id": added.id,
                "secret": added.secret,
                "url": added.url,
                "events": added.events,
            }))
        }
        WebhookCommand::List { org } => {
            let org_id = require_org(store, &org).await?;
            let subscriptions: Vec<Value> = store
                .all_webhooks(org_id)
                .await?
                .iter()
                .map(|w| {
                    let events: Value = crate::store::decode_json(
                        "webhook_subscriptions",
                        "events",
                        w.id,
                        &w.events,
                    )?;
                    Ok(json!({
                        "id": w.id,
                        "url": w.url,
                        "events": events,
                        "active": w.active,
                        "createdAt": iso(w.created_at),
                        "previousSecretValidUntil": w
                            .previous_secret_expires_at
                            .filter(|until| *until > now_ms)
                            .map(iso),
                    }))
                })
                .collect::<Result<_, crate::store::StoreError>>()?;
            Ok(json!({"org": org, "webhooks": subscriptions}))
        }
        WebhookCommand::Disable { id } => {
            let webhook = require_webhook(store, &id).await?;
            store.set_webhook_active(webhook, false).await?;
            Ok(json!({"id": webhook, "active": false}))
        }
        WebhookCommand::Enable { id } => {
            let webhook = require_webhook(store, &id).await?;
            store.set_webhook_active(webhook, true).await?;
            Ok(json!({"id": webhook, "active": true}))
        }
        WebhookCommand::Delete { id } => {
            let webhook = require_webhook(store, &id).await?;
            store.delete_webhook(webhook).await?;
            Ok(json!({"id": webhook, "deleted": true}))
        }
        WebhookCommand::RotateSecret { id, overlap } => {
            let webhook = require_webhook(store, &id).await?;
            let rotated = subscriptions::rotate_secret(store, webhook, overlap.into(), now_ms)
                .await
                .map_err(|e| match e {
                    SubscriptionError::OverlapTooLong => {
                        anyhow!("--overlap {overlap} is too long")
                    }
                    other => other.into(),
                })?;
            Ok(json!({
                "id": webhook,
                "secret": rotated.secret,
                "overlap": overlap.to_string(),
                "previousSecretValidUntil": iso(rotated.previous_valid_until),
            }))
        }
        WebhookCommand::Deliveries {
            org,
            failed,
            subscription,
            limit,
        } => {
            let org_id = require_org(store, &org).await?;
            if limit < 1 {
                bail!("--limit must be at least 1");
            }
            let subscription = match subscription {
                Some(id) => {
                    let webhook = require_webhook(store, &id).await?;
                    if store
                        .webhook(webhook)
                        .await?
                        .is_none_or(|w| w.org_id != org_id)
                    {
                        bail!("webhook subscription {id} is not in workspace {org}");
                    }
                    Some(webhook)
                }
                None => None,
            };
            let filter = DeliveryLogFilter {
                subscription,
                failed,
                limit,
            };
            let deliveries: Vec<Value> = store
                .delivery_log(org_id, filter)
                .await?
                .iter()
                .map(|d| {
                    json!({
                        "id": d.id,
                        "subscriptionId": d.subscription_id,
                        "event": d.event,
                        "eventId": d.event_id,
                        "callId": d.call_id,
                        "status": d.status,
                        "attempts": d.attempts,
                        "lastError": d.last_error,
                        "nextAttemptAt": (d.status == "pending").then(|| iso(d.next_attempt_at)),
                        "deliveredAt": d.delivered_at.map(iso),
                        "createdAt": iso(d.created_at),
                    })
                })
                .collect();
            Ok(json!({"org": org, "deliveries": deliveries}))
        }
    }
}

/// Runs one admin command against the configured database.
pub async fn run(storage: &StorageArgs, command: AdminCommand) -> anyhow::Result<Value> {
    let (settings, _) = StorageSettings::resolve(storage)?;
    std::fs::create_dir_all(&settings.data_dir)
        .with_context(|| format!("creating data dir {}", settings.data_dir.display()))?;
    let store = Store::connect(&settings.database_url, 2)
        .await
        .context("opening the database")?;
    let result = execute(&store, &settings, command).await;
    store.close().await;
    result
}

/// The workspace `org` names; a text that is no workspace id names none.
async fn require_org(store: &Store, org: &str) -> anyhow::Result<OrgId> {
    let missing = || anyhow!("no workspace with id {org}");
    let id: OrgId = org.parse().map_err(|_| missing())?;
    store.org(id).await?.map(|row| row.id).ok_or_else(missing)
}

/// Sets or clears a node's draining flag; the node reads it at its next heartbeat.
async fn set_draining(store: &Store, id: &str, draining: bool) -> anyhow::Result<Value> {
    let missing = || anyhow!("no node with id {id} (see `voxline admin nodes`)");
    let node: NodeId = id.parse().map_err(|_| missing())?;
    if !store.set_node_draining(&node, draining).await? {
        return Err(missing());
    }
    Ok(json!({"id": node, "draining": draining}))
}

/// The key id `key_id` names; a text that is no key id names no key.
fn parse_key_id(key_id: &str) -> anyhow::Result<ApiKeyId> {
    key_id
        .parse()
        .map_err(|_| anyhow!("no key with id {key_id}"))
}

async fn execute(
    store: &Store,
    settings: &StorageSettings,
    command: AdminCommand,
) -> anyhow::Result<Value> {
    let now = Utc::now();
    let now_ms = now.timestamp_millis();
    match command {
        AdminCommand::Org(OrgCommand::Create {
            name,
            concurrency,
            minute_quota,
        }) => {
            if name.trim().is_empty() {
                bail!("--name must not be blank");
            }
            if concurrency.is_some_and(|c| c < 1) {
                bail!("--concurrency must be at least 1");
            }
            if minute_quota.is_some_and(|m| m < 0) {
                bail!("--minute-quota must not be negative");
            }
            let org = ops::create_org(store, name.trim(), concurrency, minute_quota, now).await?;
            Ok(
                json!({"id": org.id, "name": org.name, "concurrency": org.concurrency, "minuteQuota": org.minute_quota}),
            )
        }
        AdminCommand::Key(KeyCommand::Create { org, name }) => {
            let org_id = require_org(store, &org).await?;
            let key = ops::create_key(store, org_id, &name, now).await?;
            Ok(json!({"id": key.id, "key": key.key, "prefix": key.prefix}))
        }
        AdminCommand::Key(KeyCommand::List { org }) => {
            let org_id = require_org(store, &org).await?;
            let counts = |c: &ops::RequestCounts| {
                json!({
                    "admitted": c.admitted,
                    "success": c.success,
                    "failed": c.failed,
                    "rateLimited": c.rate_limited,
                })
            };
            let keys: Vec<Value> = ops::keys_with_usage(store, org_id, now)
                .await?
                .iter()
                .map(|listed| {
                    let k = &listed.key;
                    json!({
                        "id": k.id,
                        "name": k.name,
                        "prefix": k.prefix,
                        "dailyLimit": k.daily_limit,
                        "monthlyLimit": k.monthly_limit,
                        "revoked": k.revoked_at.is_some(),
                        "revokedAt": k.revoked_at.map(iso),
                        "lastUsedAt": k.last_used_at.map(iso),
                        "createdAt": iso(k.created_at),
                        "usage": {
                            "today": counts(&listed.today),
                            "month": counts(&listed.month),
                        }
                    })
                })
                .collect();
            Ok(json!({"org": org, "keys": keys}))
        }
        AdminCommand::Key(KeyCommand::Revoke { key_id }) => {
            if !store.revoke_api_key(parse_key_id(&key_id)?, now_ms).await? {
                bail!("no key with id {key_id}");
            }
            Ok(json!({"id": key_id, "revoked": true}))
        }
        AdminCommand::Key(KeyCommand::Limits(KeyLimits {
            key_id,
            daily,
            monthly,
        })) => {
            let id = parse_key_id(&key_id)?;
            let (daily, monthly) = ops::set_key_limits(store, None, id, daily, monthly)
                .await
                .map_err(|e| match e {
                    ops::KeyLimitsError::Negative => {
                        anyhow!("--daily and --monthly must not be negative")
                    }
                    other => other.into(),
                })?;
            Ok(json!({"id": key_id, "dailyLimit": daily, "monthlyLimit": monthly}))
        }
        AdminCommand::Wallet(WalletCommand::Credit { org, paise }) => {
            if paise <= 0 {
                bail!("--paise must be a positive integer");
            }
            let missing = || anyhow!("no workspace with id {org}");
            let org_id: OrgId = org.parse().map_err(|_| missing())?;
            let balance = store
                .credit_wallet(org_id, Paise(paise), now_ms)
                .await?
                .ok_or_else(missing)?;
            Ok(json!({"org": org, "creditedPaise": paise, "balancePaise": balance}))
        }
        AdminCommand::Number(NumberCommand::Add {
            org,
            phone,
            provider,
            default,
            rent_paise,
        }) => {
            let org_id = require_org(store, &org).await?;
            let phone = PhoneNumber::parse(&phone).map_err(|e| anyhow!("--phone {phone} {e}"))?;
            if !TELEPHONY_PROVIDERS.contains(&provider.as_str()) {
                bail!(
                    "--provider must be one of {}",
                    TELEPHONY_PROVIDERS.join(", ")
                );
            }
            if rent_paise.is_some_and(|r| r < 0) {
                bail!("--rent-paise must not be negative");
            }
            let n = ops::add_number(
                store,
                org_id,
                phone.as_str(),
                &provider,
                default,
                rent_paise.map(Paise),
                now,
            )
            .await?;
            Ok(
                json!({"id": n.id, "phone": n.phone, "provider": n.provider, "isDefault": n.is_default,
                "monthlyRentPaise": n.monthly_rent_paise, "renewsAt": iso(n.renews_at)}),
            )
        }
        AdminCommand::Number(NumberCommand::Dialing {
            org,
            cap_per_day,
            cap_per_week,
            calling_hours,
        }) => {
            let org_id = require_org(store, &org).await?;
            let mut caps = store.attempt_caps(org_id).await?;
            for (flag, given, slot) in [
                ("--cap-per-day", cap_per_day, &mut caps.per_day),
                ("--cap-per-week", cap_per_week, &mut caps.per_week),
            ] {
                if let Some(v) = given {
                    *slot =
                        crate::store::attempt_caps::checked_cap(flag, v).map_err(|e| anyhow!(e))?;
                }
            }
            let hours = match calling_hours.as_deref().map(str::trim) {
                None => None,
                Some("default") => Some(None),
                Some(raw) => Some(Some(
                    raw.parse::<crate::domain::calling_hours::CallingHours>()
                        .map_err(|e| anyhow!("--calling-hours {e}"))?,
                )),
            };
            store.set_attempt_caps(org_id, caps).await?;
            if let Some(hours) = hours {
                store.set_org_calling_hours(org_id, hours.as_ref()).await?;
            }
            let own = store.org_calling_hours(org_id).await?;
            Ok(
                json!({"attemptCapPerDay": caps.per_day, "attemptCapPerWeek": caps.per_week,
                "callingHours": own, "callingHoursDefault": own.is_none()}),
            )
        }
        AdminCommand::Number(NumberCommand::Inbound {
            org,
            number,
            agent,
            enabled,
            when_busy,
            queue_seconds,
            hold_message,
        }) => {
            let org_id = require_org(store, &org).await?;
            let change = crate::inbound::routing::RoutingChange {
                agent_id: agent.map(|a| (a != "none").then_some(a)),
                enabled,
                when_busy: when_busy
                    .map(|w| w.parse())
                    .transpose()
                    .map_err(|e| anyhow!("--when-busy {e}"))?,
                queue_seconds: queue_seconds
                    .map(crate::domain::inbound::queue_seconds)
                    .transpose()
                    .map_err(|e| anyhow!("--queue-seconds {e}"))?,
                hold_message: hold_message
                    .map(|raw| {
                        crate::domain::text::parse(
                            &raw,
                            crate::domain::text::Lines::Many,
                            crate::domain::inbound::MAX_HOLD_MESSAGE_CHARS,
                        )
                        .map(|text| (!text.is_empty()).then_some(text))
                    })
                    .transpose()
                    .map_err(|e| anyhow!("--hold-message {e}"))?,
            };
            let n = crate::inbound::routing::set_routing(store, org_id, &number, change).await?;
            let inbound = n.inbound();
            Ok(
                json!({"id": n.id, "phone": n.phone, "inboundAgentId": n.inbound_agent_id,
                "inbound": {"enabled": inbound.enabled, "whenBusy": inbound.when_busy,
                    "queueSeconds": inbound.queue_seconds, "holdMessage": inbound.hold_message()}}),
            )
        }
        AdminCommand::Sim(SimCommand::Call {
            to,
            from,
            script,
            server,
        }) => super::sim_call::call(store, settings, &to, &from, script.as_deref(), &server).await,
        AdminCommand::Credential(CredentialCommand::Set {
            org,
            kind,
            json: raw,
        }) => {
            let org_id = require_org(store, &org).await?;
            let value: Value = serde_json::from_str(&raw).context("--json is not valid JSON")?;
            let parsed_kind: CredentialKind = kind.parse()?;
            let secret = settings.load_secret()?;
            let cipher = CredentialCipher::new(&secret);
            workspace_credentials::store_credential(
                store,
                &cipher,
                org_id,
                parsed_kind,
                &value,
                now_ms,
            )
            .await?;
            Ok(json!({"org": org, "kind": kind, "stored": true}))
        }
        AdminCommand::Webhook(other) => manage_webhook(store, other, now_ms).await,
        AdminCommand::User(other) => manage_users(store, other, now_ms).await,
        AdminCommand::Nodes => {
            // The CLI does not know each server's --node-lease; the default stands.
            let lease_ms = NodeSettings::default().lease_ms();
            let nodes: Vec<Value> = store
                .nodes()
                .await?
                .iter()
                .map(|node| {
                    json!({
                        "id": node.id,
                        "publicUrl": node.public_url,
                        "status": ops::node_state(node, now_ms, lease_ms).as_str(),
                        "liveCalls": node.live_calls,
                        "cpuPercent": node.cpu_permille as f64 / 10.0,
                        "heartbeatAt": iso(node.heartbeat_at),
                        "startedAt": iso(node.started_at),
                    })
                })
                .collect();
            Ok(json!({"nodes": nodes}))
        }
        AdminCommand::Node(NodeCommand::Drain { id }) => set_draining(store, &id, true).await,
        AdminCommand::Node(NodeCommand::Undrain { id }) => set_draining(store, &id, false).await,
    }
}
