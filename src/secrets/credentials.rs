//! Workspace provider credentials, encrypted at rest with a key derived from
//! the server secret (AES-256-GCM). Plaintext exists only in memory, never in
//! an API response or a log line.

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

/// Provider kinds a workspace can hold credentials for.
pub const CREDENTIAL_KINDS: &[&str] = &[
    "openai",
    "deepgram",
    "elevenlabs",
    "twilio",
    "plivo",
    "exotel",
    "vonage",
    "telnyx",
    "google",
    "calcom",
    "sip",
];

/// A vendor a workspace can hold a credential for; the stored `kind`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum CredentialKind {
    /// OpenAI or an OpenAI-compatible server: `apiKey`, optional `baseUrl`.
    OpenAi,
    /// Deepgram: `apiKey`, optional `baseUrl`.
    Deepgram,
    /// ElevenLabs: `apiKey`, optional `baseUrl`.
    ElevenLabs,
    /// Twilio: `accountSid`, `authToken`.
    Twilio,
    /// Plivo: `authId`, `authToken`.
    Plivo,
    /// Exotel: `accountSid`, `apiKey`, `apiToken`.
    Exotel,
    /// Vonage: `applicationId`, `privateKey`.
    Vonage,
    /// Telnyx: `apiKey`, optional `connectionId` (needed to place calls) and
    /// `publicKey` (the account's base64 Ed25519 webhook key; when set, every
    /// webhook must carry a valid `telnyx-signature-ed25519`).
    Telnyx,
    /// Google Sheets: `accessToken`.
    Google,
    /// Cal.com, for the calendar tools: `apiKey`, optional `baseUrl`
    /// (a self-hosted Cal.com's API).
    #[serde(rename = "calcom")]
    CalCom,
    /// A SIP trunk or PBX (issue 33): `host`, optional `port`, `transport`,
    /// `username`, `password`, `fromDomain`, `register`, `registerExpires`,
    /// `allowedSources` and `codecs`, read by [`SipTrunk`](crate::domain::sip_trunk::SipTrunk).
    Sip,
}

impl CredentialKind {
    /// Every kind, in the order of [`CREDENTIAL_KINDS`].
    pub const ALL: [Self; 11] = [
        Self::OpenAi,
        Self::Deepgram,
        Self::ElevenLabs,
        Self::Twilio,
        Self::Plivo,
        Self::Exotel,
        Self::Vonage,
        Self::Telnyx,
        Self::Google,
        Self::CalCom,
        Self::Sip,
    ];

    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Deepgram => "deepgram",
            Self::ElevenLabs => "elevenlabs",
            Self::Twilio => "twilio",
            Self::Plivo => "plivo",
            Self::Exotel => "exotel",
            Self::Vonage => "vonage",
            Self::Telnyx => "telnyx",
            Self::Google => "google",
            Self::CalCom => "calcom",
            Self::Sip => "sip",
        }
    }

    /// The string fields its JSON must carry, non-empty.
    fn required_fields(self) -> &'static [&'static str] {
        match self {
            Self::OpenAi | Self::Deepgram | Self::ElevenLabs | Self::Telnyx | Self::CalCom => {
                &["apiKey"]
            }
            Self::Twilio => &["accountSid", "authToken"],
            Self::Plivo => &["authId", "authToken"],
            Self::Exotel => &["accountSid", "apiKey", "apiToken"],
            Self::Vonage => &["applicationId", "privateKey"],
            Self::Google => &["accessToken"],
            Self::Sip => &["host"],
        }
    }

    /// The optional fields its JSON may carry beside the required ones, as
    /// the vendor clients read them.
    fn optional_fields(self) -> &'static [&'static str] {
        match self {
            Self::OpenAi | Self::Deepgram | Self::ElevenLabs | Self::CalCom => &["baseUrl"],
            Self::Twilio | Self::Plivo => &["baseUrl"],
            Self::Exotel => &["subdomain", "baseUrl"],
            Self::Vonage => &["signatureSecret", "baseUrl"],
            Self::Telnyx => &["connectionId", "publicKey", "baseUrl"],
            Self::Google => &[],
            Self::Sip => &crate::domain::sip_trunk::SIP_TRUNK_FIELDS[1..],
        }
    }

    /// Every field a form for this kind offers, required ones first, each
    /// with whether it is required.
    pub fn fields(self) -> impl Iterator<Item = (&'static str, bool)> {
        let required = self.required_fields().iter().map(|f| (*f, true));
        required.chain(self.optional_fields().iter().map(|f| (*f, false)))
    }

    /// Whether `host` is the vendor's own API host (where a key is always
    /// needed); every host is, for kinds that are not model vendors.
    fn is_vendor_host(self, host: &str) -> bool {
        let vendor = match self {
            Self::OpenAi => "openai.com",
            Self::Deepgram => "deepgram.com",
            Self::ElevenLabs => "elevenlabs.io",
            _ => return true,
        };
        host == vendor || host.ends_with(&format!(".{vendor}"))
    }

    /// Vendors whose credential may point at another server (`baseUrl`):
    /// the model vendors and a self-hosted Cal.com.
    fn takes_base_url(self) -> bool {
        matches!(
            self,
            Self::OpenAi | Self::Deepgram | Self::ElevenLabs | Self::CalCom
        )
    }
}

