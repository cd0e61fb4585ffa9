//! Domain types: values parsed once at the edge and trusted everywhere after.

pub mod agent;
pub mod analysis;
pub mod clock;
pub mod email;
pub mod ids;
pub mod money;
pub mod node;
pub mod page;
pub mod phone;
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
