//! E.164 phone numbers, validated against real numbering-plan data.

use serde::{Serialize, Serializer};
use std::fmt;

/// A valid, dialable E.164 number such as `+919845012310`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PhoneNumber(String);

/// Why a number was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PhoneError {
    /// Not E.164 or not a number the numbering plan allows.
    #[error("is not a valid E.164 phone number")]
    Malformed,
    /// A dummy such as +911111111111 or +911234567890.
    #[error("is a placeholder, not a real phone number")]
    Placeholder,
}

impl PhoneNumber {
    /// Parses `raw` (must start with `+`), rejecting malformed and placeholder numbers.
    pub fn parse(raw: &str) -> Result<Self, PhoneError> {
        let trimmed = raw.trim();
        let Some(rest) = trimmed.strip_prefix('+') else {
            return Err(PhoneError::Malformed);
        };
        if rest.chars().any(|c| c.is_ascii_alphabetic()) {
            return Err(PhoneError::Placeholder);
        }
        if !rest
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, ' ' | '-' | '(' | ')' | '.'))
        {
            return Err(PhoneError::Malformed);
        }
        let parsed = phonenumber::parse(None, trimmed).map_err(|_| {
            // A dummy like +911234567890 may not even parse; still call it a placeholder.
            let digits: String = rest.chars().filter(char::is_ascii_digit).collect();
            let tail = &digits[digits.len().saturating_sub(10)..];
            if is_placeholder(tail) {
                PhoneError::Placeholder
            } else {
                PhoneError::Malformed
            }
        })?;
        let e164 = parsed.format().mode(phonenumber::Mode::E164).to_string();
        let national = parsed.national().to_string();
        if is_placeholder(&national) {
            return Err(PhoneError::Placeholder);
        }
        if !phonenumber::is_valid(&parsed) {
            return Err(PhoneError::Malformed);
        }
        Ok(Self(e164))
    }

    /// Wraps a number read back from storage, where it was validated on the way in.
    pub fn from_trusted(stored: String) -> Self {
        Self(stored)
    }

    /// The E.164 text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last two digits, which choose the simulated callee's behaviour.
    pub fn last_two_digits(&self) -> u8 {
        let bytes = self.0.as_bytes();
        let digit = |b: u8| b.saturating_sub(b'0');
        match bytes {
            [.., a, b] => digit(*a) * 10 + digit(*b),
            _ => 0,
        }
    }
}

/// One digit repeated, or an ascending/descending run like 1234567890.
fn is_placeholder(national: &str) -> bool {
    let digits: Vec<u8> = national.bytes().filter(u8::is_ascii_digit).collect();
    if digits.len() < 6 {
        return false;
    }
    let all_same = digits.iter().all(|d| *d == digits[0]);
    let ascending = digits
        .windows(2)
        .all(|w| w[1] == if w[0] == b'9' { b'0' } else { w[0] + 1 });
    let descending = digits
        .windows(2)
        .all(|w| w[1] == if w[0] == b'0' { b'9' } else { w[0] - 1 });
    all_same || ascending || descending
}

impl fmt::Display for PhoneNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for PhoneNumber {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_real_numbers() {
        assert_eq!(
            PhoneNumber::parse("+919845012310").unwrap().as_str(),
            "+919845012310"
        );
        assert_eq!(
            PhoneNumber::parse("+1 415 555 2671").unwrap().as_str(),
            "+14155552671"
        );
        assert_eq!(
            PhoneNumber::parse("+447911123456").unwrap().as_str(),
            "+447911123456"
        );
    }

    #[test]
    fn rejects_malformed_and_placeholders() {
        assert_eq!(PhoneNumber::parse("9876543210"), Err(PhoneError::Malformed));
        assert_eq!(PhoneNumber::parse("+91"), Err(PhoneError::Malformed));
        assert_eq!(
            PhoneNumber::parse("+91987654321x"),
            Err(PhoneError::Placeholder)
        );
        assert_eq!(
            PhoneNumber::parse("+91XXXXXXXXXX"),
            Err(PhoneError::Placeholder)
        );
        assert_eq!(
            PhoneNumber::parse("+919999999999"),
            Err(PhoneError::Placeholder)
        );
        assert_eq!(
            PhoneNumber::parse("+911234567890"),
            Err(PhoneError::Placeholder)
        );
        assert_eq!(
            PhoneNumber::parse("+910000000000"),
            Err(PhoneError::Placeholder)
        );
        assert_eq!(PhoneNumber::parse("+9112"), Err(PhoneError::Malformed));
    }

    #[test]
    fn last_two_digits_pick_sim_behaviour() {
        assert_eq!(
            PhoneNumber::parse("+919876543285")
                .unwrap()
                .last_two_digits(),
            85
        );
    }
}
