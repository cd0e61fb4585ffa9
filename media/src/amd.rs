//! Answering-machine detection from the callee's audio alone.
//!
//! Two clues, both from what a phone line carries in the first seconds of a call:
//! - **How the callee talks.** A person answers with a short "hello?" (rarely more than
//!   1.5 s) and then waits for a reply; a machine plays a 2.5–6 s greeting with only short
//!   gaps. Speech is segmented with the crate's [`VoiceActivityDetector`] (its periodicity
//!   detector: voiced sounds); a stretch of
//!   speech longer than `machine_greeting_ms` that never stops for `reply_pause_ms` is a
//!   machine, a stop that long after some speech is a person waiting.
//! - **The beep.** A steady tone (a bank of Goertzel filters every 25 Hz from 400 to
//!   2175 Hz, 20 ms blocks) that carries most of each block's energy at the same frequency
//!   for at least `beep_min_ms`, and is followed by quiet. A vowel spreads its energy over
//!   many harmonics, so it is not pure; a tone inside speech is followed by more speech,
//!   so it is not a beep.
//!
//! The detector works on 20 ms analysis frames whatever slice lengths it is fed, keeps all
//! its state in fixed-size fields, and does not allocate in [`AnsweringMachineDetector::push`].

use crate::error::MediaError;
use crate::goertzel::{self, BANK_PASS};
use crate::vad::{VadConfig, VoiceActivityDetector};

/// Analysis frame length in milliseconds.
const FRAME_MS: u32 = 20;
/// Samples in one frame at the highest supported rate (16 kHz).
const MAX_FRAME_SAMPLES: usize = 320;
/// Lowest beep frequency searched, in Hz.
const BEEP_LOWEST_HZ: f32 = 400.0;
/// Spacing of the beep filters in Hz: half the 50 Hz resolution of a 20 ms block, so a tone
/// between two filters still gives one of them at least 80 % of its energy.
const BEEP_STEP_HZ: f32 = 25.0;
/// Passes of the beep bank, each of `goertzel::BANK_PASS` filters: 72 filters, 400–2175 Hz.
const BEEP_PASSES: usize = 3;
/// Share of a block's energy the strongest filter must hold for the block to be a tone.
/// A pure tone gives 0.8–1.0 (less with noise); a vowel with one strong low harmonic can
/// reach it too, but only for a few blocks, far from a beep's length.
const MIN_TONE_PURITY: f32 = 0.7;
/// Quietest block that can be a beep, as mean-square energy in dBFS (full-scale sine: -3).
const MIN_TONE_DBFS: f32 = -40.0;
/// Filters a beep's frequency may wander from the one it started on (25 Hz each).
const MAX_TONE_DRIFT_FILTERS: usize = 1;
/// Quiet after a tone that shows it was a beep (the machine now records), not a sound
/// inside speech.
const BEEP_QUIET_MS: u32 = 160;
/// Speech a stretch needs before it counts as an utterance; shorter is a click or a breath.
const MIN_UTTERANCE_MS: u32 = 120;

/// The VAD's periodicity detector alone: a greeting or a "hello?" is found by its voiced
/// sounds, and the unvoiced ones between them are gaps far shorter than a reply-pause, so
/// the neural model (ten times dearer per frame) would not change a verdict.
fn vad_config() -> VadConfig {
    VadConfig {
        use_neural: false,
        ..VadConfig::default()
    }
}

/// Tunables; `Default` is for 8 kHz (set `sample_rate` for 16 kHz, the rest holds).
#[derive(Debug, Clone, Copy)]
pub struct AmdSettings {
    /// 8000 or 16000 Hz; any other rate makes [`AnsweringMachineDetector::new`] fail.
    pub sample_rate: u32,
    /// Speech this long with no reply-pause means a machine's greeting. Measured from the
    /// first voiced frame of the stretch, so its own short gaps count.
    pub machine_greeting_ms: u32,
    /// Silence after speech this long shows a person waiting for a reply. A machine's
    /// greeting with a longer gap inside its first `machine_greeting_ms` reads as a person.
    pub reply_pause_ms: u32,
    /// No verdict by then with nobody talking (silence, or only noise) means a person. A
    /// stretch of speech still running then is judged as usual, by its length or its pause.
    pub decision_ms: u32,
    /// Shortest steady tone that counts as a beep (measured in 20 ms blocks, so a tone a
    /// block shorter may pass).
    pub beep_min_ms: u32,
    /// After a machine verdict, this much silence with no beep means the greeting ended.
    pub greeting_end_silence_ms: u32,
    /// After a machine verdict, stop waiting for a beep or the end after this long (counted
    /// from the verdict).
    pub give_up_ms: u32,
}

