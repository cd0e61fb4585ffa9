//! SDP offer/answer for a G.711 call over RTP (RFC 3264 over RFC 4566 bodies),
//! for the SIP carrier: the offer an outbound INVITE carries, the answer to a
//! peer's offer, and what a peer's answer or re-INVITE settles (the codec, the
//! RFC 4733 `telephone-event` payload type, where to send RTP, and whether the
//! peer holds the call).
//!
//! Bodies are parsed with `ezk-sdp-types`; this module is only the negotiation.
//! The bodies we write are small and fixed in shape, so they are formatted
//! here and the tests read them back through the same parser.

use ezk_sdp_types::{
    Direction, MediaDescription, MediaType, SessionDescription, TaggedAddress, TransportProtocol,
};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

/// The 8 kHz G.711 codecs, with their static RTP payload types (RFC 3551).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum G711Codec {
    /// μ-law, payload type 0.
    Pcmu,
    /// A-law, payload type 8.
    Pcma,
}

impl G711Codec {
    /// The static payload type.
    pub const fn payload_type(self) -> u8 {
        match self {
            Self::Pcmu => 0,
            Self::Pcma => 8,
        }
    }

    /// The encoding name in `a=rtpmap`.
    pub const fn encoding(self) -> &'static str {
        match self {
            Self::Pcmu => "PCMU",
            Self::Pcma => "PCMA",
        }
    }

    /// The codec a payload type names, with its rtpmap encoding when one is
    /// given (a static type may come without one).
    fn from_format(payload_type: u8, encoding: Option<&str>) -> Option<Self> {
        match encoding {
            Some(name) if name.eq_ignore_ascii_case("PCMU") => Some(Self::Pcmu),
            Some(name) if name.eq_ignore_ascii_case("PCMA") => Some(Self::Pcma),
            Some(_) => None,
            None => match payload_type {
                0 => Some(Self::Pcmu),
                8 => Some(Self::Pcma),
                _ => None,
            },
        }
    }
}

/// Which way media flows, from the point of view of the side that wrote the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaDirection {
    /// Both ways: a live call.
    SendRecv,
    /// The writer only sends: it holds the call (music on hold).
    SendOnly,
    /// The writer only receives.
    RecvOnly,
    /// Neither: held both ways.
    Inactive,
}

impl MediaDirection {
    /// The direction the other side answers with (RFC 3264 §6.1).
    pub const fn answered(self) -> Self {
        match self {
            Self::SendRecv => Self::SendRecv,
            Self::SendOnly => Self::RecvOnly,
            Self::RecvOnly => Self::SendOnly,
            Self::Inactive => Self::Inactive,
        }
    }

    const fn attribute(self) -> &'static str {
        match self {
            Self::SendRecv => "sendrecv",
            Self::SendOnly => "sendonly",
            Self::RecvOnly => "recvonly",
            Self::Inactive => "inactive",
        }
    }

    const fn from_sdp(direction: Direction) -> Self {
        match direction {
            Direction::SendRecv => Self::SendRecv,
            Direction::SendOnly => Self::SendOnly,
            Direction::RecvOnly => Self::RecvOnly,
            Direction::Inactive => Self::Inactive,
        }
    }
}

/// Our side of the media: where we receive RTP and what we accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalMedia {
    /// The address written into `c=` (the configured public address behind NAT).
    pub address: IpAddr,
    /// Our RTP port for this call.
    pub port: u16,
    /// `o=` session id; stays the same for the call.
    pub session_id: u64,
    /// `o=` version; one more for every new offer or answer in the call.
    pub version: u64,
    /// The codecs we take, in order of preference.
    pub codecs: Vec<G711Codec>,
    /// The dynamic payload type we offer `telephone-event/8000` on (101 by custom).
    pub dtmf_payload_type: u8,
    /// Which way we want media to flow (sendonly to hold the peer).
    pub direction: MediaDirection,
}

