//! A sheet of people to call (a campaign's CSV upload, and the console's
//! batch upload) read into items: the header is found, each data row becomes
//! an item or a rejection with its reason, repeated numbers are rejected.
//! One rule for every bad row: a malformed number, a repeated one, a missing
//! name or a cell holding a control character rejects that row with its
//! reason and the good rows are kept. Only the file itself (its header, no
//! header at all, too many rows) is refused whole.
//!
//! Nothing here stores anything: the API's upload appends what the sheet
//! accepted once the whole file has been read (so a refused file stores
//! nothing), and the console's preview shows it without appending at all.

use super::csv_upload::{CsvRecords, RawRecord, StudentColumns, is_blank};
use super::service::{check_phone, item_variables};
use crate::domain::Email;
use crate::store::batches::NewItem;
use std::collections::HashSet;

/// Most data rows one sheet may hold.
pub const MAX_SHEET_ROWS: usize = 100_000;

/// One rejected row of a sheet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedRow {
    /// Row number in the file, the header being row 1.
    pub row: usize,
    /// Why it is not added.
    pub reason: String,
}

/// One accepted row of a sheet: the item it becomes and where it was.
#[derive(Debug, Clone)]
pub struct SheetItem {
    /// Row number in the file, the header being row 1.
    pub row: usize,
    /// The item to append (status `pending`, phone in E.164).
    pub item: NewItem,
}

/// Why a whole sheet is refused (as opposed to one row of it).
#[derive(Debug, thiserror::Error)]
pub enum SheetError {
    /// The header lacks a name or phone column, or holds a control character.
    #[error("file: {0}")]
    Header(String),
    /// No header row at all.
    #[error("file: the CSV is empty; it needs a header row with name and phone columns")]
    Empty,
    /// More data rows than [`MAX_SHEET_ROWS`].
    #[error(
        "file has {0} data rows; one upload may hold at most {MAX_SHEET_ROWS}, and none was added"
    )]
    TooManyRows(usize),
}

/// What a whole sheet read into.
#[derive(Debug, Clone, Default)]
pub struct ReadSheet {
    /// Accepted rows in file order.
    pub items: Vec<SheetItem>,
    /// Rows not added.
    pub rejected: usize,
    /// The first rejected rows (as many as the reader was asked to list).
    pub rejected_rows: Vec<RejectedRow>,
}

impl ReadSheet {
    /// Rows that will be added.
    pub fn accepted(&self) -> usize {
        self.items.len()
    }

    /// The items to append, in file order.
    pub fn into_items(self) -> Vec<NewItem> {
        self.items.into_iter().map(|i| i.item).collect()
    }
}

/// A sheet being read: bytes go in as they arrive, whole rows are judged.
pub struct StudentSheet {
    parser: CsvRecords,
    columns: Option<StudentColumns>,
    seen: HashSet<String>,
    listed_rejections: usize,
    row_no: usize,
    data_rows: usize,
    read: ReadSheet,
}

impl StudentSheet {
    /// A reader for a sheet whose numbers must not repeat `seen` (the
    /// numbers already in the batch), listing at most `listed_rejections`
    /// rejected rows (all are counted).
    pub fn new(seen: HashSet<String>, listed_rejections: usize) -> Self {
        Self {
            parser: CsvRecords::new(),
            columns: None,
            seen,
            listed_rejections,
            row_no: 0,
            data_rows: 0,
            read: ReadSheet::default(),
        }
    }

    /// Reads the next piece of the file.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), SheetError> {
        let mut records = Vec::new();
        self.parser.push(bytes, &mut records);
        records.into_iter().try_for_each(|r| self.record(r))
    }

    /// Reads the end of the file and says what it held.
    pub fn finish(mut self) -> Result<ReadSheet, SheetError> {
        let mut records = Vec::new();
        self.parser.finish(&mut records);
        records.into_iter().try_for_each(|r| self.record(r))?;
        if self.columns.is_none() {
            return Err(SheetError::Empty);
        }
        if self.data_rows > MAX_SHEET_ROWS {
            return Err(SheetError::TooManyRows(self.data_rows));
        }
        Ok(self.read)
    }

    fn reject(&mut self, reason: String) {
        self.read.rejected += 1;
        if self.read.rejected_rows.len() < self.listed_rejections {
            self.read.rejected_rows.push(RejectedRow {
                row: self.row_no,
                reason,
            });
        }
    }

    fn record(&mut self, record: RawRecord) -> Result<(), SheetError> {
        self.row_no += 1;
        if is_blank(&record) {
            return Ok(());
        }
        let Some(columns) = &self.columns else {
            self.columns = Some(StudentColumns::from_header(&record).map_err(SheetError::Header)?);
            return Ok(());
        };
        self.data_rows += 1;
        if self.data_rows > MAX_SHEET_ROWS {
            // Still counted to the end so the refusal says how many there were.
            return Ok(());
        }
        let (name, raw_phone, variables, email) = match columns.row(&record) {
            Ok(row) => row,
            Err(reason) => {
                self.reject(reason);
                return Ok(());
            }
        };
        match check_phone(&raw_phone, &mut self.seen) {
            Ok(phone) => self.read.items.push(SheetItem {
                row: self.row_no,
                item: NewItem {
                    variables: item_variables(&name, variables),
                    email: email.map(Email::into_string),
                    name,
                    phone: phone.as_str().to_string(),
                    status: "pending",
                    reason: None,
                    skip_reason: None,
                },
            }),
            Err(reason) => self.reject(reason),
        }
        Ok(())
    }
}

