//! Black-box tests of the HTTP API (issue 2): a real server on port 0, real
//! HTTP, a throwaway database (SQLite, or Postgres when
//! `VOXLINE_TEST_DATABASE_URL` is set). The store is touched only for admin
//! setup, as the admin CLI would.

mod account;
mod admin;
mod agent_text;
mod agent_tools;
mod agents;
mod analysis;
mod analysis_exports;
mod attempt_caps;
mod auth;
mod batches;
mod call_reads;
mod calling_hours;
mod calls;
mod campaigns;
mod cluster;
mod cluster_background;
mod cluster_caches;
mod cluster_leased_jobs;
mod cluster_nodes;
mod do_not_call;
mod drain;
mod errors;
mod inbound;
mod inbound_carriers;
mod limits;
mod nodes;
mod openapi;
mod ratings;
mod recording_formats;
mod recordings;
mod settings;
mod shared_recordings;
mod stored_json;
mod text_edge;
mod tools;
mod tools_twilio;
mod voicemail;
mod webhook_admin;
mod webhook_urls;
mod webhooks;

use crate::support::{PG_ENV, TestApp};
use sqlx::Connection;

/// Shows up as ignored in a plain `cargo test`; the Postgres pass runs it with
/// `--include-ignored` and it fails unless Postgres is really in use.
#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn postgres_suite_marker() {
    let url =
        std::env::var(PG_ENV).expect("VOXLINE_TEST_DATABASE_URL must be set for the Postgres pass");
    assert!(url.starts_with("postgres"), "not a Postgres URL: {url}");
    let mut conn = sqlx::PgConnection::connect(&url)
        .await
        .expect("Postgres answers");
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut conn)
        .await
        .expect("SELECT 1");
    assert_eq!(one, 1);
    let app = TestApp::spawn().await;
    assert_eq!(app.store().dialect(), "postgres");
    let ready = app.get("", "/readyz").await.expect(200);
    assert_eq!(ready.body["database"], "postgres");
}
