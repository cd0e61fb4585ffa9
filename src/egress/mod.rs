//! Egress: the guard every request to a customer-chosen address passes
//! (webhooks, function tools). It refuses loopback, private and link-local
//! addresses unless the host is allow-listed, pins the connection to the
//! addresses it checked, so DNS cannot answer differently at connect time,
//! and bounds how much of an answer is read. Requests are signed here too.

pub mod address_guard;
pub mod body_limit;
pub mod signing;

pub use address_guard::{
    EgressError, GuardedClient, Lookup, SystemLookup, check_address, check_url_for_storage,
    is_internal, pinned,
};
pub use body_limit::{BodyError, read_limited};
pub use signing::{signature, signatures};
