//! Properties of the parsers that take untrusted input, over generated input (issue 19,
//! fuzzing): the campaign CSV reader, E.164 phone numbers and the text type every string
//! field goes through. The carrier codecs have
//! theirs in `media/tests/codec_properties.rs`; `fuzz/` holds `cargo fuzz` targets for
//! the same code.

use proptest::prelude::*;
use voxline::batches::csv_upload::{CsvRecords, RawRecord};
use voxline::domain::phone::{PhoneError, PhoneNumber};
use voxline::domain::text::{Line, Prose, TextError};

/// Parses `data` fed in pieces of `chunk` bytes.
fn parse_in_chunks(data: &[u8], chunk: usize) -> Vec<RawRecord> {
    let mut parser = CsvRecords::new();
    let mut records = Vec::new();
    for piece in data.chunks(chunk.max(1)) {
        parser.push(piece, &mut records);
    }
    parser.finish(&mut records);
    records
}

/// A CSV field as a spreadsheet might hold it: quotes, commas, line breaks, non-ASCII.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 +]{0,12}",
        "[a-z\",\r\n ]{0,8}",
        // A leading U+FEFF is a byte-order mark by definition, whatever was meant.
        ".{0,8}".prop_filter("no U+FEFF", |s| !s.contains('\u{feff}')),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any bytes, in any pieces, parse without panicking, and the pieces do not change
    /// the records.
    #[test]
    fn csv_reader_takes_any_bytes_in_any_pieces(data in prop::collection::vec(any::<u8>(), 0..2048), chunk in 1usize..97) {
        let whole = parse_in_chunks(&data, data.len().max(1));
        let pieces = parse_in_chunks(&data, chunk);
        prop_assert_eq!(whole, pieces);
    }

    /// Rows written by a CSV writer (quoting what needs quoting, with or without a
    /// byte-order mark, CRLF or LF) read back field for field.
    #[test]
    fn csv_rows_written_read_back_exactly(rows in prop::collection::vec(prop::collection::vec(field(), 3), 1..20), bom in any::<bool>(), crlf in any::<bool>(), chunk in 1usize..64) {
        let mut writer = csv::WriterBuilder::new()
            .terminator(if crlf { csv::Terminator::CRLF } else { csv::Terminator::Any(b'\n') })
            .quote_style(csv::QuoteStyle::Necessary)
            .from_writer(Vec::new());
        for row in &rows {
            writer.write_record(row).unwrap();
        }
        let mut data = if bom { b"\xEF\xBB\xBF".to_vec() } else { Vec::new() };
        data.extend(writer.into_inner().unwrap());
        let read: Vec<Vec<String>> = parse_in_chunks(&data, chunk)
            .into_iter()
            .map(|record| record.into_iter().map(|f| String::from_utf8(f).unwrap()).collect())
            .collect();
        // csv writes a lone empty field as `""` so the row is not a blank line.
        prop_assert_eq!(read, rows);
    }

    /// Any text is a number or a refusal, never a panic; what is accepted is E.164 and
    /// reads back as itself.
    #[test]
    fn phone_parsing_takes_any_text(raw in prop_oneof!["\\+[0-9 ()\\-.]{0,20}", ".{0,24}"]) {
        if let Ok(number) = PhoneNumber::parse(&raw) {
            let e164 = number.as_str();
            prop_assert!(e164.starts_with('+') && e164[1..].bytes().all(|b| b.is_ascii_digit()), "{e164}");
            prop_assert_eq!(PhoneNumber::parse(e164).map(|n| n.as_str().to_owned()), Ok(e164.to_owned()));
        }
    }

    /// Indian mobile numbers, however they are spaced, parse to the same E.164 number.
    #[test]
    fn indian_mobiles_parse_to_their_e164(first in 6u8..10, rest in "[0-9]{9}", spaced in any::<bool>()) {
        let digits = format!("{first}{rest}");
        let raw = if spaced { format!("+91 {} {}", &digits[..5], &digits[5..]) } else { format!("+91{digits}") };
        match PhoneNumber::parse(&raw) {
            Ok(number) => prop_assert_eq!(number.as_str(), format!("+91{digits}")),
            // Dummies such as +919999999999 are refused on purpose.
            Err(error) => prop_assert_eq!(error, PhoneError::Placeholder, "{}", raw),
        }
    }

    /// One-line text: accepted exactly when it holds no NUL or control character and
    /// fits after trimming; what is accepted is trimmed, free of them, and parses again
    /// to itself.
    #[test]
    fn a_line_is_clean_trimmed_and_bounded(raw in prop_oneof!["[ a-zA-Z]{0,40}", ".{0,40}", "[\\x00-\\x1f\\x7f-\\u{9f} a]{0,12}"]) {
        let trimmed = raw.trim();
        let clean = !raw.chars().any(char::is_control);
        match Line::<30>::parse(&raw) {
            Ok(line) => {
                prop_assert!(clean, "{raw:?} accepted");
                prop_assert_eq!(line.as_str(), trimmed);
                prop_assert!(line.chars().count() <= 30);
                prop_assert_eq!(Line::<30>::parse(line.as_str()), Ok(line.clone()));
            }
            Err(TextError::TooLong(30)) => prop_assert!(clean && trimmed.chars().count() > 30),
            Err(TextError::Nul) => prop_assert!(raw.contains('\0')),
            Err(TextError::Control(c)) => prop_assert!(c.is_control() && c != '\0'),
            Err(other) => prop_assert!(false, "{other:?}"),
        }
    }

    /// Multi-line text keeps tabs and line breaks inside and refuses every other
    /// control character.
    #[test]
    fn prose_keeps_breaks_and_refuses_other_controls(raw in "[a \t\r\n\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f]{0,30}") {
        let other_control = raw.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\r' | '\n'));
        match Prose::<100>::parse(&raw) {
            Ok(prose) => {
                prop_assert!(!other_control, "{raw:?} accepted");
                prop_assert_eq!(prose.as_str(), raw.trim());
            }
            Err(_) => prop_assert!(other_control, "{raw:?} refused"),
        }
    }
}
