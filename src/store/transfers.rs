//! What carriers report about transferred calls' bridged legs.

use super::Store;

impl Store {}
