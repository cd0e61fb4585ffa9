//! Carrier media-stream message codecs (Twilio, Plivo, Exotel, Vonage, Telnyx).
