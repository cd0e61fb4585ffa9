//! CSV exports as streamed downloads: the keyset-paged cursor, the header
//! written once, the CSV chunks and the response every export endpoint shares.
//! An export brings only its page query and its columns ([`CsvExport`]).

use crate::store::StoreResult;
use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use std::future::Future;

/// Rows fetched per keyset page while streaming an export.
pub const EXPORT_PAGE_ROWS: i64 = 500;

/// One CSV export's own parts: its header, how it pages through the store in
/// key order, and how a row reads as a record.
pub trait CsvExport: Send + 'static {
    /// A row as the page query returns it.
    type Row: Send;
    /// Where a page ended; the next page starts after it.
    type Key: Send;
    /// Names the export in the log line when its stream stops on a failure.
    const NAME: &'static str;

    /// The header row.
    fn header(&self) -> Vec<String>;

    /// Up to `limit` rows after `after` (from the first when `None`), in key order.
    fn page(
        &self,
        after: Option<&Self::Key>,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<Self::Row>>> + Send;

    /// The key the next page starts after when `row` ends this one.
    fn key(row: &Self::Row) -> Self::Key;

    /// `row` as a record, aligned with [`CsvExport::header`]; an error (a
    /// stored column that no longer parses) stops the export.
    fn record(&self, row: &Self::Row) -> StoreResult<Vec<String>>;
}

/// The export as a streamed `text/csv` attachment named `filename`.
pub fn csv_export<E: CsvExport>(filename: &str, export: E) -> Response {
    csv_attachment(filename, csv_chunks(export))
}

/// The export's CSV (header first), read from the store page by page as the
/// stream is polled, so a large export never sits in memory.
pub fn csv_chunks<E: CsvExport>(
    export: E,
) -> impl futures::TryStream<Ok = Bytes, Error = std::io::Error> + Send + 'static {
    let cursor = Cursor {
        export,
        after: None,
        header_written: false,
        finished: false,
    };
    futures::stream::try_unfold(cursor, next_chunk)
}

/// Where an export stream is.
struct Cursor<E: CsvExport> {
    export: E,
    after: Option<E::Key>,
    header_written: bool,
    finished: bool,
}

/// One keyset page as a chunk; a short page is the last, so a finished export
/// costs no extra query.
async fn next_chunk<E: CsvExport>(
    mut cursor: Cursor<E>,
) -> Result<Option<(Bytes, Cursor<E>)>, std::io::Error> {
    if cursor.finished {
        return Ok(None);
    }
    let rows = cursor
        .export
        .page(cursor.after.as_ref(), EXPORT_PAGE_ROWS)
        .await
        .map_err(|err| {
            tracing::error!(error = %err, "{} export stopped: storage failure", E::NAME);
            std::io::Error::other(err)
        })?;
    let header = (!cursor.header_written).then(|| cursor.export.header());
    // The headers went out with the first chunk, so a row that cannot be
    // read can only end the download as a failure, never as a blank record.
    let records = rows
        .iter()
        .map(|row| cursor.export.record(row))
        .collect::<StoreResult<Vec<_>>>()
        .map_err(|err| {
            tracing::error!(error = %err, "{} export stopped: a stored row does not read", E::NAME);
            std::io::Error::other(err)
        })?;
    let chunk = csv_chunk(header.as_deref(), records).map_err(|err| {
        tracing::error!(error = %err, "{} export stopped: CSV failure", E::NAME);
        std::io::Error::other(err)
    })?;
    cursor.header_written = true;
    cursor.finished = i64::try_from(rows.len()).unwrap_or(i64::MAX) < EXPORT_PAGE_ROWS;
    if let Some(last) = rows.last() {
        cursor.after = Some(E::key(last));
    }
    Ok(Some((chunk, cursor)))
}

