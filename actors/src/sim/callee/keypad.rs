//! The sim callee's keypad: how it presses keys (the `dtmf` event, in-band tones or both)
//! and, as an automated phone menu, the ear that hears the keys the agent presses.

use voxline_media::MediaError;
use voxline_media::dtmf::DtmfDetector;
use voxline_media::g711;

use super::{FRAME_SAMPLES, RATE};

/// How DTMF steps are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DtmfMode {
    /// The `dtmf` event and in-band tones, as a real phone through Twilio.
    #[default]
    Both,
    /// Only tones in the audio.
    InBandOnly,
    /// Only the `dtmf` event.
    EventOnly,
}

/// A menu step's ear: the agent's audio decoded and run through a DTMF detector.
pub(super) struct MenuListener {
    detector: DtmfDetector,
    pcm: Vec<i16>,
    /// The key the menu waits for.
    pub(super) expect: char,
}

impl MenuListener {
    /// An ear for a menu step that expects `expect`.
    pub(super) fn new(expect: char) -> Result<Self, MediaError> {
        Ok(Self {
            detector: DtmfDetector::new(RATE)?,
            pcm: Vec::with_capacity(FRAME_SAMPLES),
            expect,
        })
    }

    /// Decodes one frame of the agent's μ-law audio and returns a key when one is heard.
    pub(super) fn hear(&mut self, mulaw: &[u8]) -> Option<char> {
        self.pcm.resize(mulaw.len(), 0);
        g711::decode_mulaw_into(mulaw, &mut self.pcm);
        self.detector.push(&self.pcm)
    }
}
