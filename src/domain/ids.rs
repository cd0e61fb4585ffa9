//! Identifier newtypes. Every id is a UUIDv7, so ids sort by creation time.
//!
//! Both databases keep ids in `TEXT` columns as the lowercase hyphenated form
//! (migrations 0001–0004), so the sqlx impls below read and write them as
//! text: binds and rows use the types directly, and a stored value that is not
//! a UUID fails to decode instead of travelling on as an arbitrary string.

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        voxline_actors::uuid_id!($(#[$doc])* $name);
        text_column!($name, |id| id.to_string());
    };
}

id_type!(
    /// A workspace (organization).
    OrgId
);
id_type!(
    /// An API key record (not the secret itself).
    ApiKeyId
);
id_type!(
    /// An agent.
    AgentId
);
id_type!(
    /// A rented phone number.
    NumberId
);
id_type!(
    /// A wallet transaction.
    WalletTxId
);
id_type!(
    /// A webhook subscription.
    WebhookId
);
id_type!(
    /// A call (each attempt is its own call).
    CallId
);
id_type!(
    /// A batch or a campaign: both live in the `batches` table, told apart by
    /// `kind`, so one id type serves both (see [`CampaignId`]).
    BatchId
);
id_type!(
    /// A text chat session with an agent.
    ChatSessionId
);
id_type!(
    /// One webhook delivery (an event for one subscription).
    DeliveryId
);

id_type!(
    /// A person who signs in to the web console.
    UserId
);

/// The engine names calls, workspaces and batches by its own id types (the engine crate
/// has no database); these convert them both ways, infallibly, at the engine boundary.
macro_rules! engine_id_conversions {
    ($($name:ident),*) => {$(
        impl From<$name> for voxline_actors::ids::$name {
            fn from(id: $name) -> Self {
                Self(id.0)
            }
        }

        impl From<voxline_actors::ids::$name> for $name {
            fn from(id: voxline_actors::ids::$name) -> Self {
                Self(id.0)
            }
        }
    )*};
}

engine_id_conversions!(CallId, OrgId, BatchId);

/// A campaign's id: a [`BatchId`] of a `batches` row of kind `campaign`. The
/// alias names the role where a campaign is meant (a call's `campaign_id`).
pub type CampaignId = BatchId;

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Row;

    #[test]
    fn ids_print_and_parse_as_hyphenated_lowercase() {
        let id: CallId = "0190F2C4-8B7A-7C3D-9E1F-2A3B4C5D6E7F".parse().unwrap();
        assert_eq!(id.to_string(), "0190f2c4-8b7a-7c3d-9e1f-2a3b4c5d6e7f");
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            "\"0190f2c4-8b7a-7c3d-9e1f-2a3b4c5d6e7f\""
        );
        assert!("not-a-uuid".parse::<CallId>().is_err());
    }

    #[tokio::test]
    async fn ids_bind_and_decode_as_uuid_text() {
        let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
        let id = OrgId::new();
        let row = sqlx::query("SELECT $1 AS id, typeof($1) AS kind")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(row.get::<String, _>("kind"), "text");
        assert_eq!(row.get::<String, _>("id"), id.to_string());
        assert_eq!(row.get::<OrgId, _>("id"), id);
        let bad = sqlx::query("SELECT 'org-1' AS id")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert!(bad.try_get::<OrgId, _>("id").is_err());
    }
}
