//! Incremental CSV parsing for campaign uploads: bytes go in as they arrive
//! from the request body, whole records come out, so a 100,000-row file is
//! never held in memory. Handles a UTF-8 byte-order mark, quoted fields
//! (with commas, quotes and line breaks inside) and CRLF or LF line ends.

use crate::domain::Email;
use crate::domain::text::{self, Lines};
use csv_core::{ReadRecordResult, Reader};
use serde_json::{Map, Value};

/// The UTF-8 byte-order mark some spreadsheet tools write first.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One parsed record: its fields as raw bytes.
pub type RawRecord = Vec<Vec<u8>>;

/// Turns a stream of byte chunks into CSV records.
pub struct CsvRecords {
    reader: Reader,
    /// Bytes seen before deciding whether the stream starts with a BOM.
    head: Option<Vec<u8>>,
    out: Vec<u8>,
    out_len: usize,
    ends: Vec<usize>,
    ends_len: usize,
}

impl Default for CsvRecords {
    fn default() -> Self {
        Self::new()
    }
}

impl CsvRecords {
    /// A parser at the start of a file.
    pub fn new() -> Self {
        Self {
            reader: Reader::new(),
            head: Some(Vec::new()),
            out: vec![0; 4096],
            out_len: 0,
            ends: vec![0; 64],
            ends_len: 0,
        }
    }

    /// Parses `chunk`, pushing every record it completes onto `records`.
    pub fn push(&mut self, chunk: &[u8], records: &mut Vec<RawRecord>) {
        if let Some(mut head) = self.head.take() {
            head.extend_from_slice(chunk);
            if head.len() < BOM.len() && BOM.starts_with(&head) {
                self.head = Some(head);
                return;
            }
            let body = head.strip_prefix(BOM).unwrap_or(&head);
            self.parse(body, records);
            return;
        }
        self.parse(chunk, records);
    }

    /// Flushes a last record without a trailing line break.
    pub fn finish(&mut self, records: &mut Vec<RawRecord>) {
        if let Some(head) = self.head.take() {
            self.parse(&head, records);
        }
        self.parse(&[], records);
    }

    fn parse(&mut self, mut input: &[u8], records: &mut Vec<RawRecord>) {
        loop {
            let (result, read, written, ended) = self.reader.read_record(
                input,
                &mut self.out[self.out_len..],
                &mut self.ends[self.ends_len..],
            );
            input = &input[read..];
            // Field ends count from the record's start, across calls (csv-core's contract).
            self.out_len += written;
            self.ends_len += ended;
            match result {
                ReadRecordResult::InputEmpty => {
                    if input.is_empty() {
                        return;
                    }
                }
                ReadRecordResult::OutputFull => self.out.resize(self.out.len() * 2, 0),
                ReadRecordResult::OutputEndsFull => self.ends.resize(self.ends.len() * 2, 0),
                ReadRecordResult::Record => {
                    let mut start = 0;
                    let fields = self.ends[..self.ends_len]
                        .iter()
                        .map(|&end| {
                            let field = self.out[start..end].to_vec();
                            start = end;
                            field
                        })
                        .collect();
                    records.push(fields);
                    self.out_len = 0;
                    self.ends_len = 0;
                }
                ReadRecordResult::End => return,
            }
        }
    }
}

/// Whether a record is a blank line.
pub fn is_blank(record: &RawRecord) -> bool {
    record.iter().all(|f| f.iter().all(u8::is_ascii_whitespace))
}

/// Header names accepted for the phone column (decisions §7), compared
/// case-insensitively with spaces and hyphens read as underscores.
pub const PHONE_HEADERS: [&str; 4] = ["phone", "phone_number", "mobile", "number"];

/// Header names read as the person's email address, compared like [`PHONE_HEADERS`].
pub const EMAIL_HEADERS: [&str; 3] = ["email", "e_mail", "email_address"];

/// A data row: name, phone as written, variables, email address.
pub type StudentRow = (String, String, Map<String, Value>, Option<Email>);

/// Where a student sheet's columns are.
#[derive(Debug, Clone)]
pub struct StudentColumns {
    name: usize,
    phone: usize,
    /// The email column, if any; it is a variable too (`{email}` fills).
    email: Option<usize>,
    /// Every other column: (position, variable name as written in the header,
    /// trimmed; placeholders match it exactly, e.g. `{course}` needs a `course` column).
    variables: Vec<(usize, String)>,
    width: usize,
}

fn normalized(header: &str) -> String {
    header.trim().to_lowercase().replace([' ', '-'], "_")
}

impl StudentColumns {
    /// Reads the header row; the message names a missing column.
    pub fn from_header(record: &RawRecord) -> Result<Self, String> {
        let headers: Vec<String> = record
            .iter()
            .map(|f| String::from_utf8_lossy(f).trim().to_string())
            .collect();
        if let Some((at, reason)) = headers
            .iter()
            .enumerate()
            .find_map(|(at, h)| text::check(h, Lines::One).err().map(|e| (at, e)))
        {
            return Err(format!("the CSV header's column {} {reason}", at + 1));
        }
        let find = |names: &[&str]| {
            headers
                .iter()
                .position(|h| names.contains(&normalized(h).as_str()))
        };
        let name = find(&["name"]).ok_or("the CSV header needs a name column")?;
        let phone = find(&PHONE_HEADERS)
            .ok_or("the CSV header needs a phone column (phone, phone_number, mobile or number)")?;
        let email = find(&EMAIL_HEADERS);
        let variables = headers
            .iter()
            .enumerate()
            .filter(|(i, h)| *i != name && *i != phone && !h.is_empty())
            .map(|(i, h)| (i, h.clone()))
            .collect();
        Ok(Self {
            name,
            phone,
            email,
            variables,
            width: headers.len(),
        })
    }

