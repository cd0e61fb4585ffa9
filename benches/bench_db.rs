//! The database a bench runs on: SQLite in the bench's temp dir, or a fresh
//! Postgres database (dropped afterwards) when `VOXLINE_TEST_DATABASE_URL` is set.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use sqlx::Connection;
use std::path::Path;

/// A bench's database; call [`BenchDb::drop_database`] after the server stopped.
pub struct BenchDb {
    /// The URL the server opens.
    pub url: String,
    /// Postgres only: the admin URL and the created database's name.
    postgres: Option<(String, String)>,
}

impl BenchDb {
    /// SQLite in `dir`, or a new Postgres database when the env var names one.
    pub async fn create(dir: &Path) -> Self {
        let admin = std::env::var("VOXLINE_TEST_DATABASE_URL")
            .ok()
            .filter(|u| !u.is_empty());
        let Some(admin) = admin else {
            return Self {
                url: format!("sqlite://{}", dir.join("voxline.db").display()),
                postgres: None,
            };
        };
        let name = format!("voxline_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&admin).await.expect("postgres");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create database");
        conn.close().await.ok();
        let mut url = reqwest::Url::parse(&admin).expect("url");
        url.set_path(&format!("/{name}"));
        Self {
            url: url.to_string(),
            postgres: Some((admin, name)),
        }
    }

    /// Drops the Postgres database, if one was created.
    pub async fn drop_database(self) {
        let Some((admin, name)) = self.postgres else {
            return;
        };
        let mut conn = sqlx::PgConnection::connect(&admin).await.expect("postgres");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut conn)
        .await
        .expect("drop database");
    }
}