impl Default for AmdSettings {
    fn default() -> Self {
        Self {
            sample_rate: 8000,
            machine_greeting_ms: 2500,
            reply_pause_ms: 800,
            decision_ms: 4000,
            beep_min_ms: 200,
            greeting_end_silence_ms: 2000,
            give_up_ms: 20_000,
        }
    }
}

/// What the detector has concluded so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmdEvent {
    /// A person: reported once, `reply_pause_ms` after they stopped talking (or at
    /// `decision_ms` if nobody talked); the detector goes quiet afterwards.
    Human,
    /// An answering machine's greeting is playing (reported `machine_greeting_ms` into it).
    Machine,
    /// The beep ended: record now. Reported 160–180 ms after the beep's end, once the quiet
    /// after it shows it was not a sound inside speech. May come without a prior `Machine`
    /// (a short greeting, then a beep), which means the same as `Machine` then `Beep`.
    Beep,
    /// A machine's greeting ended in silence with no beep heard, or `give_up_ms` passed.
    GreetingEnded,
}

/// Where the detector is in its decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No verdict yet.
    Listening,
    /// A machine's greeting is playing; waiting for its beep or its end.
    Greeting {
        /// Frame time of the `Machine` verdict, in ms.
        since_ms: u64,
    },
    /// Nothing more to say.
    Done,
}

/// A stretch of speech whose gaps were all shorter than a reply-pause.
#[derive(Debug, Clone, Copy)]
struct Utterance {
    /// Frame time its first speech frame began, in ms.
    start_ms: u64,
    /// Speech inside it, in ms.
    speech_ms: u32,
}

/// Follows steady tones block by block and decides when one was a beep.
#[derive(Debug, Clone, Copy)]
struct BeepTracker {
    /// Filter the current tone started on.
    filter: usize,
    /// Consecutive tone blocks at (about) that filter.
    blocks: u32,
    /// Blocks a tone must last to be a beep.
    min_blocks: u32,
    /// A long enough tone ended: quiet blocks heard since.
    quiet_after: Option<u32>,
    /// Quiet blocks that confirm a beep.
    quiet_blocks: u32,
}

impl BeepTracker {
    fn new(beep_min_ms: u32) -> Self {
        Self {
            filter: 0,
            blocks: 0,
            min_blocks: beep_min_ms.div_ceil(FRAME_MS).max(1),
            quiet_after: None,
            quiet_blocks: BEEP_QUIET_MS.div_ceil(FRAME_MS),
        }
    }

    /// Takes one block's tone (the filter holding it) and whether the block was quiet;
    /// true when a beep is confirmed.
    fn update(&mut self, tone: Option<usize>, quiet: bool) -> bool {
        match tone {
            Some(filter)
                if self.blocks > 0 && filter.abs_diff(self.filter) <= MAX_TONE_DRIFT_FILTERS =>
            {
                self.blocks += 1;
                self.quiet_after = None;
                false
            }
            Some(filter) => {
                self.filter = filter;
                self.blocks = 1;
                self.quiet_after = None;
                false
            }
            None => {
                let just_ended = self.blocks >= self.min_blocks;
                if just_ended {
                    self.quiet_after = Some(0);
                }
                self.blocks = 0;
                match self.quiet_after {
                    Some(heard) if quiet => {
                        let heard = heard + 1;
                        self.quiet_after = Some(heard);
                        heard >= self.quiet_blocks
                    }
                    // The block the tone ended in holds its tail: neither tone nor quiet.
                    Some(0) if just_ended => false,
                    Some(_) => {
                        // Sound right after the tone: a sound inside speech, not a beep.
                        self.quiet_after = None;
                        false
                    }
                    None => false,
                }
            }
        }
    }

