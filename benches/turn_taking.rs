//! The turn-taking benchmark (issue 29): the real endpointing and interruption code run
//! over the labelled corpus in `media/tests/fixtures/turns/`, in-process, in audio time
//! and deterministically, scored for false cut-ins, end-of-turn latency, backchannels
//! that stopped the agent and real interruptions missed (with the time to yield).
//!
//!   cargo bench --bench turn_taking
//!
//! Rows:
//! - (a) today's silence rule: `voxline_media::endpoint::Endpointer` at 600 ms and the
//!   400 ms duration interruption, as the call loop runs them;
//! - (b) the smart mode (`voxline_media::turn_taking::TurnTaking`, `TurnConfig::smart()`)
//!   on the words a streaming ASR would show, without the end-of-turn model and, when
//!   `VOXLINE_SMART_TURN_MODEL` names it, with Smart Turn v3.2 (the service's own pool);
//! - (c) Smart Turn v3.2 alone through Pipecat 1.14.0's own analyzer, from the
//!   decisions `scripts/turn-corpus/pipecat-row.sh` recorded in
//!   `benches/turn_taking/pipecat-smart-turn-v3.json`, scored by the same code.
//!
//! Prints a Markdown table (and details per row). `VOXLINE_TURN_BENCH_CLIPS=1` also
//! lists every clip's decisions.

#[path = "turn_taking/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use harness::{Action, Clip, Decisions, Report};
use serde::Deserialize;
use voxline_media::turn_taking::TurnConfig;

/// The repository's root (the bench is the root crate's; also found from `media/`).
fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    if manifest.join("benches/turn_taking.rs").exists() {
        manifest.to_path_buf()
    } else {
        manifest.join("..")
    }
}

fn corpus_dir() -> PathBuf {
    repo_root().join("media/tests/fixtures/turns")
}

fn pipecat_decisions_path() -> PathBuf {
    repo_root().join("benches/turn_taking/pipecat-smart-turn-v3.json")
}

/// Runs a policy over every clip.
fn run_row(clips: &[Clip], policy: &mut dyn harness::Policy) -> Result<Vec<Decisions>, String> {
    clips
        .iter()
        .map(|clip| harness::run_clip(clip, policy))
        .collect()
}

/// One clip of the Pipecat script's output.
#[derive(Debug, Deserialize)]
struct PipecatClip {
    id: String,
    end_of_turn_ms: Vec<u32>,
    interrupt_ms: Vec<u32>,
}

/// The Pipecat script's output file.
#[derive(Debug, Deserialize)]
struct PipecatRun {
    row: String,
    pipecat_ai: String,
    evaluations: usize,
    cpu_ms_per_evaluation_p50: Option<f64>,
    clips: Vec<PipecatClip>,
}

/// Row (c): the recorded decisions of Pipecat's analyzer, in the corpus's clip order.
fn pipecat_row(clips: &[Clip]) -> Result<Option<(PipecatRun, Vec<Decisions>)>, String> {
    let path = pipecat_decisions_path();
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let run: PipecatRun =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut decisions = Vec::with_capacity(clips.len());
    for clip in clips {
        let Some(recorded) = run.clips.iter().find(|c| c.id == clip.label.id) else {
            return Err(format!(
                "{}: no decisions for clip {}; rerun scripts/turn-corpus/pipecat-row.sh",
                path.display(),
                clip.label.id
            ));
        };
        let mut actions: Vec<(u32, Action)> = recorded
            .end_of_turn_ms
            .iter()
            .map(|&t| (t, Action::EndOfTurn))
            .chain(
                recorded
                    .interrupt_ms
                    .iter()
                    .map(|&t| (t, Action::YieldAgent)),
            )
            .collect();
        actions.sort_by_key(|&(t, _)| t);
        decisions.push(Decisions { actions });
    }
    Ok(Some((run, decisions)))
}

