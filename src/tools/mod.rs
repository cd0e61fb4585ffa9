//! The outside services in-call tools reach: calendars and the customer's own
//! functions.

pub mod calendar;
pub mod function;