/// Reads a whole sheet held in memory.
pub fn read_sheet(
    bytes: &[u8],
    seen: HashSet<String>,
    listed_rejections: usize,
) -> Result<ReadSheet, SheetError> {
    let mut sheet = StudentSheet::new(seen, listed_rejections);
    sheet.push(bytes)?;
    sheet.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_accepted_or_rejected_with_their_row_numbers() {
        let csv = "name,phone,course\nAsha,+919845012310,MBA\n,+919845012311,MBA\n\
                   Ravi,12,BBA\nTwice,+919845012310,MBA\nMeera,+919845012312,MCA\n";
        let sheet = read_sheet(csv.as_bytes(), HashSet::new(), 2).unwrap();
        let rows: Vec<usize> = sheet.items.iter().map(|i| i.row).collect();
        assert_eq!(rows, [2, 6]);
        assert_eq!(sheet.items[1].item.phone, "+919845012312");
        assert_eq!(sheet.rejected, 3);
        // Only two are listed, as asked; all three are counted.
        assert_eq!(sheet.rejected_rows.len(), 2);
        assert_eq!(sheet.rejected_rows[0].row, 3);
        assert!(sheet.rejected_rows[0].reason.contains("name"));
        assert_eq!(sheet.rejected_rows[1].row, 4);
        assert!(sheet.rejected_rows[1].reason.starts_with("phone"));
    }

    #[test]
    fn numbers_already_in_the_batch_are_rejected() {
        let seen = HashSet::from(["+919845012310".to_string()]);
        let sheet = read_sheet(b"name,phone\nAsha,+919845012310\n", seen, 20).unwrap();
        assert_eq!(sheet.accepted(), 0);
        assert!(sheet.rejected_rows[0].reason.contains("already"));
    }

    #[test]
    fn whole_sheet_refusals() {
        assert!(matches!(
            read_sheet(b"", HashSet::new(), 20),
            Err(SheetError::Empty)
        ));
        let header = read_sheet(b"name,email\n", HashSet::new(), 20).unwrap_err();
        assert!(header.to_string().starts_with("file: "), "{header}");
    }

    /// Issue 28.4: a bad cell rejects its row like a bad number does; the
    /// good rows beside it are kept, and a line break in a variable is prose.
    #[test]
    fn a_cell_with_a_control_character_rejects_its_row_only() {
        let csv = "name,phone,note\n\"Asha\nKumar\",+919845012310,x\n\
                   Ravi,+919845012311,\"Flat 4\nMG Road\"\n\
                   A\0,+919845012312,y\n\
                   Meera,+919845012313,\"bell\u{7}\"\n\
                   Tab\tbed,+919845012314,z\n";
        let sheet = read_sheet(csv.as_bytes(), HashSet::new(), 20).unwrap();
        let rows: Vec<usize> = sheet.items.iter().map(|i| i.row).collect();
        // Row 2 spans two lines of the file but is one record: Ravi is row 3.
        assert_eq!(rows, [3]);
        let variables: serde_json::Value =
            serde_json::from_str(&sheet.items[0].item.variables).unwrap();
        assert_eq!(variables["note"], "Flat 4\nMG Road");
        let rejected: Vec<(usize, &str)> = sheet
            .rejected_rows
            .iter()
            .map(|r| (r.row, r.reason.as_str()))
            .collect();
        assert_eq!(
            rejected,
            [
                (2, "name must not contain the control character U+000A"),
                (4, "name must not contain NUL (U+0000)"),
                (5, "note must not contain the control character U+0007"),
                (6, "name must not contain the control character U+0009"),
            ]
        );
        assert_eq!(sheet.rejected, 4);
        let bad_utf8 =
            read_sheet(b"name,phone\nA\xff,+919845012310\n", HashSet::new(), 20).unwrap();
        assert_eq!(bad_utf8.rejected_rows[0].reason, "name is not valid UTF-8");
    }
}
