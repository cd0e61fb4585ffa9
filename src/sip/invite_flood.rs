//! The INVITE flood limit: a token bucket per source address, so one source
//! (a scanner, a looping PBX) cannot make the service look up numbers, bind
//! RTP ports and answer calls faster than a burst and a steady rate allow.
//!
//! Refused INVITEs get 503 with `Retry-After` from the user agent; the map of
//! sources is bounded, and sources idle for a minute are forgotten first.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The most sources remembered at once; beyond it idle ones are swept, and
/// when none is idle new sources share one bucket (still limited, never
/// unbounded memory).
const MAX_SOURCES: usize = 10_000;
/// How long a source's bucket is kept after its last INVITE.
const IDLE: Duration = Duration::from_secs(60);

/// Per-source INVITE buckets.
#[derive(Debug)]
pub struct InviteFlood {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
    overflow: Mutex<Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl InviteFlood {
    /// Allows `burst` INVITEs at once and `per_second` after, per source.
    pub fn new(per_second: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            per_second: per_second.max(0.0),
            burst,
            buckets: Mutex::new(HashMap::new()),
            overflow: Mutex::new(Bucket {
                tokens: burst,
                at: Instant::now(),
            }),
        }
    }

    /// Whether an INVITE from `source` at `now` may go on (and takes its token).
    pub fn allow(&self, source: IpAddr, now: Instant) -> bool {
        let mut buckets = self.buckets.lock();
        if !buckets.contains_key(&source) && buckets.len() >= MAX_SOURCES {
            buckets.retain(|_, b| now.saturating_duration_since(b.at) < IDLE);
            if buckets.len() >= MAX_SOURCES {
                drop(buckets);
                return self.take(&mut self.overflow.lock(), now);
            }
        }
        let bucket = buckets.entry(source).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        self.take(bucket, now)
    }

    fn take(&self, bucket: &mut Bucket, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.per_second).min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let flood = InviteFlood::new(2.0, 5);
        let ip: IpAddr = "203.0.113.5".parse().unwrap();
        let t0 = Instant::now();
        assert!((0..5).all(|_| flood.allow(ip, t0)));
        assert!(!flood.allow(ip, t0), "the sixth at once is refused");
        assert!(
            flood.allow(ip, t0 + Duration::from_millis(500)),
            "a token per 500 ms"
        );
        assert!(!flood.allow(ip, t0 + Duration::from_millis(600)));
    }

    #[test]
    fn sources_are_limited_apart() {
        let flood = InviteFlood::new(1.0, 1);
        let t0 = Instant::now();
        assert!(flood.allow("198.51.100.1".parse().unwrap(), t0));
        assert!(!flood.allow("198.51.100.1".parse().unwrap(), t0));
        assert!(flood.allow("198.51.100.2".parse().unwrap(), t0));
    }
}
