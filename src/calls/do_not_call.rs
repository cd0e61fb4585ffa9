//! The do-not-call list's rules: what an entry may hold, the CSV import, and
//! the one check every dialing path makes before a number is dialed (the
//! test call, `POST /api/calls`, the alert dial, batch and campaign uploads,
//! the dispatcher's due calls and retries; a batch's pull makes the same
//! check in SQL, in the transaction that claims the item).

use super::placement::PlacementError;
use super::service::CallService;
use crate::domain::do_not_call::{DncSource, MAX_REASON_CHARS};
use crate::domain::text::{self, Lines, TextError};
use crate::domain::{OrgId, PhoneNumber};
use crate::store::do_not_call::DncRow;
use crate::store::{Store, StoreError};
use std::collections::HashSet;

/// Most data rows one import may hold.
pub const MAX_IMPORT_ROWS: usize = 50_000;

/// Most invalid rows an import's answer lists.
pub const MAX_LISTED_INVALID: usize = 100;

/// Up to this many numbers are checked one by one; more read the whole list once.
const CHECK_ONE_BY_ONE: usize = 20;

/// Why an entry or an import is refused; each message names the field.
#[derive(Debug, thiserror::Error)]
pub enum DncError {
    /// The number is not E.164.
    #[error("phone {0}")]
    Phone(String),
    /// The reason is too long or holds forbidden characters.
    #[error("reason {0}")]
    Reason(TextError),
    /// The file cannot be read as CSV, or has no `phone` column.
    #[error("file {0}")]
    File(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Checks and lists `raw_phone` with `raw_reason`; an entry already there
/// is kept as it is. Returns the entry and whether it was added now.
pub async fn add(
    store: &Store,
    org_id: OrgId,
    raw_phone: &str,
    raw_reason: &str,
    source: DncSource,
    now_ms: i64,
) -> Result<(DncRow, bool), DncError> {
    let phone = PhoneNumber::parse(raw_phone).map_err(|e| DncError::Phone(e.to_string()))?;
    let reason = text::parse(raw_reason, Lines::One, MAX_REASON_CHARS).map_err(DncError::Reason)?;
    Ok(store
        .add_do_not_call(org_id, phone.as_str(), &reason, source, now_ms)
        .await?)
}

/// Takes `raw_phone` off the list; false when it was not listed (or is no number).
pub async fn remove(store: &Store, org_id: OrgId, raw_phone: &str) -> Result<bool, StoreError> {
    match PhoneNumber::parse(raw_phone) {
        Ok(phone) => store.remove_do_not_call(org_id, phone.as_str()).await,
        Err(_) => Ok(false),
    }
}

/// A row of an import that was not listed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRow {
    /// The line of the file the row starts on, the header being line 1.
    pub row: usize,
    /// The number as given.
    pub phone: String,
    /// Why.
    pub reason: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Numbers listed now.
    pub added: usize,
    /// Numbers already listed (or repeated in the file).
    pub duplicate: usize,
    /// Rows refused.
    pub invalid: usize,
    /// The first refused rows.
    pub invalid_rows: Vec<InvalidRow>,
}

impl ImportReport {
    /// The one-line summary the API's answer and the console show.
    pub fn summary(&self) -> String {
        format!(
            "{} number(s) added, {} already listed, {} row(s) invalid",
            self.added, self.duplicate, self.invalid
        )
    }
}

/// A valid row of an import: `(row, phone, reason)`.
type ImportRow = (usize, String, String);

/// The rows of an import file: the valid ones, and a report of the invalid.
fn read_import(bytes: &[u8]) -> Result<(Vec<ImportRow>, ImportReport), DncError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(bytes);
    let headers = reader
        .headers()
        .map_err(|e| DncError::File(format!("is not CSV: {e}")))?
        .clone();
    let column = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
    let phone_at = column("phone").ok_or_else(|| {
        DncError::File(
            "has no phone column; the first row must name the columns (phone, reason)".into(),
        )
    })?;
    let reason_at = column("reason");
    let mut valid = Vec::new();
    let mut report = ImportReport::default();
    let refuse = |report: &mut ImportReport, row: usize, phone: &str, reason: String| {
        report.invalid += 1;
        if report.invalid_rows.len() < MAX_LISTED_INVALID {
            report.invalid_rows.push(InvalidRow {
                row,
                phone: phone.to_string(),
                reason,
            });
        }
    };
    for (index, record) in reader.records().enumerate() {
        if index >= MAX_IMPORT_ROWS {
            return Err(DncError::File(format!(
                "holds more than {MAX_IMPORT_ROWS} rows; split it"
            )));
        }
        let record = record.map_err(|e| DncError::File(format!("is not CSV: {e}")))?;
        // The line the row starts on: the reader skips blank lines, and its
        // position is where it began reading, so count the file's line ends
        // before the row's first byte.
        let row = record
            .position()
            .and_then(|p| usize::try_from(p.byte()).ok())
            .map_or(index + 2, |at| line_of(bytes, at));
        if record.iter().all(str::is_empty) {
            continue;
        }
        let raw_phone = record.get(phone_at).unwrap_or_default();
        let phone = match PhoneNumber::parse(raw_phone) {
            Ok(phone) => phone,
            Err(e) => {
                refuse(&mut report, row, raw_phone, format!("phone {e}"));
                continue;
            }
        };
        let raw_reason = reason_at.and_then(|at| record.get(at)).unwrap_or_default();
        match text::parse(raw_reason, Lines::One, MAX_REASON_CHARS) {
            Ok(reason) => valid.push((row, phone.as_str().to_string(), reason)),
            Err(e) => refuse(&mut report, row, raw_phone, format!("reason {e}")),
        }
    }
    Ok((valid, report))
}

