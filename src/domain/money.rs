//! Money as integer paise; floats never touch a balance.

use serde::{Deserialize, Serialize};

/// An amount of Indian rupees in paise (1/100 rupee).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct Paise(pub i64);

impl Paise {
    /// The amount as an integer number of paise.
    pub fn get(self) -> i64 {
        self.0
    }
}
