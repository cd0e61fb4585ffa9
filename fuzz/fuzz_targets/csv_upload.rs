//! Any campaign upload body, fed to the CSV reader in pieces, then read as a student sheet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voxline::batches::csv_upload::{CsvRecords, StudentColumns};

fuzz_target!(|data: &[u8]| {
    let Some((&piece, body)) = data.split_first() else {
        return;
    };
    let mut parser = CsvRecords::new();
    let mut records = Vec::new();
    for chunk in body.chunks(usize::from(piece).max(1)) {
        parser.push(chunk, &mut records);
    }
    parser.finish(&mut records);
    let mut rows = records.iter();
    if let Some(Ok(columns)) = rows.next().map(StudentColumns::from_header) {
        for record in rows {
            let _ = columns.row(record);
        }
    }
});