/// What an offer and its answer settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// Where the peer wants our RTP; None when it holds with `c=0.0.0.0`.
    pub remote: Option<SocketAddr>,
    /// The one codec both sides use.
    pub codec: G711Codec,
    /// The peer's payload type for RFC 4733 events, when both sides take them.
    pub dtmf_payload_type: Option<u8>,
    /// The peer's direction as it wrote it.
    pub peer_direction: MediaDirection,
    /// The peer's packet time in ms, when it gave one.
    pub ptime_ms: Option<u32>,
}

impl Negotiated {
    /// Whether the peer put the call on hold (sendonly, inactive, or the old `c=0.0.0.0`).
    pub fn peer_holds(&self) -> bool {
        self.remote.is_none()
            || matches!(
                self.peer_direction,
                MediaDirection::SendOnly | MediaDirection::Inactive
            )
    }
}

/// Why a body cannot be used; each message says what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SdpError {
    /// Not SDP.
    #[error("the SDP body does not parse: {0}")]
    Parse(String),
    /// No audio stream over plain RTP with a port.
    #[error("the SDP body offers no audio over RTP/AVP")]
    NoAudio,
    /// Audio, but none of our codecs.
    #[error("the SDP body offers none of our codecs (PCMU, PCMA); it offered payload types {0}")]
    NoCommonCodec(String),
    /// No `c=` line for the audio, or a host name where an address belongs.
    #[error("the SDP body gives no IP address for its audio")]
    NoAddress,
}

/// The first usable audio stream of `sdp`: plain RTP with a port (a port of
/// 0 refuses a stream, RFC 3264 §6).
fn audio(sdp: &SessionDescription) -> Option<&MediaDescription> {
    sdp.media_descriptions.iter().find(|m| {
        m.media.media_type == MediaType::Audio
            && m.media.port != 0
            && matches!(
                m.media.proto,
                TransportProtocol::RtpAvp | TransportProtocol::RtpAvpf
            )
    })
}

fn parse(body: &str) -> Result<SessionDescription, SdpError> {
    SessionDescription::parse(&bytesstr::BytesStr::from(body))
        .map_err(|err| SdpError::Parse(err.to_string()))
}

/// The formats a stream lists, with their rtpmap encoding and clock rate when given.
fn formats(media: &MediaDescription) -> impl Iterator<Item = (u8, Option<(&str, u32)>)> + '_ {
    media.media.fmts.iter().map(move |pt| {
        let map = media
            .rtpmap
            .iter()
            .find(|m| m.payload == *pt)
            .map(|m| (m.encoding.as_ref(), m.clock_rate));
        (*pt, map)
    })
}

/// The peer's audio stream as its body describes it.
#[derive(Debug)]
struct PeerStream {
    /// Where it receives RTP; None for the old `c=0.0.0.0` hold.
    remote: Option<SocketAddr>,
    /// Its G.711 codecs in its order of preference, with its payload types.
    codecs: Vec<(u8, G711Codec)>,
    /// Its `telephone-event/8000` payload type.
    dtmf: Option<u8>,
    /// Its direction.
    direction: MediaDirection,
    /// Its `a=ptime`.
    ptime: Option<u32>,
}

/// Reads the peer's stream `media` of `sdp`.
fn peer_stream(sdp: &SessionDescription, media: &MediaDescription) -> Result<PeerStream, SdpError> {
    let connection = media
        .connection
        .as_ref()
        .or(sdp.connection.as_ref())
        .ok_or(SdpError::NoAddress)?;
    let ip: IpAddr = match &connection.address {
        TaggedAddress::IP4(ip) => (*ip).into(),
        TaggedAddress::IP6(ip) => (*ip).into(),
        TaggedAddress::IP4FQDN(_) | TaggedAddress::IP6FQDN(_) => return Err(SdpError::NoAddress),
    };
    // RFC 2543's hold: an unspecified address means "send nothing".
    let remote = (!ip.is_unspecified()).then(|| SocketAddr::new(ip, media.media.port));
    let mut codecs = Vec::new();
    let mut dtmf = None;
    for (pt, map) in formats(media) {
        match map {
            Some((name, 8000)) if name.eq_ignore_ascii_case("telephone-event") => {
                dtmf.get_or_insert(pt);
            }
            Some((name, rate)) => {
                if rate == 8000
                    && let Some(codec) = G711Codec::from_format(pt, Some(name))
                {
                    codecs.push((pt, codec));
                }
            }
            None => {
                if let Some(codec) = G711Codec::from_format(pt, None) {
                    codecs.push((pt, codec));
                }
            }
        }
    }
    // The parser gives a stream the session's direction unless it has its own (RFC 4566 §6).
    let direction = media.direction;
    let ptime = media
        .attributes
        .iter()
        .chain(sdp.attributes.iter())
        .find(|a| a.name == "ptime")
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.trim().parse().ok());
    Ok(PeerStream {
        remote,
        codecs,
        dtmf,
        direction: MediaDirection::from_sdp(direction),
        ptime,
    })
}

