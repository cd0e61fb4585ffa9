//! Money as integer paise; floats never touch a balance.

use serde::{Deserialize, Serialize};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use std::fmt;

/// An amount of Indian rupees in paise (1/100 rupee).
///
/// Stored in `BIGINT` columns and serialized as a bare integer, exactly like
/// the `i64` it wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct Paise(pub i64);

impl Paise {
    /// Nothing.
    pub const ZERO: Self = Self(0);

    /// The amount as an integer number of paise.
    pub fn get(self) -> i64 {
        self.0
    }

    /// The amount `count` times over (a per-minute rate for so many minutes).
    pub fn times(self, count: i64) -> Self {
        Self(self.0 * count)
    }
}

impl fmt::Display for Paise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::ops::Neg for Paise {
    type Output = Self;

    /// The opposite movement: a debit of a charge.
    fn neg(self) -> Self {
        Self(-self.0)
    }
}

impl<DB: sqlx::Database> sqlx::Type<DB> for Paise
where
    i64: sqlx::Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <i64 as sqlx::Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <i64 as sqlx::Type<DB>>::compatible(ty)
    }
}

impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for Paise
where
    i64: sqlx::Encode<'q, DB>,
{
    fn encode_by_ref(
        &self,
        buf: &mut <DB as sqlx::Database>::ArgumentBuffer,
    ) -> Result<IsNull, BoxDynError> {
        <i64 as sqlx::Encode<'q, DB>>::encode(self.0, buf)
    }

    fn size_hint(&self) -> usize {
        std::mem::size_of::<i64>()
    }
}

impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for Paise
where
    i64: sqlx::Decode<'r, DB>,
{
    fn decode(value: <DB as sqlx::Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        <i64 as sqlx::Decode<'r, DB>>::decode(value).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Row;

    #[tokio::test]
    async fn paise_bind_and_decode_as_integers() {
        let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
        let row = sqlx::query("SELECT $1 AS amount, typeof($1) AS kind")
            .bind(-Paise(1_250))
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(row.get::<String, _>("kind"), "integer");
        assert_eq!(row.get::<Paise, _>("amount"), Paise(-1_250));
        assert_eq!(serde_json::to_string(&Paise(600)).unwrap(), "600");
        assert_eq!(Paise(700).times(2), Paise(1_400));
    }
}
