//! The tool calls an agent made during a call.

use super::Store;

impl Store {}
