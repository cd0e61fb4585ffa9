//! Stored JSON that no longer parses (issue 30, "one typed engine boundary"):
//! a read that meets it answers 500 with a message naming the table, column
//! and row, and the server logs the row's id, instead of showing an empty
//! value as if nothing had been stored. The columns are corrupted straight
//! in the database, as a bad migration or a hand edit would.

use crate::support::{Reply, TestApp, Workspace, logs};
use voxline::store::CallFixture;

/// A completed call of `ws`, stored straight in the table.
fn completed_call(app: &TestApp, ws: &Workspace) -> CallFixture {
    let now = app.now().timestamp_millis();
    CallFixture {
        id: uuid::Uuid::now_v7().to_string(),
        org_id: ws.org_id.to_string(),
        agent_id: uuid::Uuid::now_v7().to_string(),
        agent_name: "Screener".into(),
        phone: "+919876500001".into(),
        target_name: "Asha Verma".into(),
        from_number: "+918045000001".into(),
        provider: "sim".into(),
        status: "completed".into(),
        created_at: now - 60_000,
        answered_at: Some(now - 55_000),
        ended_at: Some(now - 5_000),
        ..CallFixture::default()
    }
}

/// Runs `sql` with `$1` bound to `id` on the app's database, whichever it is.
async fn execute(app: &TestApp, sql: &'static str, id: &str) {
    if app.database_url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(&app.database_url)
            .await
            .expect("postgres");
        sqlx::query(sql).bind(id).execute(&pool).await.expect(sql);
        pool.close().await;
    } else {
        let pool = sqlx::SqlitePool::connect(&app.database_url)
            .await
            .expect("sqlite");
        sqlx::query(sql).bind(id).execute(&pool).await.expect(sql);
        pool.close().await;
    }
}

/// Asserts a 500 whose message names `table.column` of the row `id`.
#[track_caller]
fn assert_names_the_row(reply: Reply, table_column: &str, id: &str) {
    let reply = reply.expect(500);
    let message = reply.message();
    assert!(
        message.contains(table_column) && message.contains(id),
        "the message names {table_column} of row {id}: {message}"
    );
}

/// Whether a captured log line names the corrupt column and the row.
fn logged(table: &str, column: &str, id: &str) -> bool {
    let text = String::from_utf8_lossy(&logs().0.lock().unwrap()).to_string();
    text.lines().any(|line| {
        line.contains("stored JSON does not parse")
            && line.contains(table)
            && line.contains(column)
            && line.contains(id)
    })
}

#[tokio::test]
async fn a_rating_whose_columns_no_longer_parse_is_a_500_not_an_empty_scorecard() {
    logs();
    let app = TestApp::spawn().await;
    let ws = app.workspace("Corrupt ratings").await;
    let call = completed_call(&app, &ws);
    app.store()
        .insert_call_fixture(&call)
        .await
        .expect("store the call");
    execute(
        &app,
        r#"INSERT INTO ratings (call_id, org_id, agent_id, status, overall, columns,
             webhook_deadline, call_created_at, created_at, updated_at, rated_at)
           SELECT id, org_id, agent_id, 'done', 7.0,
             '[{"name": "Fit", "score": 7.0, "reason": "clear"}]',
             0, created_at, created_at, created_at, created_at
           FROM calls WHERE id = $1"#,
        &call.id,
    )
    .await;
    let path = format!("/api/ratings/{}", call.id);

    // While the column parses, the scorecard reads back whole.
    let good = app.get(&ws.key, &path).await.expect(200);
    assert_eq!(good.body["columns"][0]["name"], "Fit");

    execute(
        &app,
        r#"UPDATE ratings SET columns = '[{"name": "Fit", "sco' WHERE call_id = $1"#,
        &call.id,
    )
    .await;
    for path in [
        path.clone(),
        "/api/ratings".to_string(),
        "/api/ratings/analytics".to_string(),
        "/api/ratings/by-phone/+919876500001".to_string(),
    ] {
        let reply = app.get(&ws.key, &path).await;
        assert_names_the_row(reply, "ratings.columns", &call.id);
    }
    assert!(
        logged("ratings", "columns", &call.id),
        "the failure is logged with the rating's row id"
    );

    // The CSV export streams: the row breaks the download off (here before
    // the headers, as it is on the first page) instead of ending it with a
    // blank scorecard.
    let export = app
        .http
        .get(format!("{}/api/ratings/export-all", app.base))
        .bearer_auth(&ws.key)
        .send()
        .await;
    let completed = match export {
        Ok(response) => response.text().await.is_ok(),
        Err(_) => false,
    };
    assert!(!completed, "the download breaks off instead of completing");
    app.shutdown().await;
}

#[tokio::test]
async fn a_call_whose_variables_or_latencies_no_longer_parse_is_a_500_naming_the_column() {
    logs();
    let app = TestApp::spawn().await;
    let ws = app.workspace("Corrupt calls").await;
    let mut broken_variables = completed_call(&app, &ws);
    broken_variables.variables = r#"{"name": "Asha""#.into();
    let mut broken_latencies = completed_call(&app, &ws);
    broken_latencies.latencies = "[{".into();
    app.store()
        .insert_call_fixtures(&[broken_variables.clone(), broken_latencies.clone()])
        .await
        .expect("store the calls");

    let reply = app
        .get(&ws.key, &format!("/api/calls/{}", broken_variables.id))
        .await;
    assert_names_the_row(reply, "calls.variables", &broken_variables.id);
    assert!(logged("calls", "variables", &broken_variables.id));

    let reply = app
        .get(&ws.key, &format!("/api/calls/{}", broken_latencies.id))
        .await;
    assert_names_the_row(reply, "calls.latencies", &broken_latencies.id);
    app.shutdown().await;
}