/// Writes a body for `local` listing `codecs` (payload type, codec) and the DTMF type.
fn write_body(local: &LocalMedia, codecs: &[(u8, G711Codec)], dtmf: Option<u8>) -> String {
    let family = if local.address.is_ipv6() {
        "IP6"
    } else {
        "IP4"
    };
    let mut fmts = String::new();
    for (pt, _) in codecs {
        let _ = write!(fmts, " {pt}");
    }
    if let Some(pt) = dtmf {
        let _ = write!(fmts, " {pt}");
    }
    let mut body = format!(
        "v=0\r\no=voxline {id} {version} IN {family} {addr}\r\ns=voxline\r\nc=IN {family} {addr}\r\nt=0 0\r\nm=audio {port} RTP/AVP{fmts}\r\n",
        id = local.session_id,
        version = local.version,
        addr = local.address,
        port = local.port,
    );
    for (pt, codec) in codecs {
        let _ = write!(body, "a=rtpmap:{pt} {}/8000\r\n", codec.encoding());
    }
    if let Some(pt) = dtmf {
        let _ = write!(
            body,
            "a=rtpmap:{pt} telephone-event/8000\r\na=fmtp:{pt} 0-16\r\n"
        );
    }
    let _ = write!(body, "a=ptime:20\r\na={}\r\n", local.direction.attribute());
    body
}

/// The offer an outbound INVITE (or our re-INVITE) carries.
pub fn offer(local: &LocalMedia) -> String {
    let codecs: Vec<(u8, G711Codec)> = local
        .codecs
        .iter()
        .map(|c| (c.payload_type(), *c))
        .collect();
    write_body(local, &codecs, Some(local.dtmf_payload_type))
}

/// What the peer's answer to our [`offer`] settles: the first codec it kept
/// that we offered, and its DTMF type if it kept ours.
pub fn read_answer(answer: &str, local: &LocalMedia) -> Result<Negotiated, SdpError> {
    let sdp = parse(answer)?;
    let media = audio(&sdp).ok_or(SdpError::NoAudio)?;
    let peer = peer_stream(&sdp, media)?;
    let codec = peer
        .codecs
        .iter()
        .map(|(_, c)| *c)
        .find(|c| local.codecs.contains(c))
        .ok_or_else(|| no_common(media))?;
    Ok(Negotiated {
        remote: peer.remote,
        codec,
        dtmf_payload_type: peer.dtmf,
        peer_direction: peer.direction,
        ptime_ms: peer.ptime,
    })
}

/// Our answer to a peer's offer (an inbound INVITE or a re-INVITE), and what
/// it settles: the first codec in the peer's order that we take, on the
/// peer's payload type, and the peer's `telephone-event` type if it offered
/// one. The answer's direction mirrors the peer's (RFC 3264 §6.1) unless we
/// hold ourselves.
pub fn answer(offer: &str, local: &LocalMedia) -> Result<(String, Negotiated), SdpError> {
    let sdp = parse(offer)?;
    let media = audio(&sdp).ok_or(SdpError::NoAudio)?;
    let peer = peer_stream(&sdp, media)?;
    let chosen = peer
        .codecs
        .iter()
        .copied()
        .find(|(_, c)| local.codecs.contains(c))
        .ok_or_else(|| no_common(media))?;
    let ours = LocalMedia {
        direction: match local.direction {
            MediaDirection::SendRecv => peer.direction.answered(),
            held => held,
        },
        ..local.clone()
    };
    let body = write_body(&ours, &[chosen], peer.dtmf);
    Ok((
        body,
        Negotiated {
            remote: peer.remote,
            codec: chosen.1,
            dtmf_payload_type: peer.dtmf,
            peer_direction: peer.direction,
            ptime_ms: peer.ptime,
        },
    ))
}

