//! Carrier media-stream message codecs (Twilio, Plivo, Exotel, Vonage, Telnyx), and the `sip`
//! codec of the SIP carrier's RTP transport (see [`sip`]).
//!
//! One [`CarrierCodec`] serves one carrier websocket. It turns inbound frames into
//! [`InboundEvent`]s and our playback commands into the carrier's outbound frames, following
//! `telephony-protocols.md`. Per-frame work borrows from the frame and writes into buffers the
//! caller reuses, so steady-state media never allocates:
//!
//! ```
//! use voxline_media::carrier::{CarrierCodec, CarrierKind, InboundEvent, Outbound, OutboundFrame};
//!
//! let mut codec = CarrierCodec::new(CarrierKind::Twilio);
//! let (mut audio, mut out) = (Vec::new(), Outbound::new());
//! let frame = r#"{"event":"media","streamSid":"MZ1","media":{"payload":"//8="}}"#;
//! if let Ok(InboundEvent::Media { .. }) = codec.parse_text(frame, &mut audio) {
//!     assert_eq!(audio, [0xff, 0xff]);
//! }
//! codec.encode_media(&audio, &mut out);
//! codec.encode_mark("utt-1", &mut out);
//! for frame in out.frames() {
//!     match frame {
//!         OutboundFrame::Text(_text) => { /* send as a websocket text message */ }
//!         OutboundFrame::Binary(_bytes) => { /* send as a websocket binary message */ }
//!     }
//! }
//! out.clear();
//! ```

mod exotel;
mod plivo;
pub mod sip;
mod telnyx;
pub mod twilio;
mod vonage;
mod wire;

use std::fmt;
use std::str::FromStr;

use crate::MediaError;

pub use twilio::{ServerCommand, TwilioCarrierSide};

/// The carriers whose media streams Voxline speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CarrierKind {
    /// Twilio Media Streams.
    Twilio,
    /// Plivo audio streams.
    Plivo,
    /// Exotel voicebot streams.
    Exotel,
    /// Vonage Voice API websockets.
    Vonage,
    /// Telnyx media streaming.
    Telnyx,
    /// Our own SIP trunk: the RTP transport speaks the [`sip`] codec's internal wire. Not a
    /// websocket carrier, so not in [`ALL`](Self::ALL) and not parsed by `from_str`.
    Sip,
}

impl CarrierKind {
    /// Every websocket carrier (those served at `/media/{kind}`), in a stable order; [`Sip`]
    /// is left out on purpose.
    ///
    /// [`Sip`]: CarrierKind::Sip
    pub const ALL: [CarrierKind; 5] = [
        CarrierKind::Twilio,
        CarrierKind::Plivo,
        CarrierKind::Exotel,
        CarrierKind::Vonage,
        CarrierKind::Telnyx,
    ];

    /// The lowercase name, also the URL path segment in `/media/{kind}`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CarrierKind::Twilio => "twilio",
            CarrierKind::Plivo => "plivo",
            CarrierKind::Exotel => "exotel",
            CarrierKind::Vonage => "vonage",
            CarrierKind::Telnyx => "telnyx",
            CarrierKind::Sip => "sip",
        }
    }
}

impl fmt::Display for CarrierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CarrierKind {
    type Err = MediaError;

    /// Parses a websocket carrier's name; `sip` is refused (no websocket speaks it).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CarrierKind::ALL
            .into_iter()
            .find(|kind| kind.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| MediaError::UnknownCarrier(s.to_owned()))
    }
}

/// How audio samples are encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AudioEncoding {
    /// G.711 μ-law, one byte per sample.
    Mulaw,
    /// G.711 A-law, one byte per sample.
    Alaw,
    /// Signed 16-bit little-endian linear PCM.
    Pcm16Le,
}

/// A mono audio format: encoding and sample rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AudioFormat {
    /// The sample encoding.
    pub encoding: AudioEncoding,
    /// Samples per second.
    pub sample_rate: u32,
}

