//! Spec Limits: per-key daily and monthly caps with IST windows, headers,
//! exact counting under concurrency, and durability across restarts.

use crate::support::{Reply, TestApp, utc};
use futures::future::join_all;
use serde_json::json;
use std::collections::BTreeSet;
use voxline::domain::clock::ManualClock;

fn assert_quota_headers(reply: &Reply, limit: i64, reset: i64) {
    assert_eq!(reply.header_i64("x-ratelimit-limit"), limit, "{reply:?}");
    assert_eq!(reply.header_i64("x-ratelimit-reset"), reset, "{reply:?}");
    let remaining = reply.header_i64("x-ratelimit-remaining");
    assert!((0..=limit).contains(&remaining), "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cap_of_100_under_200_concurrent_requests_admits_exactly_100() {
    let clock = ManualClock::new(utc("2026-03-10T06:00:00Z"));
    let app = TestApp::spawn_with_clock(clock).await;
    let ws = app.workspace("A").await;
    app.set_limits(ws.key_id, 100, 100_000).await;
    let reset = utc("2026-03-10T18:30:00Z").timestamp();

    let replies: Vec<Reply> = join_all((0..200).map(|_| app.get(&ws.key, "/api/agents"))).await;

    let ok: Vec<&Reply> = replies.iter().filter(|r| r.status == 200).collect();
    let limited: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    assert_eq!(ok.len(), 100, "successes");
    assert_eq!(limited.len(), 100, "429s");
    for r in &replies {
        assert_quota_headers(r, 100, reset);
    }
    // Every admitted request saw its own place in the count.
    let remaining: BTreeSet<i64> = ok
        .iter()
        .map(|r| r.header_i64("x-ratelimit-remaining"))
        .collect();
    assert_eq!(remaining, (0..100).collect::<BTreeSet<i64>>());
    for r in &limited {
        assert_eq!(r.header_i64("x-ratelimit-remaining"), 0);
        assert_eq!(r.body["scope"], "daily", "{}", r.text);
        assert_eq!(r.body["limit"], 100);
        assert_eq!(r.body["used"], 100);
        assert!(!r.message().is_empty());
        // 06:00Z to 18:30Z is 12.5 hours.
        assert_eq!(r.header_i64("retry-after"), 45_000);
    }
    assert!(ok.iter().all(|r| r.header("retry-after").is_none()));

    let balances = app.get(&ws.key, "/api/balances").await.expect(429);
    assert_eq!(balances.body["used"], 100);
}

#[tokio::test]
async fn quota_headers_are_on_every_identified_response() {
    let clock = ManualClock::new(utc("2026-03-10T06:00:00Z"));
    let app = TestApp::spawn_with_clock(clock).await;
    let ws = app.workspace("A").await;
    let reset = utc("2026-03-10T18:30:00Z").timestamp();
    let mut expected_remaining = 5_000;
    let replies = vec![
        app.get(&ws.key, "/api/agents").await.expect(200),
        app.post(&ws.key, "/api/agents", json!({}))
            .await
            .expect(400),
        app.get(&ws.key, "/api/settings").await.expect(403),
        app.get(&ws.key, "/api/agents/nope/nope").await.expect(404),
        app.get(&ws.key, &format!("/api/agents/{}", uuid::Uuid::now_v7()))
            .await
            .expect(404),
        app.get(&ws.key, "/api/wallet/transactions?limit=0")
            .await
            .expect(400),
    ];
    for r in &replies {
        expected_remaining -= 1;
        assert_quota_headers(r, 5_000, reset);
        assert_eq!(r.header_i64("x-ratelimit-remaining"), expected_remaining);
    }
    // Health and docs are not keyed and carry no quota.
    let health = app.get(&ws.key, "/healthz").await.expect(200);
    assert!(health.header("x-ratelimit-limit").is_none());
}

#[tokio::test]
async fn daily_window_turns_at_midnight_ist() {
    let clock = ManualClock::new(utc("2026-03-10T18:29:00Z"));
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let ws = app.workspace("A").await;
    app.set_limits(ws.key_id, 3, 100_000).await;
    let first_reset = utc("2026-03-10T18:30:00Z").timestamp();

    for left in [2, 1, 0] {
        let r = app.get(&ws.key, "/api/wallet").await.expect(200);
        assert_quota_headers(&r, 3, first_reset);
        assert_eq!(r.header_i64("x-ratelimit-remaining"), left);
    }
    clock.set(utc("2026-03-10T18:29:59Z"));
    let r = app.get(&ws.key, "/api/wallet").await.expect(429);
    assert_eq!(r.body["scope"], "daily");
    assert_eq!(r.body["used"], 3);
    assert_eq!(r.header_i64("retry-after"), 1);
    assert_quota_headers(&r, 3, first_reset);

    // 18:30:00Z is 00:00 IST: a new day, a fresh allowance.
    clock.set(utc("2026-03-10T18:30:00Z"));
    let r = app.get(&ws.key, "/api/wallet").await.expect(200);
    assert_quota_headers(&r, 3, utc("2026-03-11T18:30:00Z").timestamp());
    assert_eq!(r.header_i64("x-ratelimit-remaining"), 2);
    let balances = app.get(&ws.key, "/api/balances").await.expect(200);
    assert_eq!(balances.body["apiKey"]["dailyUsed"], 2);
    assert_eq!(balances.body["apiKey"]["monthlyUsed"], 5);
}

#[tokio::test]
async fn monthly_cap_spans_days_and_resets_on_the_first_ist() {
    let clock = ManualClock::new(utc("2026-03-30T10:00:00Z"));
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let ws = app.workspace("A").await;
    app.set_limits(ws.key_id, 1_000, 5).await;

    for _ in 0..3 {
        app.get(&ws.key, "/api/agents").await.expect(200);
    }
    // Next IST day, same IST month: the daily count restarts, the monthly does not.
    clock.set(utc("2026-03-31T10:00:00Z"));
    let r = app.get(&ws.key, "/api/agents").await.expect(200);
    assert_eq!(r.header_i64("x-ratelimit-remaining"), 999);
    app.get(&ws.key, "/api/agents").await.expect(200);
    let r = app.get(&ws.key, "/api/agents").await.expect(429);
    assert_eq!(r.body["scope"], "monthly", "{}", r.text);
    assert_eq!(r.body["limit"], 5);
    assert_eq!(r.body["used"], 5);
    // Until 2026-04-01T00:00 IST = 2026-03-31T18:30Z.
    assert_eq!(r.header_i64("retry-after"), 8 * 3600 + 30 * 60);
    assert_eq!(r.header_i64("x-ratelimit-limit"), 1_000);

    // 18:29:59Z is still March in IST.
    clock.set(utc("2026-03-31T18:29:59Z"));
    app.get(&ws.key, "/api/agents").await.expect(429);
    clock.set(utc("2026-03-31T18:30:00Z"));
    app.get(&ws.key, "/api/agents").await.expect(200);
    let balances = app.get(&ws.key, "/api/balances").await.expect(200);
    assert_eq!(balances.body["apiKey"]["monthlyUsed"], 2);
    assert_eq!(balances.body["apiKey"]["monthlyLimit"], 5);
}

#[tokio::test]
async fn usage_survives_a_restart() {
    let clock = ManualClock::new(utc("2026-03-10T06:00:00Z"));
    let mut app = TestApp::spawn_with_clock(clock).await;
    let ws = app.workspace("A").await;
    app.set_limits(ws.key_id, 10, 100_000).await;
    for _ in 0..6 {
        app.get(&ws.key, "/api/agents").await.expect(200);
    }
    app.restart().await;

    let r = app.get(&ws.key, "/api/agents").await.expect(200);
    assert_eq!(r.header_i64("x-ratelimit-remaining"), 3);
    for _ in 0..3 {
        app.get(&ws.key, "/api/agents").await.expect(200);
    }
    let r = app.get(&ws.key, "/api/agents").await.expect(429);
    assert_eq!(r.body["used"], 10);

    app.restart().await;
    let r = app.get(&ws.key, "/api/balances").await.expect(429);
    assert_eq!(r.body["used"], 10);
}

#[tokio::test]
async fn an_abrupt_stop_never_over_admits() {
    let clock = ManualClock::new(utc("2026-03-10T06:00:00Z"));
    let mut app = TestApp::spawn_with_clock(clock.clone()).await;
    let ws = app.workspace("A").await;
    app.set_limits(ws.key_id, 10, 100_000).await;
    for _ in 0..6 {
        app.get(&ws.key, "/api/agents").await.expect(200);
    }
    // No clean shutdown: counters are not settled.
    drop(app.server.take());
    let server = voxline::app::server::Server::start(
        voxline::config::Settings::for_tests(app.data_dir.clone(), Some(app.database_url.clone())),
        clock,
    )
    .await
    .unwrap();
    app.base = server.base_url();
    app.server = Some(server);
    app.http = reqwest::Client::new();

    let mut admitted = 0;
    for _ in 0..10 {
        if app.get(&ws.key, "/api/agents").await.status == 200 {
            admitted += 1;
        }
    }
    assert!(admitted <= 4, "admitted {admitted} after 6 of 10 were used");
}
