//! Secrets at rest: workspace provider credentials, encrypted with a key
//! derived from the server secret.

pub mod credentials;
pub mod server_secret;
pub mod workspace_credentials;
