//! The HTTP boundary's error type: every failure becomes `{message}` JSON.

use crate::batches::service::BatchError;
use crate::calls::placement::PlacementError;
use crate::domain::agent::AgentSpecError;
use crate::store::StoreError;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Every way an API request can fail, each with its status code.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: a field is missing or malformed; the message names it.
    #[error("{0}")]
    BadRequest(String),
    /// 401: the key is missing, wrong or revoked.
    #[error("{0}")]
    Unauthorized(String),
    /// 402: the wallet balance does not allow the operation.
    #[error("{0}")]
    PaymentRequired(String),
    /// 403: outside the key's mounts, or a quota is spent.
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such record in this workspace, or no such path.
    #[error("{0}")]
    NotFound(String),
    /// 409: the request conflicts with current state; `extra` fields join the body.
    #[error("{message}")]
    Conflict {
        /// Human-readable reason.
        message: String,
        /// Extra body fields, e.g. the live callId.
        extra: Option<Value>,
    },
    /// 413: the body is larger than allowed.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 415: the body is not JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 502: an upstream service (a model, Google Sheets) failed the request.
    #[error("{0}")]
    BadGateway(String),
    /// 503: a dependency is not ready.
    #[error("{0}")]
    Unavailable(String),
    /// 500: storage failed; details are logged, never returned, except which
    /// stored column of which row is corrupt.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// 500: anything else unexpected; details are logged, never returned.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// Result alias for handlers.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// A 409 with only a message.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::Conflict {
            message: message.into(),
            extra: None,
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::PaymentRequired(_) => StatusCode::PAYMENT_REQUIRED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict { .. } => StatusCode::CONFLICT,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::BadGateway(_) => StatusCode::BAD_GATEWAY,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Store(_) | Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<AgentSpecError> for ApiError {
    fn from(err: AgentSpecError) -> Self {
        Self::BadRequest(err.to_string())
    }
}

impl From<PlacementError> for ApiError {
    fn from(err: PlacementError) -> Self {
        use PlacementError as E;
        match err {
            E::Store(err) => Self::Store(err),
            E::AgentNotFound(_) | E::WorkspaceNotFound => Self::NotFound(err.to_string()),
            E::WalletEmpty => Self::PaymentRequired(err.to_string()),
            E::QuotaExhausted { .. }
            | E::DoNotCall(_)
            | E::AttemptCap(_)
            | E::OutsideCallingHours(_) => Self::Forbidden(err.to_string()),
            E::AgentInactive(_)
            | E::NoNumbers
            | E::FromMalformed(_)
            | E::FromNotOwned(_)
            | E::FromSuspended(_)
            | E::AllNumbersSuspended => Self::BadRequest(err.to_string()),
        }
    }
}

impl From<BatchError> for ApiError {
    fn from(err: BatchError) -> Self {
        use BatchError as E;
        match err {
            E::Placement(err) => err.into(),
            E::Store(err) => Self::Store(err),
            E::Vanished(_) | E::Ledger(_) => Self::Internal(anyhow::Error::new(err)),
            E::NotFound { .. } | E::AgentNotFound(_) => Self::NotFound(err.to_string()),
            E::NameEmpty
            | E::FromMalformed(_)
            | E::ScheduleMalformed(_)
            | E::ScheduleInPast(_)
            | E::NoItems
            | E::TooManyItems(_) => Self::BadRequest(err.to_string()),
            E::ItemsAfterStart { .. }
            | E::StartedWhileAdding(_)
            | E::Refused { .. }
            | E::NothingToDial(_)
            | E::ScheduleAfterStart { .. }
            | E::DeleteRunning(_) => Self::conflict(err.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = match self {
            // The client's own row is damaged: say which, so it can be
            // reported and repaired (the parser's detail stays in the log).
            Self::Store(StoreError::CorruptColumn {
                table, column, id, ..
            }) => {
                json!({ "message": format!(
                    "Stored data is corrupt: {table}.{column} of row {id} does not parse"
                ) })
            }
            Self::Store(err) => {
                tracing::error!(error = %err, "storage failure");
                json!({ "message": "Internal server error" })
            }
            Self::Internal(err) => {
                tracing::error!(error = format!("{err:#}"), "internal failure");
                json!({ "message": "Internal server error" })
            }
            Self::Conflict { message, extra } => {
                let mut body = json!({ "message": message });
                if let (Some(Value::Object(extra)), Some(map)) = (extra, body.as_object_mut()) {
                    map.extend(extra);
                }
                body
            }
            other => json!({ "message": other.to_string() }),
        };
        (status, Json(body)).into_response()
    }
}
