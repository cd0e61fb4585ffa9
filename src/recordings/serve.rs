//! Serving a stored recording over HTTP, whole or one `Range` of it, from the
//! recordings store (whichever node wrote it). Shared by the API's recording
//! reads and the console's player, so both answer ranges the same way.

use super::{RecordingKey, RecordingStore, RecordingStoreError};
use crate::store::RecordingFileRow;
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use http_range_header::{EndPosition, RangeUnsatisfiableError, StartPosition, parse_range_header};
use std::ops::RangeInclusive;

/// Why a recording could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeRecordingError {
    /// The row names no object in that format, or the object is gone.
    #[error("the recording object is missing")]
    Missing,
    /// The `Range` asked for bytes the recording does not have.
    #[error("range is outside the recording's {len} bytes")]
    Unsatisfiable {
        /// The recording's size.
        len: u64,
    },
    /// The recordings store failed.
    #[error(transparent)]
    Store(#[from] RecordingStoreError),
    /// A header value could not be built.
    #[error("bad header value: {0}")]
    Header(#[from] axum::http::header::InvalidHeaderValue),
}

/// The media type of a recording format.
pub fn content_type(format: &str) -> &'static str {
    match format {
        "ogg" => "audio/ogg",
        _ => "audio/wav",
    }
}

/// What a `Range` header selects of a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Selection {
    /// The whole recording (no range, or one to ignore).
    Whole,
    /// These bytes, first to last inclusive.
    Part(RangeInclusive<u64>),
    /// Nothing the recording has.
    Unsatisfiable,
}

/// What `header` selects of a recording of `len` bytes.
///
/// As RFC 9110 (§14.2) has it, a range in another unit, with bad syntax or
/// with a last byte before the first is ignored, and several ranges are
/// answered with the whole recording rather than a multipart body; a suffix
/// longer than the recording selects all of it.
fn select(header: Option<&HeaderValue>, len: u64) -> Selection {
    let Some(text) = header.and_then(|h| h.to_str().ok()).map(str::trim) else {
        return Selection::Whole;
    };
    let parsed = match parse_range_header(text) {
        Ok(parsed) => parsed,
        // `bytes=-0` is well formed and selects nothing.
        Err(RangeUnsatisfiableError::ZeroSuffix) => return Selection::Unsatisfiable,
        Err(_) => return Selection::Whole,
    };
    let [range] = parsed.ranges.as_slice() else {
        return Selection::Whole;
    };
    match (range.start, range.end) {
        (StartPosition::Index(first), EndPosition::Index(last)) if last < first => {
            return Selection::Whole;
        }
        (StartPosition::FromLast(suffix), _) if suffix > len && len > 0 => {
            return Selection::Part(0..=len - 1);
        }
        _ => {}
    }
    match parsed.validate(len).as_deref() {
        Ok([part]) => Selection::Part(part.clone()),
        _ => Selection::Unsatisfiable,
    }
}

/// Serves `recording` in `format` (or the part `range` asks for) from the
/// recordings store: 200 or 206 with the audio's type, length, `Accept-Ranges`
/// and `Last-Modified`.
pub async fn serve_recording(
    recordings: &RecordingStore,
    recording: &RecordingFileRow,
    format: &str,
    range: Option<&HeaderValue>,
) -> Result<Response, ServeRecordingError> {
    let object_key = recording
        .object_key_for(format)
        .ok_or(ServeRecordingError::Missing)?;
    let key = RecordingKey::stored(object_key).map_err(|_| ServeRecordingError::Missing)?;
    let meta = recordings
        .metadata(&key)
        .await?
        .ok_or(ServeRecordingError::Missing)?;
    let len = meta.size;
    let (status, range) = match select(range, len) {
        Selection::Unsatisfiable => return Err(ServeRecordingError::Unsatisfiable { len }),
        Selection::Whole => (StatusCode::OK, None),
        Selection::Part(part) => (StatusCode::PARTIAL_CONTENT, Some(part)),
    };
    let found = recordings
        .read(&key, range.as_ref().map(|r| *r.start()..*r.end() + 1))
        .await?
        .ok_or(ServeRecordingError::Missing)?;
    let body_len = range.as_ref().map_or(len, |r| r.end() - r.start() + 1);
    let mut response = Response::new(Body::from_stream(found.into_stream()));
    *response.status_mut() = status;
    let out = response.headers_mut();
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(format)),
    );
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    out.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
    if let Ok(modified) = HeaderValue::from_str(
        &meta
            .last_modified
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string(),
    ) {
        out.insert(header::LAST_MODIFIED, modified);
    }
    if let Some(part) = range {
        let value = format!("bytes {}-{}/{len}", part.start(), part.end());
        out.insert(header::CONTENT_RANGE, HeaderValue::from_str(&value)?);
    }
    Ok(response)
}
