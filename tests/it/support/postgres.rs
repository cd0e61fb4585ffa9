//! Throwaway Postgres databases, one per app, for the Postgres pass.

use sqlx::Connection;

/// Env var naming a Postgres server to create per-test databases on.
pub const PG_ENV: &str = "VOXLINE_TEST_DATABASE_URL";

/// A Postgres database `voxline_test_<uuid>` that exists for one app and is
/// dropped (WITH (FORCE)) with it.
pub struct PgDatabase {
    admin_url: String,
    name: String,
}

impl PgDatabase {
    /// Creates the database through `admin_url`; returns it and its own URL.
    pub async fn create(admin_url: &str) -> (Self, String) {
        let name = format!("voxline_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(admin_url)
            .await
            .expect("connect to VOXLINE_TEST_DATABASE_URL");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create test database");
        conn.close().await.ok();
        let mut url = reqwest::Url::parse(admin_url).expect("VOXLINE_TEST_DATABASE_URL is a URL");
        url.set_path(&format!("/{name}"));
        (
            Self {
                admin_url: admin_url.to_string(),
                name,
            },
            url.to_string(),
        )
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        // Drop may run inside the test's runtime, so use a thread with its own.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for the database drop");
            rt.block_on(async move {
                let mut conn = sqlx::PgConnection::connect(&admin_url).await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await?;
                conn.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test database {}: {dropped:?}", self.name);
        }
    }
}