    /// A long enough tone is playing or has just ended.
    fn is_pending(&self) -> bool {
        self.blocks >= self.min_blocks || self.quiet_after.is_some()
    }
}

/// Streaming answering-machine detector for the callee's side of one call.
#[derive(Debug)]
pub struct AnsweringMachineDetector {
    settings: AmdSettings,
    vad: VoiceActivityDetector,
    frame_len: usize,
    frame: [i16; MAX_FRAME_SAMPLES],
    filled: usize,
    block: [f32; MAX_FRAME_SAMPLES],
    coefficients: [[f32; BANK_PASS]; BEEP_PASSES],
    min_tone_energy: f32,
    samples_pushed: u64,
    frame_time_ms: u64,
    phase: Phase,
    utterance: Option<Utterance>,
    silence_ms: u32,
    beep: BeepTracker,
    queued: Option<AmdEvent>,
}

impl AnsweringMachineDetector {
    /// A detector with `settings`; fails on a sample rate other than 8000 or 16000 Hz.
    pub fn new(settings: AmdSettings) -> Result<Self, MediaError> {
        let rate = settings.sample_rate;
        if rate != 8000 && rate != 16000 {
            return Err(MediaError::UnsupportedSampleRate(rate));
        }
        let frame_len = (rate / 1000 * FRAME_MS) as usize;
        let coefficients = std::array::from_fn(|pass| {
            std::array::from_fn(|k| {
                let filter = pass * BANK_PASS + k;
                goertzel::coefficient(BEEP_LOWEST_HZ + BEEP_STEP_HZ * filter as f32, rate as f32)
            })
        });
        // Block energy of the quietest tone, in the same units as Σx² over a frame of i16.
        let min_tone_energy =
            10f32.powf(MIN_TONE_DBFS / 10.0) * 32768.0 * 32768.0 * frame_len as f32;
        Ok(Self {
            settings,
            vad: VoiceActivityDetector::with_config(rate, vad_config())?,
            frame_len,
            frame: [0; MAX_FRAME_SAMPLES],
            filled: 0,
            block: [0.0; MAX_FRAME_SAMPLES],
            coefficients,
            min_tone_energy,
            samples_pushed: 0,
            frame_time_ms: 0,
            phase: Phase::Listening,
            utterance: None,
            silence_ms: 0,
            beep: BeepTracker::new(settings.beep_min_ms),
            queued: None,
        })
    }

    /// The settings this detector runs with.
    pub fn settings(&self) -> &AmdSettings {
        &self.settings
    }

    /// Feeds the next mono PCM samples (any length; 20 ms frames typical); returns at most
    /// one event. If one call completes two events (only possible with long slices), the
    /// second is returned by the next call.
    pub fn push(&mut self, samples: &[i16]) -> Option<AmdEvent> {
        self.samples_pushed += samples.len() as u64;
        let mut reported = self.queued.take();
        if self.phase == Phase::Done {
            return reported;
        }
        let mut rest = samples;
        while !rest.is_empty() && self.phase != Phase::Done {
            let take = (self.frame_len - self.filled).min(rest.len());
            self.frame[self.filled..self.filled + take].copy_from_slice(&rest[..take]);
            self.filled += take;
            rest = &rest[take..];
            if self.filled == self.frame_len {
                self.filled = 0;
                if let Some(event) = self.analyze_frame() {
                    if reported.is_none() {
                        reported = Some(event);
                    } else {
                        self.queued = Some(event);
                    }
                }
            }
        }
        reported
    }

    /// Milliseconds of audio pushed so far.
    pub fn elapsed_ms(&self) -> u64 {
        self.samples_pushed * 1000 / u64::from(self.settings.sample_rate)
    }