fn list_clips(name: &str, clips: &[Clip], decisions: &[Decisions]) {
    println!("\n{name}, per clip (time ms: decision):");
    for (clip, decided) in clips.iter().zip(decisions) {
        let label = &clip.label;
        let actions: Vec<String> = decided
            .actions
            .iter()
            .map(|(t, a)| format!("{t}:{a:?}"))
            .collect();
        println!(
            "  {:<32} end {:>5} pauses {:?} → {}",
            label.id,
            label
                .end_of_turn_ms
                .map_or("-".to_owned(), |t| t.to_string()),
            label.pauses,
            actions.join(" ")
        );
    }
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; nothing to filter on.
    let clips = match harness::load_corpus(&corpus_dir()) {
        Ok(clips) => clips,
        Err(e) => {
            eprintln!(
                "turn_taking: cannot read the corpus: {e} (scripts/turn-corpus/generate.sh makes it)"
            );
            return ExitCode::FAILURE;
        }
    };
    let detail = std::env::var_os("VOXLINE_TURN_BENCH_CLIPS").is_some();
    let audio_s: f64 = clips
        .iter()
        .map(|c| c.audio.len() as f64 / f64::from(harness::RATE))
        .sum();
    let count = |category| {
        clips
            .iter()
            .filter(|c| c.label.category == category)
            .count()
    };
    println!(
        "turn-taking corpus: {} clips ({}), {:.0} s of audio as run",
        clips.len(),
        harness::Category::ALL
            .iter()
            .map(|&c| format!("{} {}", count(c), c.name()))
            .collect::<Vec<_>>()
            .join(", "),
        audio_s
    );
    let mut reports: Vec<Report> = Vec::new();
    let mut notes: Vec<String> = Vec::new();

    let started = std::time::Instant::now();
    let silence = match run_row(&clips, &mut harness::SilenceRule::new()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("turn_taking: silence rule: {e}");
            return ExitCode::FAILURE;
        }
    };
    let name = "(a) silence rule: 600 ms endpoint, 400 ms interruption (main)";
    if detail {
        list_clips(name, &clips, &silence);
    }
    reports.push(harness::score(name, &clips, &silence));
    notes.push(format!(
        "(a) ran {:.0} s of audio in {:.2} s of wall time (VAD included).",
        audio_s,
        started.elapsed().as_secs_f64()
    ));

    let started = std::time::Instant::now();
    let mut smart = harness::SmartMode::new(TurnConfig::smart(), None);
    let decisions = match run_row(&clips, &mut smart) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("turn_taking: smart mode: {e}");
            return ExitCode::FAILURE;
        }
    };
    let name = "(b) smart mode, words and silence (no model)";
    if detail {
        list_clips(name, &clips, &decisions);
    }
    reports.push(harness::score(name, &clips, &decisions));
    notes.push(format!(
        "(b) `TurnConfig::smart()` without a model: a turn ends at a 200 ms pause when the words end like a sentence or complete the asked phone number or date, waits up to 2.5 s when they say wait or stop short of a sentence, and with no words yet takes the 600 ms silence rule; words shown {} ms after they end; ran in {:.2} s.",
        harness::asr_lag_ms(),
        started.elapsed().as_secs_f64()
    ));
    match smart_turn_model() {
        Ok(Some(model)) => {
            let started = std::time::Instant::now();
            let mut smart = harness::SmartMode::new(TurnConfig::smart(), Some(Box::new(model)));
            let decisions = match run_row(&clips, &mut smart) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("turn_taking: smart mode with the model: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let name = "(b) smart mode with Smart Turn v3.2";
            if detail {
                list_clips(name, &clips, &decisions);
            }
            reports.push(harness::score(name, &clips, &decisions));
            let mut cpu = smart.evaluations.clone();
            cpu.sort_unstable();
            let p50 = cpu.get(cpu.len() / 2).copied().unwrap_or(0);
            notes.push(format!(
                "(b) with Smart Turn v3.2 on ONNX Runtime (`voxline::providers::smart_turn`, one worker, one thread): the model is asked at a 200 ms pause with no words yet, and can only hold it open past the silence rule; {} evaluations over {} clips, CPU p50 {p50} ms each, its answer reaching the machine that much later in audio time; ran in {:.2} s.",
                cpu.len(),
                clips.len(),
                started.elapsed().as_secs_f64()
            ));
        }
        Ok(None) => notes.push(
            "(b) smart mode with Smart Turn v3.2: skipped, VOXLINE_SMART_TURN_MODEL unset (scripts/smart-turn-model.sh installs the model).".to_owned(),
        ),
        Err(e) => {
            eprintln!("turn_taking: {e}");
            return ExitCode::FAILURE;
        }
    }

    match pipecat_row(&clips) {
        Ok(Some((run, decisions))) => {
            let name = format!(
                "(c) Smart Turn v3.2 alone (Pipecat {} defaults)",
                run.pipecat_ai
            );
            if detail {
                list_clips(&name, &clips, &decisions);
            }
            reports.push(harness::score(&name, &clips, &decisions));
            notes.push(format!(
                "(c) {}: {} model evaluations, CPU p50 {} ms each (added to each end it called); recorded by scripts/turn-corpus/pipecat-row.sh.",
                run.row,
                run.evaluations,
                run.cpu_ms_per_evaluation_p50
                    .map_or("?".to_owned(), |v| format!("{v:.1}"))
            ));
        }
        Ok(None) => notes.push(format!(
            "(c) skipped: {} is missing (scripts/turn-corpus/pipecat-row.sh records it).",
            pipecat_decisions_path().display()
        )),
        Err(e) => {
            eprintln!("turn_taking: {e}");
            return ExitCode::FAILURE;
        }
    }

    println!();
    print!("{}", harness::table_header());
    for report in &reports {
        print!("{}", report.table_row());
    }
    println!();
    for report in &reports {
        print!("{}", report.details());
    }
    for note in &notes {
        println!("- {note}");
    }
    ExitCode::SUCCESS
}

