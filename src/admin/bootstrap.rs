//! First run: a Demo workspace with a key, a simulated number, wallet credit
//! and one agent per conversation engine, so curl works within a minute.

use crate::admin::ops::{self, NewKey};
use crate::domain::agent::{AgentSpec, ConversationEngine, KeypadConfig, KeypadOption};
use crate::domain::{AgentId, OrgId, Paise, PhoneNumber};
use crate::store::Store;
use chrono::{DateTime, Utc};

/// What bootstrap created; the key is shown once.
#[derive(Debug, Clone)]
pub struct Bootstrapped {
    /// Demo workspace id.
    pub org_id: OrgId,
    /// The full API key.
    pub api_key: String,
    /// The simulated caller number.
    pub phone: String,
    /// Agent ids by engine: pipeline, announcement, keypad.
    pub agents: Vec<(ConversationEngine, AgentId)>,
    /// The console owner's sign-in address.
    pub owner_email: String,
    /// The console owner's one-time password (shown once).
    pub owner_password: String,
}

/// The Demo workspace owner's console sign-in.
pub const DEMO_OWNER_EMAIL: &str = "owner@demo.voxline.dev";

/// The Demo workspace's simulated caller ID.
pub const DEMO_NUMBER: &str = "+918035740101";
/// Wallet credit given to the Demo workspace: ₹5,000.
pub const DEMO_CREDIT_PAISE: Paise = Paise(500_000);

/// Creates the Demo workspace when the database holds no workspace yet.
pub async fn bootstrap_if_empty(
    store: &Store,
    now: DateTime<Utc>,
) -> anyhow::Result<Option<Bootstrapped>> {
    if store.org_count().await? > 0 {
        return Ok(None);
    }
    let now_ms = now.timestamp_millis();
    let org = ops::create_org(store, "Demo", None, None, now).await?;
    let NewKey { key, .. } = ops::create_key(store, org.id, "bootstrap", now).await?;
    let phone = PhoneNumber::parse(DEMO_NUMBER)
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|_| DEMO_NUMBER.to_string());
    ops::add_number(store, org.id, &phone, "sim", true, Some(Paise::ZERO), now).await?;
    store
        .credit_wallet(org.id, DEMO_CREDIT_PAISE, now_ms)
        .await?;
    let mut agents = Vec::new();
    for spec in demo_agents() {
        let id = AgentId::new();
        store.insert_agent(id, org.id, &spec, now_ms).await?;
        agents.push((spec.conversation_engine, id));
    }
    let password = crate::access::password::one_time();
    let password_hash = crate::access::password::hash(&password)?;
    store
        .insert_user(&crate::store::users::NewUser {
            id: crate::domain::UserId::new(),
            org_id: org.id,
            email: DEMO_OWNER_EMAIL,
            password_hash: &password_hash,
            role: crate::domain::Role::Owner,
            now_ms,
        })
        .await?;
    Ok(Some(Bootstrapped {
        org_id: org.id,
        api_key: key,
        phone,
        agents,
        owner_email: DEMO_OWNER_EMAIL.to_string(),
        owner_password: password.expose().to_string(),
    }))
}

fn demo_agents() -> Vec<AgentSpec> {
    let mut pipeline = AgentSpec::with_name("Demo Interviewer");
    pipeline.welcome_message =
        "Hello {name}, this is Voxline calling about your application. Do you have a minute?"
            .into();
    pipeline.prompt = "You are a friendly recruiter screening {name} for the {role} role. Ask about their experience, keep answers short, and end the call politely.".into();
    let mut announcement = AgentSpec::with_name("Demo Announcement");
    announcement.conversation_engine = ConversationEngine::Announcement;
    announcement.welcome_message =
        "This is an automated alert from Voxline. Please check your dashboard. Goodbye.".into();
    let mut keypad = AgentSpec::with_name("Demo Keypad Survey");
    keypad.conversation_engine = ConversationEngine::Keypad;
    keypad.welcome_message = "Hello, this is a short Voxline survey.".into();
    keypad.keypad = Some(KeypadConfig {
        prompt: "Press 1 if you are satisfied, press 2 if you are not.".into(),
        options: vec![
            KeypadOption {
                digit: "1".into(),
                say: "Thank you, glad to hear it.".into(),
                value: "satisfied".into(),
            },
            KeypadOption {
                digit: "2".into(),
                say: "Thank you, we will follow up.".into(),
                value: "unsatisfied".into(),
            },
        ],
        timeout_seconds: 8,
        attempts: 3,
        opt_out_digit: None,
    });
    vec![pipeline, announcement, keypad]
}
