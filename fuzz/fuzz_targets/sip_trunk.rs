//! Any JSON as a `sip` trunk credential: a trunk, or a refusal naming a field.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voxline::domain::sip_trunk::{SIP_TRUNK_FIELDS, SipTrunk};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Err(err) = SipTrunk::from_json(&value) {
        assert!(err.field == "body" || SIP_TRUNK_FIELDS.contains(&err.field));
    }
});