/// Smart Turn v3.2 as the benchmark asks it: the service's own pool
/// (`voxline::providers::smart_turn::SmartTurnPool`: Whisper features and the model on a
/// worker thread), given the last 8 s of the caller's audio resampled to 16 kHz by the
/// resampler the call loop uses. Its cost is the pool's measured CPU time per evaluation.
struct SmartTurnRow {
    pool: voxline::providers::smart_turn::SmartTurnPool,
    resampler: voxline_media::resample::StreamResampler,
    chunk: Vec<i16>,
    audio: Vec<f32>,
}

impl harness::TurnModel for SmartTurnRow {
    fn evaluate(&mut self, audio_8k: &[i16]) -> Result<(f32, u32), String> {
        use voxline_actors::providers::end_of_turn::{END_OF_TURN_MAX_SAMPLES, EndOfTurnModel};
        let tail = &audio_8k[audio_8k.len().saturating_sub(END_OF_TURN_MAX_SAMPLES / 2)..];
        self.resampler.reset();
        self.audio.clear();
        for input in tail.chunks(self.resampler.input_frames()) {
            let written = self
                .resampler
                .process(input, &mut self.chunk)
                .map_err(|e| e.to_string())?;
            self.audio.extend(
                self.chunk[..written]
                    .iter()
                    .map(|&s| f32::from(s) / 32768.0),
            );
        }
        let verdict = self
            .pool
            .submit(&self.audio)
            .ok_or("the pool refused an evaluation")?
            .blocking_recv()
            .map_err(|_| "the evaluation failed".to_owned())?;
        let cost_ms = u32::try_from(verdict.cpu.as_millis()).unwrap_or(u32::MAX);
        Ok((verdict.probability, cost_ms))
    }
}

/// The model `VOXLINE_SMART_TURN_MODEL` names (the runtime beside it, or at
/// `VOXLINE_ONNXRUNTIME_LIB`), on a pool of one worker; `None` when unset.
fn smart_turn_model() -> Result<Option<SmartTurnRow>, String> {
    use voxline::providers::smart_turn::{
        PoolSettings, RUNTIME_FILE, SmartTurnModel, SmartTurnPool,
    };
    let Some(model) = std::env::var_os("VOXLINE_SMART_TURN_MODEL").map(PathBuf::from) else {
        return Ok(None);
    };
    let runtime = std::env::var_os("VOXLINE_ONNXRUNTIME_LIB")
        .map_or_else(|| model.with_file_name(RUNTIME_FILE), PathBuf::from);
    let model = SmartTurnModel::open(&model, &runtime).map_err(|e| e.to_string())?;
    let pool = SmartTurnPool::start(
        &model,
        PoolSettings {
            workers: 1,
            queue: 1,
            max_batch: 1,
        },
    )
    .map_err(|e| e.to_string())?;
    let resampler =
        voxline_media::resample::StreamResampler::new(8_000, 16_000).map_err(|e| e.to_string())?;
    let chunk = vec![0; resampler.output_frames()];
    Ok(Some(SmartTurnRow {
        pool,
        resampler,
        chunk,
        audio: Vec::new(),
    }))
}
