//! A bounded jitter buffer for one RTP stream of 20 ms G.711 frames.
//!
//! Frames are pushed as packets arrive, in whatever order the network delivers them, and
//! popped once per 20 ms tick in sequence order. The buffer is a ring of `capacity` slots
//! allocated once in [`JitterBuffer::new`]; the slot of a sequence number is its distance
//! from the playout point, so u16 wraparound needs no special case.
//!
//! Playout starts `delay` ticks after the first frame arrives, which gives every later frame
//! that much time to overtake its predecessors. When the due frame is missing but later ones
//! are held, the tick reports it [`Playout::Lost`] and moves on; when nothing at all is held
//! (the sender paused between talk spurts, or the network stalled), the tick reports
//! [`Playout::Empty`] and the playout point waits, so the next talk spurt, whose sequence
//! numbers carry on where the last one stopped, is not thrown away as late. A frame too far
//! ahead to fit moves the window forward, giving up on the oldest positions; a jump of more
//! than [`MAX_DROPOUT`] ahead or [`MAX_MISORDER`] behind is taken for a restarted stream and
//! starts over, as RFC 3550 appendix A.1 does. Latency therefore never exceeds `capacity`
//! frames.

use super::packet::RtpError;

/// Bytes of one 20 ms G.711 frame at 8 kHz (one byte per sample).
pub const FRAME_BYTES: usize = 160;

/// Largest capacity accepted: one second of audio, far beyond any useful playout delay.
pub const MAX_CAPACITY: usize = 50;

/// A sequence number this far or further ahead of the playout point restarts the stream
/// (RFC 3550's `MAX_DROPOUT`): a minute of 20 ms packets.
pub const MAX_DROPOUT: u16 = 3000;

/// A sequence number further than this behind the playout point restarts the stream
/// (RFC 3550's `MAX_MISORDER`); closer ones are late packets.
pub const MAX_MISORDER: u16 = 100;

/// What one tick of playout produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Playout {
    /// The output buffer holds the frame with this sequence number and timestamp.
    Frame {
        /// The frame's RTP sequence number.
        sequence: u16,
        /// The frame's RTP timestamp.
        timestamp: u32,
    },
    /// The frame due now never arrived though later ones did: play concealment. The output
    /// buffer is untouched.
    Lost {
        /// The missing sequence number.
        sequence: u16,
    },
    /// Nothing is held: before the first frame, during the initial delay, or while the sender
    /// is silent. Play silence; nothing is counted. The output buffer is untouched.
    Empty,
}

/// What became of one pushed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Held for playout, in order.
    Stored,
    /// Held for playout, after a newer frame had already arrived.
    Reordered,
    /// Dropped: its sequence number was already held or played.
    Duplicate,
    /// Dropped: the playout point had already passed it.
    Late,
    /// The sequence number jumped so far that the stream was taken for restarted: what was
    /// held is discarded and playout starts over from this frame.
    Restarted,
}

/// Running totals since the buffer was made. Every received frame ends up played, late,
/// duplicate, discarded or still held, so
/// `received == played + late + duplicate + discarded + held`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitterCounters {
    /// Frames pushed (of the right length).
    pub received: u64,
    /// Frames popped for playout.
    pub played: u64,
    /// Sequence numbers the playout point passed without their frame: ticks that reported
    /// [`Playout::Lost`], and positions skipped when a frame far ahead moved the window.
    pub lost: u64,
    /// Frames that arrived after the playout point had passed them.
    pub late: u64,
    /// Frames whose sequence number was already held or played.
    pub duplicate: u64,
    /// Frames that arrived after a newer one and were still in time (included in the held
    /// and played counts).
    pub reordered: u64,
    /// Held frames given up unplayed: skipped by a frame far ahead, or dropped by a restart.
    pub discarded: u64,
    /// Times the stream was taken for restarted, or [`JitterBuffer::reset`] was called.
    pub resets: u64,
}

/// Whether sequence number `a` comes after `b`: less than half the sequence space ahead.
fn is_after(a: u16, b: u16) -> bool {
    a != b && a.wrapping_sub(b) < 0x8000
}

/// One slot of the ring.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Whether the slot holds a frame.
    held: bool,
    /// The held frame's RTP timestamp.
    timestamp: u32,
    /// The held frame's audio.
    payload: [u8; FRAME_BYTES],
}

/// A slot holding nothing, to fill the ring with.
const EMPTY_SLOT: Slot = Slot {
    held: false,
    timestamp: 0,
    payload: [0; FRAME_BYTES],
};

