//! CSV exports as streamed downloads: the one response shape every export endpoint shares.

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};

/// A streamed `text/csv` attachment named `filename`, never cached.
pub fn csv_attachment<S>(filename: &str, chunks: S) -> Response
where
    S: futures::TryStream + Send + 'static,
    S::Ok: Into<bytes::Bytes>,
    S::Error: Into<axum::BoxError>,
{
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
            (header::CACHE_CONTROL, "no-store".to_owned()),
        ],
        Body::from_stream(chunks),
    )
        .into_response()
}
