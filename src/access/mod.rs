//! Who may call the API and how much: API key format and hashing, the cache
//! of key lookups, and per-key request rates and daily caps.

pub mod api_key;
pub mod key_cache;
pub mod rate_limit;