impl std::fmt::Display for CredentialKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CredentialKind {
    type Err = CredentialError;

    fn from_str(s: &str) -> Result<Self, CredentialError> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| CredentialError::UnknownKind(s.to_string()))
    }
}

/// Why a credential could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Not one of [`CREDENTIAL_KINDS`].
    #[error("unknown credential kind {0}; expected one of {kinds}", kinds = CREDENTIAL_KINDS.join(", "))]
    UnknownKind(String),
    /// The JSON is not an object or lacks a required field.
    #[error("{0}")]
    Invalid(String),
    /// The ciphertext does not open with this server's secret.
    #[error("credential cannot be decrypted with this server secret")]
    Undecryptable,
}

/// Seals and opens credentials with the server secret.
pub struct CredentialCipher {
    cipher: Aes256Gcm,
}

impl CredentialCipher {
    /// Derives the credential key from the server secret.
    pub fn new(secret: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"voxline/credentials/v1\0");
        hasher.update(secret);
        let key = hasher.finalize();
        // A SHA-256 output is exactly an AES-256 key, so this cannot fail.
        let cipher = match Aes256Gcm::new_from_slice(&key) {
            Ok(c) => c,
            Err(_) => unreachable!("sha256 output is 32 bytes"),
        };
        Self { cipher }
    }

    /// Encrypts `plaintext`, returning base64 `(nonce, ciphertext)`.
    pub fn seal(&self, plaintext: &[u8]) -> (String, String) {
        let nonce_bytes: [u8; 12] = rand::random();
        let nonce = Nonce::from(nonce_bytes);
        // Encryption with a valid key and nonce has no failure mode for in-memory buffers.
        let ciphertext = self.cipher.encrypt(&nonce, plaintext).unwrap_or_default();
        (STANDARD.encode(nonce_bytes), STANDARD.encode(ciphertext))
    }

    /// Decrypts a sealed credential.
    pub fn open(&self, nonce_b64: &str, ciphertext_b64: &str) -> Result<Vec<u8>, CredentialError> {
        let nonce_bytes: [u8; 12] = STANDARD
            .decode(nonce_b64)
            .ok()
            .and_then(|n| n.try_into().ok())
            .ok_or(CredentialError::Undecryptable)?;
        let ciphertext = STANDARD
            .decode(ciphertext_b64)
            .map_err(|_| CredentialError::Undecryptable)?;
        self.cipher
            .decrypt(&Nonce::from(nonce_bytes), ciphertext.as_ref())
            .map_err(|_| CredentialError::Undecryptable)
    }
}

