//! Any text as a phone number: refused, or E.164 that parses back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voxline::domain::phone::PhoneNumber;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(number) = PhoneNumber::parse(text) {
        let again = PhoneNumber::parse(number.as_str());
        assert_eq!(again.as_ref().map(PhoneNumber::as_str), Ok(number.as_str()));
    }
});
