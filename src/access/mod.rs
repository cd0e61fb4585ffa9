//! Who may call the API and how much: API key format and hashing, the cache
//! of key lookups, and per-key request rates and daily caps; and the console
//! people's password hashing.

pub mod api_key;
pub mod key_cache;
pub mod password;
pub mod rate_limit;