impl AudioFormat {
    /// μ-law at 8 kHz (Twilio, and the default of Plivo and Telnyx).
    pub const MULAW_8K: AudioFormat = AudioFormat::new(AudioEncoding::Mulaw, 8_000);
    /// A-law at 8 kHz.
    pub const ALAW_8K: AudioFormat = AudioFormat::new(AudioEncoding::Alaw, 8_000);
    /// 16-bit PCM at 8 kHz (Exotel's default).
    pub const PCM16_8K: AudioFormat = AudioFormat::new(AudioEncoding::Pcm16Le, 8_000);
    /// 16-bit PCM at 16 kHz.
    pub const PCM16_16K: AudioFormat = AudioFormat::new(AudioEncoding::Pcm16Le, 16_000);
    /// 16-bit PCM at 24 kHz.
    pub const PCM16_24K: AudioFormat = AudioFormat::new(AudioEncoding::Pcm16Le, 24_000);

    /// A format from its parts.
    pub const fn new(encoding: AudioEncoding, sample_rate: u32) -> Self {
        Self {
            encoding,
            sample_rate,
        }
    }

    /// Bytes per sample.
    pub const fn bytes_per_sample(self) -> usize {
        match self.encoding {
            AudioEncoding::Mulaw | AudioEncoding::Alaw => 1,
            AudioEncoding::Pcm16Le => 2,
        }
    }

    /// Bytes in `ms` milliseconds of audio.
    pub const fn bytes_for_ms(self, ms: u32) -> usize {
        (self.sample_rate as usize * ms as usize / 1000) * self.bytes_per_sample()
    }

    /// Milliseconds of audio in `bytes` bytes.
    pub const fn ms_for_bytes(self, bytes: u64) -> u64 {
        let per_second = self.sample_rate as u64 * self.bytes_per_sample() as u64;
        match bytes.saturating_mul(1000).checked_div(per_second) {
            Some(ms) => ms,
            None => 0,
        }
    }

    /// The byte value of digital silence, used to pad frames.
    pub const fn silence_byte(self) -> u8 {
        match self.encoding {
            AudioEncoding::Mulaw => 0xff,
            AudioEncoding::Alaw => 0xd5,
            AudioEncoding::Pcm16Le => 0,
        }
    }

    /// The format a carrier uses until its stream announces otherwise.
    pub const fn default_for(kind: CarrierKind) -> Self {
        match kind {
            CarrierKind::Twilio | CarrierKind::Plivo | CarrierKind::Telnyx | CarrierKind::Sip => {
                Self::MULAW_8K
            }
            CarrierKind::Exotel => Self::PCM16_8K,
            CarrierKind::Vonage => Self::PCM16_16K,
        }
    }

    /// Reads a carrier's encoding name or content type (`audio/x-mulaw`, `audio/l16;rate=16000`,
    /// `PCMU`, `audio/x-raw`, …); an explicit `rate` wins over a `rate=` parameter.
    pub(crate) fn from_wire(encoding: &str, rate: Option<u32>) -> Result<Self, MediaError> {
        let mut parts = encoding.split(';');
        let base = parts.next().unwrap_or_default().trim();
        let param_rate = parts.find_map(|param| {
            let (key, value) = param.split_once('=')?;
            key.trim()
                .eq_ignore_ascii_case("rate")
                .then(|| value.trim().parse::<u32>().ok())
                .flatten()
        });
        let is = |names: &[&str]| names.iter().any(|n| n.eq_ignore_ascii_case(base));
        let encoding = if is(&[
            "audio/x-mulaw",
            "audio/mulaw",
            "audio/basic",
            "audio/pcmu",
            "pcmu",
            "mulaw",
            "ulaw",
        ]) {
            AudioEncoding::Mulaw
        } else if is(&["audio/x-alaw", "audio/alaw", "audio/pcma", "pcma", "alaw"]) {
            AudioEncoding::Alaw
        } else if is(&[
            "audio/x-l16",
            "audio/l16",
            "audio/x-raw",
            "l16",
            "linear16",
            "pcm",
            "",
        ]) {
            AudioEncoding::Pcm16Le
        } else {
            return Err(MediaError::UnsupportedEncoding(encoding.to_owned()));
        };
        let sample_rate = rate.or(param_rate).unwrap_or(8_000);
        if !(8_000..=48_000).contains(&sample_rate) || !sample_rate.is_multiple_of(1_000) {
            return Err(MediaError::UnsupportedSampleRate(sample_rate));
        }
        Ok(Self::new(encoding, sample_rate))
    }
}

