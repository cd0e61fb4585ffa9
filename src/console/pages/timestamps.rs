//! How the admin pages (keys, webhooks, settings, team) show instants.

use chrono::{DateTime, Utc};

/// A Unix-millisecond instant as `2026-11-26 07:31 UTC`: what a person
/// scanning a list needs, shorter than RFC 3339.
pub fn utc_minute(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| "—".to_string())
}

/// [`utc_minute`] of an optional instant, or `never`.
pub fn utc_minute_or_never(ms: Option<i64>) -> String {
    ms.map_or_else(|| "never".to_string(), utc_minute)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_read_to_the_minute() {
        assert_eq!(utc_minute(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_minute(1_764_142_260_000), "2025-11-26 07:31 UTC");
        assert_eq!(utc_minute_or_never(None), "never");
    }
}