/// `records` (after `header`, when given) as one CSV chunk, fields quoted
/// only when they need it and records ended by `\n`.
pub fn csv_chunk<I, R>(header: Option<&[String]>, records: I) -> Result<Bytes, csv::Error>
where
    I: IntoIterator<Item = R>,
    R: IntoIterator,
    R::Item: AsRef<[u8]>,
{
    let mut writer = csv::Writer::from_writer(Vec::with_capacity(8 * 1024));
    if let Some(header) = header {
        writer.write_record(header)?;
    }
    for record in records {
        writer.write_record(record)?;
    }
    writer
        .into_inner()
        .map(Bytes::from)
        .map_err(|err| csv::Error::from(err.into_error()))
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;
    use futures::TryStreamExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Numbered rows `0..rows` with a text column, served from memory.
    struct Numbers {
        rows: usize,
        text: &'static str,
        pages: Arc<AtomicUsize>,
        fail: bool,
        /// A row whose record cannot be read.
        corrupt: Option<usize>,
    }

    impl Numbers {
        fn new(rows: usize, text: &'static str) -> Self {
            Self {
                rows,
                text,
                pages: Arc::new(AtomicUsize::new(0)),
                fail: false,
                corrupt: None,
            }
        }
    }

    impl CsvExport for Numbers {
        type Row = usize;
        type Key = usize;
        const NAME: &'static str = "test";

        fn header(&self) -> Vec<String> {
            vec!["n".into(), "text".into()]
        }

        async fn page(&self, after: Option<&usize>, limit: i64) -> StoreResult<Vec<usize>> {
            self.pages.fetch_add(1, Ordering::SeqCst);
            if self.fail {
                return Err(StoreError::Conflict("down".into()));
            }
            let start = after.map_or(0, |n| n + 1);
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            Ok((start..self.rows).take(limit).collect())
        }

        fn key(row: &usize) -> usize {
            *row
        }

        fn record(&self, row: &usize) -> StoreResult<Vec<String>> {
            if self.corrupt == Some(*row) {
                return Err(StoreError::CorruptColumn {
                    table: "numbers",
                    column: "text",
                    id: row.to_string(),
                    detail: "EOF".into(),
                });
            }
            Ok(vec![row.to_string(), self.text.to_string()])
        }
    }

    async fn chunks(export: Numbers) -> Result<Vec<Bytes>, std::io::Error> {
        csv_chunks(export).try_collect().await
    }

    #[tokio::test]
    async fn an_empty_export_is_the_header_alone() {
        let export = Numbers::new(0, "x");
        let pages = export.pages.clone();
        let chunks = chunks(export).await.unwrap();
        assert_eq!(chunks, [Bytes::from_static(b"n,text\n")]);
        assert_eq!(pages.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_header_comes_once_across_pages() {
        let rows = usize::try_from(EXPORT_PAGE_ROWS).unwrap() + 2;
        let export = Numbers::new(rows, "x");
        let pages = export.pages.clone();
        let chunks = chunks(export).await.unwrap();
        assert_eq!(chunks.len(), 2);
        assert_eq!(pages.load(Ordering::SeqCst), 2);
        let text: String = chunks
            .iter()
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        assert_eq!(text.matches("n,text").count(), 1);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), rows + 1);
        assert_eq!(lines[1], "0,x");
        assert_eq!(lines[rows], format!("{},x", rows - 1));
        assert!(
            std::str::from_utf8(&chunks[1])
                .unwrap()
                .starts_with("500,x\n")
        );
    }

    #[tokio::test]
    async fn a_full_last_page_ends_with_an_empty_chunk() {
        let rows = usize::try_from(EXPORT_PAGE_ROWS).unwrap();
        let export = Numbers::new(rows, "x");
        let pages = export.pages.clone();
        let chunks = chunks(export).await.unwrap();
        assert_eq!(pages.load(Ordering::SeqCst), 2);
        assert_eq!(chunks.len(), 2);
        assert!(chunks[1].is_empty());
    }

    #[tokio::test]
    async fn fields_with_commas_quotes_or_newlines_are_quoted() {
        let chunks = chunks(Numbers::new(1, "a, \"b\"\nc")).await.unwrap();
        assert_eq!(chunks.concat(), b"n,text\n0,\"a, \"\"b\"\"\nc\"\n");
    }

    #[tokio::test]
    async fn a_storage_failure_ends_the_stream_with_an_error() {
        let mut export = Numbers::new(3, "x");
        export.fail = true;
        assert!(chunks(export).await.is_err());
    }

    #[tokio::test]
    async fn a_row_that_does_not_read_ends_the_stream_with_an_error() {
        let mut export = Numbers::new(3, "x");
        export.corrupt = Some(1);
        assert!(chunks(export).await.is_err());
    }
}