/// What a stream's `start` (Vonage: `websocket:connected`) tells us about the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStart {
    /// The carrier's stream id (Twilio `streamSid`, Telnyx `stream_id`, …); empty for Vonage.
    pub stream_id: String,
    /// The carrier's call id (`callSid`, `callId`, `call_sid`, `call_control_id`, `uuid`).
    pub call_id: Option<String>,
    /// The carrier account the call belongs to, when announced.
    pub account_id: Option<String>,
    /// The calling number, when announced.
    pub from: Option<String>,
    /// The called number, when announced.
    pub to: Option<String>,
    /// Custom parameters in arrival order (Twilio `customParameters`, Plivo `extra_headers`,
    /// Telnyx `custom_parameters` plus `client_state`, Vonage flattened headers).
    pub custom_parameters: Vec<(String, String)>,
    /// The audio format of the stream, inbound and outbound.
    pub format: AudioFormat,
}

impl StreamStart {
    /// The value of the first custom parameter named `name`.
    pub fn custom_parameter(&self, name: &str) -> Option<&str> {
        self.custom_parameters
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// One inbound carrier message, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboundEvent {
    /// The carrier opened the stream (Twilio, Exotel, Telnyx send this before `start`).
    Connected,
    /// The stream started; the codec now knows the stream id and audio format.
    Start(Box<StreamStart>),
    /// Caller audio, written to the parse call's `audio` buffer in the stream's format; after
    /// Telnyx reordering it may hold several consecutive frames.
    Media {
        /// Milliseconds since the stream's audio began, when known.
        timestamp_ms: Option<u64>,
    },
    /// The caller pressed a key (`0`–`9`, `*`, `#`, `A`–`D`).
    Dtmf {
        /// The key.
        digit: char,
    },
    /// A playback acknowledgement: the audio queued before this mark has played (Plivo
    /// `playedStream`, Vonage `websocket:notify`).
    Mark {
        /// The name we gave the mark.
        name: String,
    },
    /// The carrier confirmed a clear (Plivo `clearedAudio`, Vonage `websocket:cleared`).
    Cleared,
    /// The stream ended.
    Stop {
        /// The carrier's reason, when it gives one (Exotel).
        reason: Option<String>,
    },
    /// The carrier reported an error on the stream (Telnyx).
    Error {
        /// The carrier's description.
        message: String,
    },
    /// Nothing to act on: an unknown event, our own track echoed back, or a media frame held
    /// back for reordering.
    Ignored,
}

/// One outbound websocket message, borrowed from an [`Outbound`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboundFrame<'a> {
    /// Send as a text message.
    Text(&'a str),
    /// Send as a binary message.
    Binary(&'a [u8]),
}

#[derive(Debug, Clone, Copy)]
struct FrameSpan {
    binary: bool,
    start: usize,
    end: usize,
}

/// A reusable queue of outbound websocket messages. Encoders append; the caller sends
/// [`frames`](Self::frames) in order, then calls [`clear`](Self::clear) and reuses it.
#[derive(Debug, Clone, Default)]
pub struct Outbound {
    text: String,
    binary: Vec<u8>,
    spans: Vec<FrameSpan>,
}

impl Outbound {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of queued messages.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Drops every queued message, keeping the capacity.
    pub fn clear(&mut self) {
        self.text.clear();
        self.binary.clear();
        self.spans.clear();
    }

    /// The queued messages in send order.
    pub fn frames(&self) -> impl ExactSizeIterator<Item = OutboundFrame<'_>> + '_ {
        self.spans.iter().map(|span| {
            if span.binary {
                OutboundFrame::Binary(&self.binary[span.start..span.end])
            } else {
                OutboundFrame::Text(&self.text[span.start..span.end])
            }
        })
    }

    /// Appends one text message written by `write`.
    pub(crate) fn push_text(&mut self, write: impl FnOnce(&mut String)) {
        let start = self.text.len();
        write(&mut self.text);
        self.spans.push(FrameSpan {
            binary: false,
            start,
            end: self.text.len(),
        });
    }

    /// Appends one binary message made of `parts` followed by `pad` copies of `pad_byte`.
    pub(crate) fn push_binary(&mut self, parts: &[&[u8]], pad: usize, pad_byte: u8) {
        let start = self.binary.len();
        for part in parts {
            self.binary.extend_from_slice(part);
        }
        self.binary.resize(self.binary.len() + pad, pad_byte);
        self.spans.push(FrameSpan {
            binary: true,
            start,
            end: self.binary.len(),
        });
    }
}

/// The per-connection codec for one carrier media stream.
///
/// It is stateful: it remembers the stream id to address outbound messages, the negotiated
/// audio format, Telnyx's reorder window, and outbound audio not yet sent because a carrier
/// needs fixed sizes (Exotel chunks, Vonage frames).
#[derive(Debug)]
pub struct CarrierCodec {
    protocol: Protocol,
}

#[derive(Debug)]
enum Protocol {
    Twilio(twilio::TwilioCodec),
    Plivo(plivo::PlivoCodec),
    Exotel(exotel::ExotelCodec),
    Vonage(vonage::VonageCodec),
    Telnyx(telnyx::TelnyxCodec),
    Sip(sip::SipCodec),
}

macro_rules! dispatch {
    ($self:expr, $codec:ident => $call:expr) => {
        match &mut $self.protocol {
            Protocol::Twilio($codec) => $call,
            Protocol::Plivo($codec) => $call,
            Protocol::Exotel($codec) => $call,
            Protocol::Vonage($codec) => $call,
            Protocol::Telnyx($codec) => $call,
            Protocol::Sip($codec) => $call,
        }
    };
}

macro_rules! dispatch_ref {
    ($self:expr, $codec:ident => $call:expr) => {
        match &$self.protocol {
            Protocol::Twilio($codec) => $call,
            Protocol::Plivo($codec) => $call,
            Protocol::Exotel($codec) => $call,
            Protocol::Vonage($codec) => $call,
            Protocol::Telnyx($codec) => $call,
            Protocol::Sip($codec) => $call,
        }
    };
}

impl CarrierCodec {
    /// A codec for a new connection, using the carrier's default audio format.
    pub fn new(kind: CarrierKind) -> Self {
        let protocol = match kind {
            CarrierKind::Twilio => Protocol::Twilio(twilio::TwilioCodec::default()),
            CarrierKind::Plivo => Protocol::Plivo(plivo::PlivoCodec::default()),
            CarrierKind::Exotel => {
                Protocol::Exotel(exotel::ExotelCodec::new(AudioFormat::PCM16_8K))
            }
            CarrierKind::Vonage => Protocol::Vonage(vonage::VonageCodec::default()),
            CarrierKind::Telnyx => Protocol::Telnyx(telnyx::TelnyxCodec::default()),
            CarrierKind::Sip => Protocol::Sip(sip::SipCodec::default()),
        };
        Self { protocol }
    }

    /// A `sip` codec for the format the SDP answer chose (PCMU or PCMA at 8 kHz), whose keys
    /// go out as telephone events.
    pub fn sip(format: AudioFormat) -> Self {
        Self {
            protocol: Protocol::Sip(sip::SipCodec::new(format)),
        }
    }

    /// A `sip` codec for an SDP answer without `telephone-event`: keys go out as in-band
    /// tones in the audio.
    pub fn sip_without_telephone_events(format: AudioFormat) -> Self {
        Self {
            protocol: Protocol::Sip(sip::SipCodec::new(format).without_telephone_events()),
        }
    }

    /// A codec configured from the websocket URL's query string (without `?`); only Exotel
    /// reads it, for `sample-rate=8000|16000|24000`.
    pub fn with_url_query(kind: CarrierKind, query: &str) -> Result<Self, MediaError> {
        let mut codec = Self::new(kind);
        if let Protocol::Exotel(exotel) = &mut codec.protocol {
            let rate = query
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .find(|(key, _)| *key == "sample-rate" || *key == "sample_rate")
                .map(|(_, value)| {
                    value
                        .parse::<u32>()
                        .map_err(|_| MediaError::Malformed(format!("sample-rate={value}")))
                })
                .transpose()?;
            if let Some(rate) = rate {
                if !matches!(rate, 8_000 | 16_000 | 24_000) {
                    return Err(MediaError::UnsupportedSampleRate(rate));
                }
                *exotel = exotel::ExotelCodec::new(AudioFormat::new(AudioEncoding::Pcm16Le, rate));
            }
        }
        Ok(codec)
    }

    /// The carrier this codec speaks.
    pub fn kind(&self) -> CarrierKind {
        match self.protocol {
            Protocol::Twilio(_) => CarrierKind::Twilio,
            Protocol::Plivo(_) => CarrierKind::Plivo,
            Protocol::Exotel(_) => CarrierKind::Exotel,
            Protocol::Vonage(_) => CarrierKind::Vonage,
            Protocol::Telnyx(_) => CarrierKind::Telnyx,
            Protocol::Sip(_) => CarrierKind::Sip,
        }
    }

    /// The stream's audio format, both directions; final once `Start` has been parsed.
    pub fn audio_format(&self) -> AudioFormat {
        dispatch_ref!(self, codec => codec.format)
    }

    /// The stream id learnt from `Start`, if any.
    pub fn stream_id(&self) -> Option<&str> {
        let id: &str = dispatch_ref!(self, codec => &codec.stream_id);
        (!id.is_empty()).then_some(id)
    }

    /// Parses one inbound text message. `audio` is cleared and, for [`InboundEvent::Media`],
    /// receives the decoded audio.
    pub fn parse_text(
        &mut self,
        text: &str,
        audio: &mut Vec<u8>,
    ) -> Result<InboundEvent, MediaError> {
        audio.clear();
        dispatch!(self, codec => codec.parse_text(text, audio))
    }

    /// Parses one inbound binary message (Vonage and `sip` audio); other carriers never send
    /// binary and get [`MediaError::UnexpectedFrame`].
    pub fn parse_binary(
        &mut self,
        data: &[u8],
        audio: &mut Vec<u8>,
    ) -> Result<InboundEvent, MediaError> {
        audio.clear();
        match &mut self.protocol {
            Protocol::Vonage(vonage) => Ok(vonage.parse_binary(data, audio)),
            Protocol::Sip(sip) => Ok(sip.parse_binary(data, audio)),
            _ => Err(MediaError::UnexpectedFrame("binary message")),
        }
    }

    /// Queues `audio` (in [`audio_format`](Self::audio_format)) for playback. Exotel and Vonage
    /// hold back a remainder that does not fill a chunk or frame until more audio, a mark or
    /// [`flush`](Self::flush).
    pub fn encode_media(&mut self, audio: &[u8], out: &mut Outbound) {
        dispatch!(self, codec => codec.encode_media(audio, out))
    }

    /// Sends any held-back audio, padded with silence to a size the carrier accepts. Call at the
    /// end of an utterance; marks do it implicitly.
    pub fn flush(&mut self, out: &mut Outbound) {
        match &mut self.protocol {
            Protocol::Exotel(exotel) => exotel.flush(out),
            Protocol::Vonage(vonage) => vonage.flush(out),
            _ => {}
        }
    }

    /// Queues a named mark, acknowledged once the audio queued before it has played.
    pub fn encode_mark(&mut self, name: &str, out: &mut Outbound) {
        self.flush(out);
        dispatch!(self, codec => codec.encode_mark(name, out))
    }

    /// Tells the carrier to drop queued audio (barge-in); held-back audio is dropped too.
    pub fn encode_clear(&mut self, out: &mut Outbound) {
        dispatch!(self, codec => codec.encode_clear(out))
    }

    /// Whether keys go out as RFC 4733 telephone events ([`encode_dtmf`](Self::encode_dtmf))
    /// rather than as in-band tones in the audio: only for `sip`, when the SDP answer has a
    /// `telephone-event` payload type.
    pub fn sends_dtmf_events(&self) -> bool {
        match &self.protocol {
            Protocol::Sip(sip) => sip.sends_dtmf_events(),
            _ => false,
        }
    }

    /// Asks for `digits` to be sent as telephone events at this point of playback (`sip`:
    /// a `dtmf <digits>` command; see [`sip`] for the timing). Websocket carriers have no such
    /// command: false, and nothing is written; their keys go out as tones in the audio.
    pub fn encode_dtmf(&mut self, digits: &str, out: &mut Outbound) -> bool {
        match &mut self.protocol {
            Protocol::Sip(sip) => sip.encode_dtmf(digits, out),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carrier_kind_round_trips_through_its_name() {
        for kind in CarrierKind::ALL {
            assert_eq!(kind.as_str().parse::<CarrierKind>().unwrap(), kind);
            assert_eq!(kind.to_string(), kind.as_str());
        }
        assert!(matches!(
            "sinch".parse::<CarrierKind>(),
            Err(MediaError::UnknownCarrier(_))
        ));
    }

    #[test]
    fn carrier_formats_are_read_from_wire_names() {
        let read = |e: &str, r: Option<u32>| AudioFormat::from_wire(e, r).unwrap();
        assert_eq!(read("audio/x-mulaw", Some(8000)), AudioFormat::MULAW_8K);
        assert_eq!(read("audio/x-l16;rate=16000", None), AudioFormat::PCM16_16K);
        assert_eq!(read("audio/l16;rate=16000", None), AudioFormat::PCM16_16K);
        assert_eq!(read("PCMU", Some(8000)), AudioFormat::MULAW_8K);
        assert_eq!(read("PCMA", None), AudioFormat::ALAW_8K);
        assert_eq!(read("L16", Some(24000)), AudioFormat::PCM16_24K);
        assert_eq!(read("audio/x-raw", Some(8000)), AudioFormat::PCM16_8K);
        assert!(AudioFormat::from_wire("audio/opus", None).is_err());
        assert!(AudioFormat::from_wire("PCMU", Some(7)).is_err());
    }

    #[test]
    fn carrier_format_sizes() {
        assert_eq!(AudioFormat::MULAW_8K.bytes_for_ms(20), 160);
        assert_eq!(AudioFormat::PCM16_8K.bytes_for_ms(20), 320);
        assert_eq!(AudioFormat::PCM16_16K.bytes_for_ms(20), 640);
        assert_eq!(AudioFormat::PCM16_16K.ms_for_bytes(640), 20);
    }

    #[test]
    fn carrier_exotel_rate_comes_from_the_url_query() {
        let codec =
            CarrierCodec::with_url_query(CarrierKind::Exotel, "token=abc&sample-rate=16000")
                .unwrap();
        assert_eq!(codec.audio_format(), AudioFormat::PCM16_16K);
        assert!(CarrierCodec::with_url_query(CarrierKind::Exotel, "sample-rate=11025").is_err());
        let twilio =
            CarrierCodec::with_url_query(CarrierKind::Twilio, "sample-rate=16000").unwrap();
        assert_eq!(twilio.audio_format(), AudioFormat::MULAW_8K);
    }

    #[test]
    fn carrier_binary_frames_only_for_vonage() {
        let mut codec = CarrierCodec::new(CarrierKind::Twilio);
        let mut audio = Vec::new();
        assert!(codec.parse_binary(&[0; 4], &mut audio).is_err());
    }
}