/// The playout position of a started stream.
#[derive(Debug, Clone, Copy)]
struct Position {
    /// Sequence number the next tick plays.
    sequence: u16,
    /// Ring index of that sequence number.
    slot: usize,
    /// Newest sequence number held or played, to tell reordered frames from in-order ones.
    newest: u16,
    /// Ticks left before playout starts.
    delay_left: usize,
}

/// A bounded, preallocated jitter buffer for one stream of 20 ms G.711 frames.
#[derive(Debug, Clone)]
pub struct JitterBuffer {
    slots: Box<[Slot]>,
    delay: usize,
    /// `None` until the first frame, and again after a reset.
    position: Option<Position>,
    /// Frames currently held.
    held: usize,
    /// Bit `n` set: the sequence number `n + 1` before the playout point was played (or
    /// received and skipped), so a copy arriving now is a duplicate rather than late.
    recently_received: u64,
    counters: JitterCounters,
}

impl JitterBuffer {
    /// A buffer holding up to `capacity` frames (2 to [`MAX_CAPACITY`]) that starts playout
    /// `delay` ticks after the first frame (less than `capacity`; 8 and 3 suit a trunk).
    /// The only allocation the buffer ever makes.
    pub fn new(capacity: usize, delay: usize) -> Result<Self, RtpError> {
        if !(2..=MAX_CAPACITY).contains(&capacity) || delay >= capacity {
            return Err(RtpError::JitterSize { capacity, delay });
        }
        Ok(Self {
            slots: vec![EMPTY_SLOT; capacity].into_boxed_slice(),
            delay,
            position: None,
            held: 0,
            recently_received: 0,
            counters: JitterCounters::default(),
        })
    }

    /// How many frames the buffer can hold.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// How many frames are held now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// The running totals.
    pub fn counters(&self) -> JitterCounters {
        self.counters
    }

    /// Discards everything held (counted as discarded) and waits for a new stream, e.g.
    /// when the sender's SSRC changes. The counters keep running.
    pub fn reset(&mut self) {
        self.counters.discarded += self.held as u64;
        self.counters.resets += 1;
        for slot in self.slots.iter_mut() {
            slot.held = false;
        }
        self.held = 0;
        self.position = None;
        self.recently_received = 0;
    }

    /// Offers one received frame. `payload` must be exactly [`FRAME_BYTES`] long; anything
    /// else is refused and not counted.
    pub fn push(
        &mut self,
        sequence: u16,
        timestamp: u32,
        payload: &[u8],
    ) -> Result<Pushed, RtpError> {
        let frame: &[u8; FRAME_BYTES] = payload.try_into().map_err(|_| RtpError::FrameLength {
            expected: FRAME_BYTES,
            actual: payload.len(),
        })?;
        self.counters.received += 1;
        let Some(mut position) = self.position else {
            self.start(sequence, timestamp, frame);
            return Ok(Pushed::Stored);
        };
        let ahead = sequence.wrapping_sub(position.sequence);
        let behind = position.sequence.wrapping_sub(sequence);
        if ahead >= MAX_DROPOUT {
            if behind > MAX_MISORDER {
                self.reset();
                self.start(sequence, timestamp, frame);
                return Ok(Pushed::Restarted);
            }
            // 1 to MAX_MISORDER behind: already played, or given up on.
            let played = behind <= 64 && self.recently_received & (1u64 << (behind - 1)) != 0;
            return Ok(if played {
                self.counters.duplicate += 1;
                Pushed::Duplicate
            } else {
                self.counters.late += 1;
                Pushed::Late
            });
        }
        let mut ahead = usize::from(ahead);
        if ahead >= self.capacity() {
            // Too far ahead to fit: give up on the oldest positions to make room.
            self.advance(&mut position, ahead + 1 - self.capacity());
            ahead = self.capacity() - 1;
        }
        let index = (position.slot + ahead) % self.slots.len();
        let slot = &mut self.slots[index];
        let pushed = if slot.held {
            self.counters.duplicate += 1;
            Pushed::Duplicate
        } else {
            slot.held = true;
            slot.timestamp = timestamp;
            slot.payload = *frame;
            self.held += 1;
            if is_after(sequence, position.newest) {
                position.newest = sequence;
                Pushed::Stored
            } else {
                self.counters.reordered += 1;
                Pushed::Reordered
            }
        };
        self.position = Some(position);
        Ok(pushed)
    }