/// The 1-based line of the first byte at or after `at` that is not a line end.
fn line_of(bytes: &[u8], at: usize) -> usize {
    let at = at.min(bytes.len());
    let start = bytes[at..]
        .iter()
        .position(|b| !matches!(b, b'\r' | b'\n'))
        .map_or(bytes.len(), |skip| at + skip);
    bytes[..start].iter().filter(|b| **b == b'\n').count() + 1
}

/// Lists every valid number of a CSV file (a `phone` column, an optional
/// `reason`) with source `import`, in one transaction.
pub async fn import(
    store: &Store,
    org_id: OrgId,
    bytes: &[u8],
    now_ms: i64,
) -> Result<ImportReport, DncError> {
    let (valid, mut report) = read_import(bytes)?;
    let entries: Vec<(String, String)> = valid.into_iter().map(|(_, p, r)| (p, r)).collect();
    let added = store
        .add_do_not_call_many(org_id, &entries, DncSource::Import, now_ms)
        .await?;
    report.added = added.iter().filter(|a| **a).count();
    report.duplicate = added.len() - report.added;
    Ok(report)
}

impl CallService {
    /// The numbers among `phones` that `org_id` listed: the one check of the
    /// do-not-call list every dialing path makes.
    pub async fn listed_numbers<'a>(
        &self,
        org_id: OrgId,
        phones: impl IntoIterator<Item = &'a str>,
    ) -> Result<HashSet<String>, StoreError> {
        let phones: Vec<&str> = phones.into_iter().collect();
        if phones.len() > CHECK_ONE_BY_ONE {
            let listed = self.store.do_not_call_phones(org_id).await?;
            return Ok(phones
                .into_iter()
                .filter(|p| listed.contains(*p))
                .map(str::to_string)
                .collect());
        }
        let mut listed = HashSet::new();
        for phone in phones {
            if self.store.is_do_not_call(org_id, phone).await? {
                listed.insert(phone.to_string());
            }
        }
        Ok(listed)
    }

    /// Refuses a single call to a listed number.
    pub async fn check_do_not_call(
        &self,
        org_id: OrgId,
        phone: &PhoneNumber,
    ) -> Result<(), PlacementError> {
        if self
            .listed_numbers(org_id, [phone.as_str()])
            .await?
            .is_empty()
        {
            Ok(())
        } else {
            Err(PlacementError::DoNotCall(phone.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_import_reads_phone_and_reason_and_numbers_the_rows_as_a_spreadsheet_does() {
        let csv = "\u{feff}Reason,Phone\nasked,+919845012310\n,not a number\n\n\"moved, twice\",+14155550123\n";
        let (valid, report) = read_import(csv.as_bytes()).unwrap();
        assert_eq!(
            valid,
            vec![
                (2, "+919845012310".to_string(), "asked".to_string()),
                (5, "+14155550123".to_string(), "moved, twice".to_string()),
            ]
        );
        assert_eq!(report.invalid, 1);
        assert_eq!(report.invalid_rows[0].row, 3);
        assert!(report.invalid_rows[0].reason.starts_with("phone "));
    }

    #[test]
    fn an_import_without_a_phone_column_is_refused() {
        let err = read_import(b"number\n+919876543210\n").unwrap_err();
        assert!(err.to_string().contains("phone column"), "{err}");
    }
}