    /// True once it has nothing more to say (after `Human`, `Beep` or `GreetingEnded`).
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done && self.queued.is_none()
    }

    /// Classifies the full frame in `self.frame` and advances the decision.
    fn analyze_frame(&mut self) -> Option<AmdEvent> {
        self.frame_time_ms += u64::from(FRAME_MS);
        let now = self.frame_time_ms;
        let frame = &self.frame[..self.frame_len];
        let is_speech = self.vad.analyze(frame).is_speech;
        let tone = self.tone_filter();
        // A tone is sound even where the VAD does not call it speech, so a beep never
        // counts as the pause of a person waiting.
        let sound = is_speech || tone.is_some();
        if self.beep.update(tone, !sound) {
            self.phase = Phase::Done;
            return Some(AmdEvent::Beep);
        }
        if sound {
            self.silence_ms = 0;
        } else {
            self.silence_ms = self.silence_ms.saturating_add(FRAME_MS);
        }
        match self.phase {
            Phase::Listening => self.listen(now, is_speech),
            Phase::Greeting { since_ms } => {
                let waited = now.saturating_sub(since_ms);
                if waited >= u64::from(self.settings.give_up_ms)
                    || (self.silence_ms >= self.settings.greeting_end_silence_ms
                        && !self.beep.is_pending())
                {
                    self.phase = Phase::Done;
                    return Some(AmdEvent::GreetingEnded);
                }
                None
            }
            Phase::Done => None,
        }
    }

    /// Before a verdict: follows utterances and the pauses between them.
    fn listen(&mut self, now: u64, is_speech: bool) -> Option<AmdEvent> {
        let settings = self.settings;
        if self.silence_ms == 0 {
            let utterance = self.utterance.get_or_insert(Utterance {
                start_ms: now - u64::from(FRAME_MS),
                speech_ms: 0,
            });
            if is_speech {
                utterance.speech_ms += FRAME_MS;
            }
            if now - utterance.start_ms >= u64::from(settings.machine_greeting_ms)
                && utterance.speech_ms >= MIN_UTTERANCE_MS
            {
                self.phase = Phase::Greeting { since_ms: now };
                return Some(AmdEvent::Machine);
            }
        } else if self.silence_ms >= settings.reply_pause_ms
            && !self.beep.is_pending()
            && let Some(utterance) = self.utterance.take()
            && utterance.speech_ms >= MIN_UTTERANCE_MS
        {
            // A stretch with less speech than that was a click or a breath: forgotten.
            self.phase = Phase::Done;
            return Some(AmdEvent::Human);
        }
        if self.utterance.is_none() && now >= u64::from(settings.decision_ms) {
            self.phase = Phase::Done;
            return Some(AmdEvent::Human);
        }
        None
    }

    /// The beep filter holding most of this frame's energy, if the frame is a loud, pure tone.
    fn tone_filter(&mut self) -> Option<usize> {
        let frame = &self.frame[..self.frame_len];
        let block = &mut self.block[..self.frame_len];
        let mut total = 0.0f32;
        for (slot, &sample) in block.iter_mut().zip(frame) {
            let x = f32::from(sample);
            *slot = x;
            total += x * x;
        }
        if total < self.min_tone_energy {
            return None;
        }
        let (mut best, mut best_energy) = (0, 0.0f32);
        for (pass, coefficients) in self.coefficients.iter().enumerate() {
            for (k, &energy) in goertzel::bank(block, coefficients).iter().enumerate() {
                if energy > best_energy {
                    best = pass * BANK_PASS + k;
                    best_energy = energy;
                }
            }
        }
        (best_energy >= MIN_TONE_PURITY * total).then_some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{SpeechLikeGenerator, ToneGenerator, WhiteNoiseGenerator};

    /// Builds call audio at 8 kHz piece by piece, over a little line noise.
    struct Audio {
        samples: Vec<i16>,
        speech: SpeechLikeGenerator,
    }

    impl Audio {
        fn new() -> Self {
            Self {
                samples: Vec::new(),
                speech: SpeechLikeGenerator::new(8000, 7),
            }
        }

        fn piece(&mut self, ms: u32) -> &mut [i16] {
            let start = self.samples.len();
            self.samples.resize(start + (ms * 8) as usize, 0);
            &mut self.samples[start..]
        }

        fn speech(mut self, ms: u32) -> Self {
            let mut speech = self.speech.clone();
            speech.fill(self.piece(ms));
            self.speech = speech;
            self
        }

        fn tone(mut self, hz: f32, ms: u32) -> Self {
            ToneGenerator::new(8000, hz, -10.0).fill(self.piece(ms));
            self
        }

        fn silence(mut self, ms: u32) -> Self {
            self.piece(ms);
            self
        }

        fn with_noise(mut self) -> Vec<i16> {
            WhiteNoiseGenerator::new(11, -55.0).add_to(&mut self.samples);
            self.samples
        }
    }

    /// Pushes 20 ms frames; returns each event with the ms of audio pushed when it came.
    fn events(samples: &[i16], settings: AmdSettings) -> Vec<(AmdEvent, u64)> {
        let mut detector = AnsweringMachineDetector::new(settings).unwrap();
        let mut events = Vec::new();
        for frame in samples.chunks(160) {
            if let Some(event) = detector.push(frame) {
                events.push((event, detector.elapsed_ms()));
            }
        }
        events
    }

    #[test]
    fn bank_covers_400_to_2175_hz() {
        let filters = BEEP_PASSES * BANK_PASS;
        let top = BEEP_LOWEST_HZ + BEEP_STEP_HZ * (filters - 1) as f32;
        assert_eq!((filters, top), (72, 2175.0));
    }

    #[test]
    fn rejects_unsupported_rate() {
        for sample_rate in [0, 11_025, 44_100, 48_000] {
            let settings = AmdSettings {
                sample_rate,
                ..AmdSettings::default()
            };
            assert!(
                AnsweringMachineDetector::new(settings).is_err(),
                "{sample_rate}"
            );
        }
    }

    #[test]
    fn the_sim_machine_is_a_machine_then_a_beep() {
        // What the sim callee plays: 3.5 s of speech-like greeting, at once a 1 kHz
        // 500 ms beep, then digital silence.
        let audio = Audio::new()
            .speech(3500)
            .tone(1000.0, 500)
            .silence(2000)
            .samples;
        let events = events(&audio, AmdSettings::default());
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0].0, AmdEvent::Machine);
        assert!(events[0].1 <= 3000, "{events:?}");
        assert_eq!(events[1].0, AmdEvent::Beep);
        assert!((4000..=4300).contains(&events[1].1), "{events:?}");
    }

    #[test]
    fn a_short_hello_then_a_pause_is_a_person() {
        let audio = Audio::new()
            .silence(400)
            .speech(700)
            .silence(3000)
            .with_noise();
        let events = events(&audio, AmdSettings::default());
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].0, AmdEvent::Human);
        assert!((1800..=2100).contains(&events[0].1), "{events:?}");
    }

    #[test]
    fn silence_until_the_decision_time_is_a_person() {
        let audio = Audio::new().silence(6000).with_noise();
        assert_eq!(
            events(&audio, AmdSettings::default()),
            [(AmdEvent::Human, 4000)]
        );
    }

    #[test]
    fn a_greeting_that_ends_without_a_beep_ends_after_the_silence() {
        let audio = Audio::new().speech(4000).silence(3000).with_noise();
        let events = events(&audio, AmdSettings::default());
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0].0, AmdEvent::Machine);
        assert_eq!(events[1].0, AmdEvent::GreetingEnded);
        assert!((5700..=6200).contains(&events[1].1), "{events:?}");
    }

    #[test]
    fn a_tone_shorter_than_the_minimum_is_not_a_beep() {
        let audio = Audio::new()
            .speech(3000)
            .tone(1000.0, 140)
            .silence(3000)
            .with_noise();
        let kinds: Vec<AmdEvent> = events(&audio, AmdSettings::default())
            .into_iter()
            .map(|(e, _)| e)
            .collect();
        assert_eq!(kinds, [AmdEvent::Machine, AmdEvent::GreetingEnded]);
    }

    #[test]
    fn a_tone_followed_by_speech_is_not_a_beep() {
        let audio = Audio::new()
            .speech(3000)
            .tone(1000.0, 400)
            .speech(1000)
            .silence(3000)
            .with_noise();
        let kinds: Vec<AmdEvent> = events(&audio, AmdSettings::default())
            .into_iter()
            .map(|(e, _)| e)
            .collect();
        assert_eq!(kinds, [AmdEvent::Machine, AmdEvent::GreetingEnded]);
    }

    #[test]
    fn beeps_anywhere_in_the_bank_are_found() {
        for hz in [400.0, 440.0, 987.0, 1000.0, 1412.5, 2100.0, 2175.0] {
            let audio = Audio::new()
                .speech(3000)
                .tone(hz, 250)
                .silence(1000)
                .with_noise();
            let kinds: Vec<AmdEvent> = events(&audio, AmdSettings::default())
                .into_iter()
                .map(|(e, _)| e)
                .collect();
            assert_eq!(kinds, [AmdEvent::Machine, AmdEvent::Beep], "{hz} Hz");
        }
    }

    #[test]
    fn a_beep_with_no_greeting_is_reported_alone() {
        let audio = Audio::new()
            .silence(600)
            .tone(1000.0, 400)
            .silence(2000)
            .with_noise();
        let events = events(&audio, AmdSettings::default());
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].0, AmdEvent::Beep);
        assert!((1000..=1200).contains(&events[0].1), "{events:?}");
    }

    #[test]
    fn a_machine_that_never_stops_is_given_up_on() {
        let settings = AmdSettings {
            give_up_ms: 5000,
            ..AmdSettings::default()
        };
        let audio = Audio::new().speech(12_000).with_noise();
        let events = events(&audio, settings);
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[1].0, AmdEvent::GreetingEnded);
        assert_eq!(events[1].1 - events[0].1, 5000, "{events:?}");
    }

    #[test]
    fn one_long_push_returns_both_events_in_turn_and_then_nothing() {
        let audio = Audio::new()
            .speech(3500)
            .tone(1000.0, 500)
            .silence(2000)
            .samples;
        let mut detector = AnsweringMachineDetector::new(AmdSettings::default()).unwrap();
        assert_eq!(detector.push(&audio), Some(AmdEvent::Machine));
        assert!(!detector.is_done());
        assert_eq!(detector.push(&[]), Some(AmdEvent::Beep));
        assert!(detector.is_done());
        assert_eq!(detector.push(&audio), None);
        assert_eq!(detector.elapsed_ms(), 2 * 6000);
    }

    #[test]
    fn after_a_person_the_detector_is_done() {
        let audio = Audio::new().speech(600).silence(1500).with_noise();
        let mut detector = AnsweringMachineDetector::new(AmdSettings::default()).unwrap();
        assert_eq!(detector.push(&audio), Some(AmdEvent::Human));
        assert!(detector.is_done());
        let greeting = Audio::new()
            .speech(4000)
            .tone(1000.0, 500)
            .silence(500)
            .samples;
        assert_eq!(detector.push(&greeting), None);
    }

    #[test]
    fn sixteen_khz_works_like_eight() {
        let settings = AmdSettings {
            sample_rate: 16_000,
            ..AmdSettings::default()
        };
        let mut audio = vec![0i16; 16 * 6000];
        SpeechLikeGenerator::new(16_000, 3).fill(&mut audio[..16 * 3500]);
        ToneGenerator::new(16_000, 1000.0, -10.0).fill(&mut audio[16 * 3500..16 * 4000]);
        let mut detector = AnsweringMachineDetector::new(settings).unwrap();
        let mut kinds = Vec::new();
        for frame in audio.chunks(320) {
            kinds.extend(detector.push(frame));
        }
        assert_eq!(kinds, [AmdEvent::Machine, AmdEvent::Beep]);
        assert_eq!(detector.elapsed_ms(), 6000);
    }
}