    /// One 20 ms tick of playout: copies the next frame into `out`, or says why there is none.
    pub fn pop(&mut self, out: &mut [u8; FRAME_BYTES]) -> Playout {
        let Some(mut position) = self.position else {
            return Playout::Empty;
        };
        if position.delay_left > 0 {
            position.delay_left -= 1;
            self.position = Some(position);
            return Playout::Empty;
        }
        if self.held == 0 {
            // The sender is silent or the network stalled: wait here for the frame.
            return Playout::Empty;
        }
        let sequence = position.sequence;
        let slot = &self.slots[position.slot];
        let playout = if slot.held {
            *out = slot.payload;
            self.counters.played += 1;
            Playout::Frame {
                sequence,
                timestamp: slot.timestamp,
            }
        } else {
            self.counters.lost += 1;
            Playout::Lost { sequence }
        };
        self.step(&mut position);
        self.position = Some(position);
        playout
    }

    /// Takes the first frame of a stream.
    fn start(&mut self, sequence: u16, timestamp: u32, frame: &[u8; FRAME_BYTES]) {
        let slot = &mut self.slots[0];
        slot.held = true;
        slot.timestamp = timestamp;
        slot.payload = *frame;
        self.held = 1;
        self.position = Some(Position {
            sequence,
            slot: 0,
            newest: sequence,
            delay_left: self.delay,
        });
    }

    /// Moves the playout point `count` positions on without playing, counting held frames
    /// as discarded and missing ones as lost.
    fn advance(&mut self, position: &mut Position, count: usize) {
        let passed_slots = count.min(self.capacity());
        for _ in 0..passed_slots {
            if self.slots[position.slot].held {
                self.counters.discarded += 1;
            } else {
                self.counters.lost += 1;
            }
            self.step(position);
        }
        // Past one lap of the ring every position is empty.
        let beyond = count - passed_slots;
        if beyond > 0 {
            self.counters.lost += beyond as u64;
            // Sequence numbers count modulo 2^16, so the truncating cast is the arithmetic.
            position.sequence = position.sequence.wrapping_add(beyond as u16);
            position.slot = (position.slot + beyond) % self.slots.len();
            position.newest = position.sequence.wrapping_sub(1);
            self.recently_received = u32::try_from(beyond)
                .ok()
                .and_then(|shift| self.recently_received.checked_shl(shift))
                .unwrap_or(0);
        }
    }

    /// Clears the due slot and moves the playout point one position on.
    fn step(&mut self, position: &mut Position) {
        let slot = &mut self.slots[position.slot];
        let was_held = slot.held;
        slot.held = false;
        if was_held {
            self.held -= 1;
        }
        self.recently_received = (self.recently_received << 1) | u64::from(was_held);
        position.sequence = position.sequence.wrapping_add(1);
        position.slot = (position.slot + 1) % self.slots.len();
        // Once the playout point passes the newest frame, the passed position is the newest.
        let passed = position.sequence.wrapping_sub(1);
        if is_after(passed, position.newest) {
            position.newest = passed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::g711::{encode_mulaw_into, mulaw_to_linear};
    use crate::wav::WavInfo;
    use proptest::prelude::*;
    use std::io::Cursor;

    /// A frame whose bytes all equal `fill`, to tell frames apart.
    fn frame(fill: u8) -> [u8; FRAME_BYTES] {
        [fill; FRAME_BYTES]
    }

    /// The 20 ms μ-law frames of a real recording: read with the wav module, decoded, and
    /// encoded again with the crate's G.711 encoder as the SIP carrier will send them.
    fn speech_frames() -> Vec<[u8; FRAME_BYTES]> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/amd/human-quiet-hello.wav"
        );
        let bytes = std::fs::read(path).unwrap();
        let info = WavInfo::read(Cursor::new(&bytes)).unwrap();
        assert_eq!((info.channels, info.sample_rate), (1, 8000));
        let start = info.data_offset as usize;
        let samples: Vec<i16> = bytes[start..start + info.frames as usize]
            .iter()
            .map(|&code| mulaw_to_linear(code))
            .collect();
        samples
            .chunks_exact(FRAME_BYTES)
            .map(|pcm| {
                let mut encoded = [0u8; FRAME_BYTES];
                encode_mulaw_into(pcm, &mut encoded);
                encoded
            })
            .collect()
    }

    /// A small deterministic generator (xorshift), so the network's behaviour is repeatable.
    struct Network(u64);

