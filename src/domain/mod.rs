//! Domain types: values parsed once at the edge and trusted everywhere after.

/// Stores a value parsed from text in a `TEXT` column on both databases:
/// written as `$to_text` (with `$value` bound to `&self`), read back through
/// the type's `FromStr`, so a stored value that no longer parses fails to
/// decode instead of travelling on as an arbitrary string.
macro_rules! text_column {
    ($ty:ty, |$value:ident| $to_text:expr) => {
        impl<DB: sqlx::Database> sqlx::Type<DB> for $ty
        where
            String: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $ty
        where
            String: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                let $value = self;
                <String as sqlx::Encode<'q, DB>>::encode($to_text, buf)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $ty
        where
            &'r str: sqlx::Decode<'r, DB>,
        {
            fn decode(
                value: <DB as sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&'r str as sqlx::Decode<'r, DB>>::decode(value)?;
                Ok(text.parse::<$ty>()?)
            }
        }
    };
}

pub mod agent;
pub mod analysis;
pub mod calling_hours;
pub mod calling_hours_wire;
pub mod clock;
pub mod do_not_call;
pub mod email;
pub mod hours_override;
pub mod ids;
pub mod inbound;
pub mod json_object;
pub mod money;
pub mod node;
pub mod page;
pub mod phone;
pub mod phone_zones;
pub mod sip_trunk;
pub mod text;
pub mod tools;
pub mod user;

pub use email::Email;
pub use ids::{
    AgentId, ApiKeyId, BatchId, CallId, CampaignId, ChatSessionId, DeliveryId, NumberId, OrgId,
    UserId, WalletTxId, WebhookId,
};
pub use money::Paise;
pub use node::NodeId;
pub use phone::PhoneNumber;
pub use user::{Password, Role};