/// Checks a credential's kind and the fields its JSON must carry.
pub fn validate(kind: &str, value: &serde_json::Value) -> Result<(), CredentialError> {
    let kind: CredentialKind = kind.parse()?;
    if kind == CredentialKind::Sip {
        return crate::domain::sip_trunk::SipTrunk::from_json(value)
            .map(drop)
            .map_err(|err| CredentialError::Invalid(err.to_string()));
    }
    let obj = value
        .as_object()
        .ok_or_else(|| CredentialError::Invalid("credential JSON must be an object".into()))?;
    if kind.takes_base_url()
        && let Some(base_url) = obj.get("baseUrl")
    {
        let valid = base_url
            .as_str()
            .and_then(|u| reqwest::Url::parse(u).ok())
            .is_some_and(|u| matches!(u.scheme(), "http" | "https" | "ws" | "wss"));
        if !valid {
            return Err(CredentialError::Invalid(format!(
                "{kind} credential baseUrl must be an http(s) URL"
            )));
        }
    }
    // A model server of one's own (llama.cpp, faster-whisper-server, Ollama, …) often takes
    // no key: one is needed only for the vendor's own host.
    let own_server = kind.takes_base_url()
        && obj
            .get("baseUrl")
            .and_then(|u| u.as_str())
            .and_then(|u| reqwest::Url::parse(u).ok())
            .is_some_and(|u| !kind.is_vendor_host(u.host_str().unwrap_or_default()));
    for field in kind.required_fields() {
        if own_server && *field == "apiKey" && obj.get("apiKey").is_none() {
            continue;
        }
        let present = obj
            .get(*field)
            .and_then(|v| v.as_str())
            .is_some_and(|s| !s.is_empty());
        if !present {
            return Err(CredentialError::Invalid(format!(
                "{kind} credential needs a non-empty string field {field}"
            )));
        }
    }
    if kind == CredentialKind::Telnyx
        && let Some(key) = obj.get("publicKey")
        && key.as_str().and_then(ed25519_public_key).is_none()
    {
        return Err(CredentialError::Invalid(
            "telnyx credential publicKey must be the account's base64 Ed25519 public key (32 bytes)"
                .into(),
        ));
    }
    Ok(())
}

/// Reads a base64 Ed25519 public key (Telnyx's webhook key from the portal);
/// `None` unless it decodes to 32 bytes that are a valid curve point.
pub fn ed25519_public_key(text: &str) -> Option<ed25519_dalek::VerifyingKey> {
    let bytes: [u8; 32] = STANDARD.decode(text.trim()).ok()?.try_into().ok()?;
    let key = ed25519_dalek::VerifyingKey::from_bytes(&bytes).ok()?;
    // A small-order point verifies forged signatures; no real account key is one.
    (!key.is_weak()).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_wrong_secret() {
        let cipher = CredentialCipher::new(b"secret-a");
        let (nonce, sealed) = cipher.seal(br#"{"apiKey":"sk-live"}"#);
        assert!(!sealed.contains("sk-live"));
        assert_eq!(
            cipher.open(&nonce, &sealed).unwrap(),
            br#"{"apiKey":"sk-live"}"#
        );
        let other = CredentialCipher::new(b"secret-b");
        assert!(other.open(&nonce, &sealed).is_err());
    }

    #[test]
    fn a_server_of_ones_own_needs_no_key_but_the_vendor_does() {
        let local = serde_json::json!({"baseUrl": "http://127.0.0.1:8080/v1"});
        assert!(validate("openai", &local).is_ok());
        assert!(validate("deepgram", &local).is_ok());
        let vendor = serde_json::json!({"baseUrl": "https://api.openai.com/v1"});
        assert!(validate("openai", &vendor).is_err());
        assert!(validate("openai", &serde_json::json!({})).is_err());
        // A key given must still be a non-empty string.
        let empty = serde_json::json!({"baseUrl": "http://127.0.0.1:8080/v1", "apiKey": ""});
        assert!(validate("openai", &empty).is_err());
        // Carriers always need their fields.
        assert!(validate("twilio", &local).is_err());
    }

    #[test]
    fn required_fields_are_checked() {
        assert!(validate("openai", &serde_json::json!({"apiKey": "k"})).is_ok());
        assert!(validate("openai", &serde_json::json!({"key": "k"})).is_err());
        assert!(validate("nope", &serde_json::json!({})).is_err());
        assert!(
            validate(
                "openai",
                &serde_json::json!({"apiKey": "k", "baseUrl": "http://127.0.0.1:8000/v1"})
            )
            .is_ok()
        );
        assert!(
            validate(
                "deepgram",
                &serde_json::json!({"apiKey": "k", "baseUrl": "nope"})
            )
            .is_err()
        );
        assert!(validate("calcom", &serde_json::json!({"apiKey": "cal_live_k"})).is_ok());
        assert!(
            validate(
                "calcom",
                &serde_json::json!({"apiKey": "k", "baseUrl": "https://cal.example.com"})
            )
            .is_ok()
        );
        assert!(validate("calcom", &serde_json::json!({"baseUrl": "https://x.y"})).is_err());
    }

    #[test]
    fn kinds_are_the_stored_names() {
        let names: Vec<&str> = CredentialKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names, CREDENTIAL_KINDS);
        for kind in CredentialKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
            assert_eq!(kind.as_str().parse::<CredentialKind>().unwrap(), kind);
        }
    }
}