    impl Network {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn assert_counters_add_up(buffer: &JitterBuffer) {
        let c = buffer.counters();
        assert_eq!(
            c.received,
            c.played + c.late + c.duplicate + c.discarded + buffer.held() as u64,
            "{c:?}"
        );
    }

    #[test]
    fn speech_through_a_jittery_lossy_network_comes_out_in_order() {
        let frames = speech_frames();
        assert!(frames.len() > 250, "{} frames", frames.len());
        let mut network = Network(0x5eed);
        // Starts near the top of the sequence space, so the stream wraps through 0.
        let first_sequence: u16 = 65_400;
        let first_timestamp: u32 = 0xffff_ff00;
        // Each frame is delayed 0-2 ticks (the buffer waits 3), and about one in twelve is
        // dropped, never two in a row and never the first or last.
        let mut dropped = vec![false; frames.len()];
        let mut arrivals: Vec<Vec<usize>> = vec![Vec::new(); frames.len() + 3];
        for i in 0..frames.len() {
            let drop = i > 0
                && i + 1 < frames.len()
                && !dropped[i - 1]
                && network.next().is_multiple_of(12);
            dropped[i] = drop;
            if !drop {
                let delay = if i == 0 { 0 } else { network.next() % 3 };
                arrivals[i + delay as usize].push(i);
            }
        }
        let mut buffer = JitterBuffer::new(8, 3).unwrap();
        let mut out = [0u8; FRAME_BYTES];
        let mut played: Vec<Option<[u8; FRAME_BYTES]>> = Vec::new();
        for tick in 0..frames.len() + 20 {
            // Frames that arrive in the same tick are pushed newest first.
            for &i in arrivals.get(tick).into_iter().flatten().rev() {
                let sequence = first_sequence.wrapping_add(i as u16);
                let timestamp = first_timestamp.wrapping_add(160 * i as u32);
                let pushed = buffer.push(sequence, timestamp, &frames[i]).unwrap();
                assert!(matches!(pushed, Pushed::Stored | Pushed::Reordered));
            }
            match buffer.pop(&mut out) {
                Playout::Frame {
                    sequence,
                    timestamp,
                } => {
                    let i = played.len();
                    assert_eq!(sequence, first_sequence.wrapping_add(i as u16));
                    assert_eq!(timestamp, first_timestamp.wrapping_add(160 * i as u32));
                    played.push(Some(out));
                }
                Playout::Lost { sequence } => {
                    assert_eq!(sequence, first_sequence.wrapping_add(played.len() as u16));
                    played.push(None);
                }
                Playout::Empty => assert!(tick < 3 || played.len() == frames.len(), "{tick}"),
            }
        }
        let expected: Vec<Option<[u8; FRAME_BYTES]>> = frames
            .iter()
            .zip(&dropped)
            .map(|(frame, &drop)| (!drop).then_some(*frame))
            .collect();
        assert_eq!(played, expected);
        let drops = dropped.iter().filter(|&&d| d).count() as u64;
        assert!(drops > 10, "{drops} drops");
        let c = buffer.counters();
        assert_eq!(c.received, frames.len() as u64 - drops);
        assert_eq!(c.played, c.received);
        assert_eq!(c.lost, drops);
        assert_eq!((c.late, c.duplicate, c.discarded, c.resets), (0, 0, 0, 0));
        assert!(c.reordered > 20, "{c:?}");
        assert_counters_add_up(&buffer);
    }

    #[test]
    fn plays_across_the_sequence_wraparound() {
        let mut buffer = JitterBuffer::new(4, 1).unwrap();
        let mut out = [0u8; FRAME_BYTES];
        assert_eq!(buffer.push(65534, 0, &frame(1)), Ok(Pushed::Stored));
        assert_eq!(buffer.push(0, 320, &frame(3)), Ok(Pushed::Stored));
        assert_eq!(buffer.push(65535, 160, &frame(2)), Ok(Pushed::Reordered));
        assert_eq!(buffer.pop(&mut out), Playout::Empty);
        let mut sequences = Vec::new();
        for _ in 0..3 {
            if let Playout::Frame { sequence, .. } = buffer.pop(&mut out) {
                sequences.push((sequence, out[0]));
            }
            // Keep one frame ahead so the buffer never runs dry.
            let next = sequences.len() as u16;
            buffer
                .push(next, 320 + 160 * u32::from(next), &frame(3 + next as u8))
                .unwrap();
        }
        assert_eq!(sequences, [(65534, 1), (65535, 2), (0, 3)]);
        assert_eq!(
            buffer.pop(&mut out),
            Playout::Frame {
                sequence: 1,
                timestamp: 480
            }
        );
        assert_eq!(out[0], 4);
        assert_counters_add_up(&buffer);
    }