fn no_common(media: &MediaDescription) -> SdpError {
    let listed: Vec<String> = media.media.fmts.iter().map(u8::to_string).collect();
    SdpError::NoCommonCodec(listed.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn local() -> LocalMedia {
        LocalMedia {
            address: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)),
            port: 40_000,
            session_id: 42,
            version: 1,
            codecs: vec![G711Codec::Pcmu, G711Codec::Pcma],
            dtmf_payload_type: 101,
            direction: MediaDirection::SendRecv,
        }
    }

    /// An offer in the form Twilio's Elastic SIP Trunking sends on an inbound call.
    const TWILIO_OFFER: &str = "v=0\r\no=root 1376546355 1376546355 IN IP4 54.172.60.1\r\n\
        s=Twilio Media Gateway\r\nc=IN IP4 54.172.60.1\r\nt=0 0\r\n\
        m=audio 17098 RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\n\
        a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-16\r\na=ptime:20\r\n\
        a=maxptime:150\r\na=sendrecv\r\n";

    /// An offer in the form baresip sends, A-law first and DTMF on 97.
    const BARESIP_OFFER: &str = "v=0\r\no=- 1386545745 2226236463 IN IP4 127.0.0.1\r\ns=-\r\n\
        c=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 10230 RTP/AVP 8 0 97\r\n\
        a=rtpmap:8 PCMA/8000\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:97 telephone-event/8000\r\n\
        a=fmtp:97 0-15\r\na=sendrecv\r\na=label:1\r\na=rtcp-rsize\r\na=ptime:20\r\n";

    #[test]
    fn our_offer_parses_and_lists_both_codecs_and_dtmf() {
        let body = offer(&local());
        let sdp = parse(&body).unwrap();
        let media = audio(&sdp).unwrap();
        assert_eq!(media.media.port, 40_000);
        assert_eq!(media.media.fmts, vec![0, 8, 101]);
        let peer = peer_stream(&sdp, media).unwrap();
        assert_eq!(peer.remote, Some("203.0.113.7:40000".parse().unwrap()));
        assert_eq!(
            peer.codecs,
            vec![(0, G711Codec::Pcmu), (8, G711Codec::Pcma)]
        );
        assert_eq!(peer.dtmf, Some(101));
        assert_eq!(peer.direction, MediaDirection::SendRecv);
        assert_eq!(peer.ptime, Some(20));
    }

    #[test]
    fn an_inbound_twilio_offer_is_answered_with_pcmu_and_its_dtmf_type() {
        let (body, settled) = answer(TWILIO_OFFER, &local()).unwrap();
        assert_eq!(settled.codec, G711Codec::Pcmu);
        assert_eq!(settled.dtmf_payload_type, Some(101));
        assert_eq!(settled.remote, Some("54.172.60.1:17098".parse().unwrap()));
        assert_eq!(settled.ptime_ms, Some(20));
        assert!(!settled.peer_holds());
        assert!(body.contains("m=audio 40000 RTP/AVP 0 101\r\n"), "{body}");
        assert!(body.contains("a=sendrecv"), "{body}");
        parse(&body).unwrap();
    }

    #[test]
    fn the_peers_codec_order_and_payload_types_are_kept() {
        let (body, settled) = answer(BARESIP_OFFER, &local()).unwrap();
        assert_eq!(settled.codec, G711Codec::Pcma, "the offerer's first choice");
        assert_eq!(settled.dtmf_payload_type, Some(97));
        assert!(body.contains("m=audio 40000 RTP/AVP 8 97\r\n"), "{body}");
        assert!(body.contains("a=rtpmap:97 telephone-event/8000"), "{body}");
        // A side that takes only μ-law answers with it.
        let mulaw_only = LocalMedia {
            codecs: vec![G711Codec::Pcmu],
            ..local()
        };
        let (_, settled) = answer(BARESIP_OFFER, &mulaw_only).unwrap();
        assert_eq!(settled.codec, G711Codec::Pcmu);
    }

    #[test]
    fn a_hold_reinvite_is_seen_both_ways() {
        let sendonly = TWILIO_OFFER.replace("a=sendrecv", "a=sendonly");
        let (body, settled) = answer(&sendonly, &local()).unwrap();
        assert!(settled.peer_holds());
        assert!(body.contains("a=recvonly"), "{body}");
        let old_style = TWILIO_OFFER.replace("c=IN IP4 54.172.60.1", "c=IN IP4 0.0.0.0");
        let (_, settled) = answer(&old_style, &local()).unwrap();
        assert_eq!(settled.remote, None);
        assert!(settled.peer_holds());
        // Our own hold: we offer sendonly whatever the peer wrote.
        let holding = LocalMedia {
            direction: MediaDirection::SendOnly,
            ..local()
        };
        assert!(offer(&holding).contains("a=sendonly"));
        let (body, _) = answer(TWILIO_OFFER, &holding).unwrap();
        assert!(body.contains("a=sendonly"), "{body}");
    }

    #[test]
    fn an_answer_settles_the_codec_it_kept() {
        let reply = "v=0\r\no=- 1 2 IN IP4 10.0.0.9\r\ns=-\r\nc=IN IP4 10.0.0.9\r\nt=0 0\r\n\
            m=audio 30000 RTP/AVP 8 101\r\na=rtpmap:8 PCMA/8000\r\n\
            a=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\n";
        let settled = read_answer(reply, &local()).unwrap();
        assert_eq!(settled.codec, G711Codec::Pcma);
        assert_eq!(settled.dtmf_payload_type, Some(101));
        assert_eq!(settled.remote, Some("10.0.0.9:30000".parse().unwrap()));
        // Static payload types may come without an rtpmap.
        let bare = "v=0\r\no=- 1 2 IN IP4 10.0.0.9\r\ns=-\r\nt=0 0\r\n\
            m=audio 30000 RTP/AVP 0\r\nc=IN IP4 10.0.0.9\r\n";
        assert_eq!(read_answer(bare, &local()).unwrap().codec, G711Codec::Pcmu);
    }

    #[test]
    fn bodies_we_cannot_use_are_refused_saying_why() {
        let g722 = TWILIO_OFFER
            .replace("RTP/AVP 0 101", "RTP/AVP 9 101")
            .replace("a=rtpmap:0 PCMU/8000", "a=rtpmap:9 G722/8000");
        assert_eq!(
            answer(&g722, &local()).unwrap_err(),
            SdpError::NoCommonCodec("9 101".into())
        );
        let video_only = "v=0\r\no=- 1 2 IN IP4 10.0.0.9\r\ns=-\r\nc=IN IP4 10.0.0.9\r\nt=0 0\r\n\
            m=video 30000 RTP/AVP 96\r\na=rtpmap:96 VP8/90000\r\n";
        assert_eq!(answer(video_only, &local()).unwrap_err(), SdpError::NoAudio);
        let refused_stream = TWILIO_OFFER.replace("m=audio 17098", "m=audio 0");
        assert_eq!(
            answer(&refused_stream, &local()).unwrap_err(),
            SdpError::NoAudio
        );
        let no_address = TWILIO_OFFER.replace("c=IN IP4 54.172.60.1\r\n", "");
        assert_eq!(
            answer(&no_address, &local()).unwrap_err(),
            SdpError::NoAddress
        );
        assert!(matches!(
            answer("hello", &local()),
            Err(SdpError::Parse(_)) | Err(SdpError::NoAudio)
        ));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bodies_never_panic(body in "\\PC{0,400}") {
            let _ = answer(&body, &local());
            let _ = read_answer(&body, &local());
        }
    }
}