    /// One data row as `(name, phone as written, variables, email)`, or why
    /// it is rejected, naming the column: a cell that is not UTF-8 or holds
    /// NUL or a control character (a line break only in a variable column,
    /// where it is kept as prose: a note, an address), a missing name or
    /// phone, a malformed email address. A rejected row is one bad row of the
    /// sheet like any other, never a reason to refuse the whole file.
    pub fn row(&self, record: &RawRecord) -> Result<StudentRow, String> {
        if record.len() > self.width {
            return Err(format!(
                "has {} fields but the header has {}",
                record.len(),
                self.width
            ));
        }
        let cell = |i: usize, column: &str, lines: Lines| -> Result<String, String> {
            let Some(bytes) = record.get(i) else {
                return Ok(String::new());
            };
            let text =
                std::str::from_utf8(bytes).map_err(|_| format!("{column} is not valid UTF-8"))?;
            text::check(text, lines).map_err(|e| format!("{column} {e}"))?;
            Ok(text.trim().to_string())
        };
        let name = cell(self.name, "name", Lines::One)?;
        if name.is_empty() {
            return Err("name is empty".into());
        }
        let phone = cell(self.phone, "phone", Lines::One)?;
        if phone.is_empty() {
            return Err("phone is empty".into());
        }
        let mut variables = Map::new();
        let mut email = None;
        for (i, key) in &self.variables {
            let value = cell(*i, key, Lines::Many)?;
            if self.email == Some(*i) {
                email = Email::parse_optional(&value).map_err(|e| format!("email {e}"))?;
            }
            variables.insert(key.clone(), Value::String(value));
        }
        Ok((name, phone, variables, email))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_chunks(data: &[u8], chunk: usize) -> Vec<Vec<String>> {
        let mut parser = CsvRecords::new();
        let mut records = Vec::new();
        for piece in data.chunks(chunk) {
            parser.push(piece, &mut records);
        }
        parser.finish(&mut records);
        records
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .map(|f| String::from_utf8(f).unwrap())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn bom_quotes_and_line_breaks_survive_any_chunking() {
        let data = "\u{feff}Name,Phone,Note\r\n\"Rao, Asha\",+919845012310,\"said \"\"hi\"\"\nthen left\"\r\nRavi,+919845012311,plain";
        let expected = vec![
            vec!["Name", "Phone", "Note"],
            vec!["Rao, Asha", "+919845012310", "said \"hi\"\nthen left"],
            vec!["Ravi", "+919845012311", "plain"],
        ];
        for chunk in [1, 2, 3, 7, 64, 4096] {
            assert_eq!(
                parse_in_chunks(data.as_bytes(), chunk),
                expected,
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn long_fields_grow_the_buffers() {
        let long = "x".repeat(10_000);
        let fields: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        let data = format!("{long},{}\n", fields.join(","));
        let records = parse_in_chunks(data.as_bytes(), 333);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0][0], long);
        assert_eq!(records[0].len(), 101);
        assert_eq!(records[0][100], "99");
    }

    #[test]
    fn header_aliases_and_extra_columns() {
        let rec = |fields: &[&str]| -> RawRecord {
            fields.iter().map(|f| f.as_bytes().to_vec()).collect()
        };
        let cols = StudentColumns::from_header(&rec(&["Course", " NAME ", "Phone Number", "City"]))
            .unwrap();
        let (name, phone, vars, email) = cols
            .row(&rec(&["MBA", "Asha", "+919845012310", "Pune"]))
            .unwrap();
        assert_eq!(email, None);
        assert_eq!((name.as_str(), phone.as_str()), ("Asha", "+919845012310"));
        assert_eq!(vars["Course"], "MBA");
        assert_eq!(vars["City"], "Pune");
        assert_eq!(vars.len(), 2);
        assert!(StudentColumns::from_header(&rec(&["mobile", "name"])).is_ok());
        assert!(
            StudentColumns::from_header(&rec(&["name", "email"]))
                .unwrap_err()
                .contains("phone")
        );
        assert!(
            StudentColumns::from_header(&rec(&["phone"]))
                .unwrap_err()
                .contains("name")
        );
        assert!(
            cols.row(&rec(&["MBA", "", "+919845012310"]))
                .unwrap_err()
                .contains("name")
        );
        assert!(
            cols.row(&rec(&["a", "b", "c", "d", "e"]))
                .unwrap_err()
                .contains("5 fields")
        );
    }

    #[test]
    fn the_email_column_is_parsed_and_kept_as_a_variable() {
        let rec = |fields: &[&str]| -> RawRecord {
            fields.iter().map(|f| f.as_bytes().to_vec()).collect()
        };
        let cols = StudentColumns::from_header(&rec(&["name", "phone", "E-mail"])).unwrap();
        let (_, _, vars, email) = cols
            .row(&rec(&["Asha", "+919845012310", " asha@example.com "]))
            .unwrap();
        assert_eq!(
            email.map(Email::into_string).as_deref(),
            Some("asha@example.com")
        );
        assert_eq!(vars["E-mail"], "asha@example.com");
        let (_, _, _, none) = cols.row(&rec(&["Ravi", "+919845012311", ""])).unwrap();
        assert_eq!(none, None);
        let bad = cols
            .row(&rec(&["Ravi", "+919845012311", "ravi-at-example"]))
            .unwrap_err();
        assert!(bad.starts_with("email is not an email address"), "{bad}");
    }

    #[test]
    fn a_file_shorter_than_a_bom_still_parses() {
        assert_eq!(parse_in_chunks(b"a", 1), vec![vec!["a"]]);
        assert!(is_blank(&vec![b"  ".to_vec()]));
    }
}