    #[test]
    fn duplicates_and_late_frames_are_dropped_and_counted() {
        let mut buffer = JitterBuffer::new(4, 0).unwrap();
        let mut out = [0u8; FRAME_BYTES];
        buffer.push(10, 0, &frame(10)).unwrap();
        buffer.push(12, 320, &frame(12)).unwrap();
        // A copy of a held frame.
        assert_eq!(buffer.push(12, 320, &frame(12)), Ok(Pushed::Duplicate));
        assert_eq!(
            buffer.pop(&mut out),
            Playout::Frame {
                sequence: 10,
                timestamp: 0
            }
        );
        assert_eq!(buffer.pop(&mut out), Playout::Lost { sequence: 11 });
        // A copy of a played frame, and the lost one arriving after its tick.
        assert_eq!(buffer.push(10, 0, &frame(10)), Ok(Pushed::Duplicate));
        assert_eq!(buffer.push(11, 160, &frame(11)), Ok(Pushed::Late));
        assert_eq!(
            buffer.pop(&mut out),
            Playout::Frame {
                sequence: 12,
                timestamp: 320
            }
        );
        assert_eq!(out, frame(12));
        let c = buffer.counters();
        assert_eq!(
            (c.received, c.played, c.lost, c.late, c.duplicate),
            (5, 2, 1, 1, 2)
        );
        assert_counters_add_up(&buffer);
    }

    #[test]
    fn silence_between_talk_spurts_holds_the_playout_point() {
        let mut buffer = JitterBuffer::new(4, 0).unwrap();
        let mut out = [0u8; FRAME_BYTES];
        buffer.push(100, 0, &frame(1)).unwrap();
        assert!(matches!(
            buffer.pop(&mut out),
            Playout::Frame { sequence: 100, .. }
        ));
        // The sender stops for a second (silence suppression)...
        for _ in 0..50 {
            assert_eq!(buffer.pop(&mut out), Playout::Empty);
        }
        // ...and its next talk spurt carries on with the next sequence number.
        assert_eq!(buffer.push(101, 160 * 51, &frame(2)), Ok(Pushed::Stored));
        assert_eq!(
            buffer.pop(&mut out),
            Playout::Frame {
                sequence: 101,
                timestamp: 160 * 51
            }
        );
        assert_eq!(buffer.counters().lost, 0);
    }

    #[test]
    fn a_frame_far_ahead_moves_the_window() {
        let mut buffer = JitterBuffer::new(4, 2).unwrap();
        let mut out = [0u8; FRAME_BYTES];
        buffer.push(0, 0, &frame(0)).unwrap();
        buffer.push(1, 160, &frame(1)).unwrap();
        // Sequence 5 needs the window to start at 2: frames 0 and 1 are given up.
        assert_eq!(buffer.push(5, 800, &frame(5)), Ok(Pushed::Stored));
        let c = buffer.counters();
        assert_eq!((c.discarded, c.lost), (2, 0));
        assert_eq!(buffer.push(3, 480, &frame(3)), Ok(Pushed::Reordered));
        assert_eq!(buffer.push(1, 160, &frame(1)), Ok(Pushed::Duplicate));
        // Well ahead, but not a restart: the window moves to 102, giving up 3 and 5 and
        // losing the 98 positions from 2 to 101 that never arrived.
        assert_eq!(buffer.push(105, 160 * 105, &frame(105)), Ok(Pushed::Stored));
        let c = buffer.counters();
        assert_eq!((c.discarded, c.lost), (4, 98));
        // Still in the delay, then 102 to 104 are lost and 105 plays.
        assert_eq!(buffer.pop(&mut out), Playout::Empty);
        assert_eq!(buffer.pop(&mut out), Playout::Empty);
        for sequence in 102..105 {
            assert_eq!(buffer.pop(&mut out), Playout::Lost { sequence });
        }
        assert!(matches!(
            buffer.pop(&mut out),
            Playout::Frame { sequence: 105, .. }
        ));
        assert_counters_add_up(&buffer);
    }

