//! Conversation loop tests.