    #[test]
    fn a_big_jump_restarts_cleanly() {
        let mut buffer = JitterBuffer::new(8, 1).unwrap();
        let mut out = [0u8; FRAME_BYTES];
        for sequence in 0..4u16 {
            buffer
                .push(sequence, 160 * u32::from(sequence), &frame(1))
                .unwrap();
        }
        buffer.pop(&mut out);
        assert!(matches!(
            buffer.pop(&mut out),
            Playout::Frame { sequence: 0, .. }
        ));
        // The far end restarted its stream at a random sequence number.
        assert_eq!(buffer.push(40_000, 7, &frame(2)), Ok(Pushed::Restarted));
        assert_eq!(buffer.held(), 1);
        assert_eq!(buffer.push(40_001, 167, &frame(3)), Ok(Pushed::Stored));
        assert_eq!(buffer.pop(&mut out), Playout::Empty);
        assert_eq!(
            buffer.pop(&mut out),
            Playout::Frame {
                sequence: 40_000,
                timestamp: 7
            }
        );
        assert_eq!(
            buffer.pop(&mut out),
            Playout::Frame {
                sequence: 40_001,
                timestamp: 167
            }
        );
        // Far behind counts as a restart too, a little behind as late.
        assert_eq!(buffer.push(39_990, 0, &frame(4)), Ok(Pushed::Late));
        assert_eq!(buffer.push(1_000, 0, &frame(5)), Ok(Pushed::Restarted));
        let c = buffer.counters();
        assert_eq!((c.resets, c.discarded, c.late), (2, 3, 1));
        assert_counters_add_up(&buffer);
        buffer.reset();
        assert_eq!(buffer.pop(&mut out), Playout::Empty);
        assert_eq!(buffer.counters().resets, 3);
        assert_counters_add_up(&buffer);
    }

    #[test]
    fn refuses_wrong_frames_and_sizes() {
        let mut buffer = JitterBuffer::new(8, 3).unwrap();
        assert_eq!(
            buffer.push(1, 0, &[0; 80]),
            Err(RtpError::FrameLength {
                expected: 160,
                actual: 80
            })
        );
        assert_eq!(buffer.counters().received, 0);
        assert!(JitterBuffer::new(1, 0).is_err());
        assert!(JitterBuffer::new(8, 8).is_err());
        assert!(JitterBuffer::new(MAX_CAPACITY + 1, 3).is_err());
        assert_eq!(
            JitterBuffer::new(MAX_CAPACITY, 0).unwrap().capacity(),
            MAX_CAPACITY
        );
    }

    /// One step of a random session: a push at some distance from a base sequence number
    /// that drifts forward, or a pop.
    #[derive(Debug, Clone)]
    enum Step {
        Push { offset: i32, len_ok: bool },
        Pop,
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            4 => (-12i32..24, prop::bool::weighted(0.97))
                .prop_map(|(offset, len_ok)| Step::Push { offset, len_ok }),
            1 => prop_oneof![Just(-5000i32), Just(-150), Just(200), Just(4000), Just(32768)]
                .prop_map(|offset| Step::Push { offset, len_ok: true }),
            4 => Just(Step::Pop),
        ];
        prop::collection::vec(step, 0..400)
    }

    proptest! {
        /// Random pushes and pops never panic, and every frame is accounted for.
        #[test]
        fn random_sessions_never_panic_and_counters_add_up(
            capacity in 2usize..=12,
            delay_seed in any::<usize>(),
            start in any::<u16>(),
            steps in steps(),
        ) {
            let delay = delay_seed % capacity;
            let mut buffer = JitterBuffer::new(capacity, delay).unwrap();
            let mut out = [0u8; FRAME_BYTES];
            let mut base = start;
            let mut pops = 0u64;
            let mut frames_and_losses = 0u64;
            for step in steps {
                match step {
                    Step::Push { offset, len_ok } => {
                        let sequence = base.wrapping_add(offset as u16);
                        let payload: &[u8] = if len_ok { &[0x55; FRAME_BYTES] } else { &[0x55; 12] };
                        let pushed = buffer.push(sequence, 0, payload);
                        prop_assert_eq!(pushed.is_ok(), len_ok);
                    }
                    Step::Pop => {
                        pops += 1;
                        base = base.wrapping_add(1);
                        if !matches!(buffer.pop(&mut out), Playout::Empty) {
                            frames_and_losses += 1;
                        }
                    }
                }
                prop_assert!(buffer.held() <= capacity);
                let c = buffer.counters();
                prop_assert_eq!(
                    c.received,
                    c.played + c.late + c.duplicate + c.discarded + buffer.held() as u64
                );
                prop_assert!(c.reordered <= c.received);
            }
            let c = buffer.counters();
            prop_assert!(frames_and_losses <= pops);
            prop_assert!(c.played <= frames_and_losses);
        }
    }
}
