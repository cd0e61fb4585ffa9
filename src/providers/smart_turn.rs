//! Smart Turn v3.2, the audio end-of-turn model Pipecat ships (BSD-2-Clause, Daily), run
//! in process on ONNX Runtime behind the engine's [`EndOfTurnModel`].
//!
//! The runtime is the `libonnxruntime` shared library of the `onnxruntime` PyPI wheel, loaded
//! at start through `ort`'s `load-dynamic` (nothing is downloaded or linked at build time).
//! The pure-Rust `tract` was tried first and cannot run this model: on its QDQ-quantized
//! attention (a `MatMul` of the dequantized softmax by the dequantized values) it loses the
//! softmax's scale, so the attention output is about 160 times too large and the
//! probabilities are wrong (0.23 where onnxruntime says 0.99 on "My name is Mary Jones."), at
//! three to four times onnxruntime's CPU. ONNX Runtime gives exactly the probabilities
//! Pipecat's own analyzer does (`tests/it/smart_turn.rs`).
//!
//! The model is a quantized Whisper-tiny encoder with a classifier head: it reads the
//! Whisper log-mel features of the caller's last 8 s at 16 kHz (`voxline_media::whisper_mel`)
//! and answers the probability that the turn is complete. One evaluation costs tens of
//! milliseconds of CPU, so it never runs on the async runtime or the frame loop: a
//! [`SmartTurnPool`] owns a fixed number of worker threads and a bounded queue, evaluates
//! what is queued together as one batch (the model's batch axis is dynamic), and refuses at
//! once when the queue is full, so a saturated node falls back to silence timing instead of
//! answering late.
//!
//! The model file and the library are installed by `scripts/smart-turn-model.sh` from the
//! pinned wheels and checked against [`MODEL_SHA256`] and [`RUNTIME_SHA256`] here before they
//! are loaded; when either is missing or different, [`start`] logs so once and the engine gets
//! no model.
//!
//! Metrics: `voxline_smart_turn_evaluations_total`, `voxline_smart_turn_saturated_total`
//! (submissions refused because the queue was full), and the histograms
//! `voxline_smart_turn_cpu_seconds` (CPU per evaluation, its share of a batch; the sum is
//! the CPU spent) and `voxline_smart_turn_batch_size`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ort::environment::Environment;
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::TensorRef;
use parking_lot::{Condvar, Mutex};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;
use voxline_actors::providers::end_of_turn::{
    END_OF_TURN_MAX_SAMPLES, EndOfTurnModel, EndOfTurnVerdict,
};
use voxline_media::whisper_mel::{FEATURES_LEN, Features, N_FRAMES, N_MELS, WhisperMel};

/// The model's file name, in the models directory.
pub const MODEL_FILE: &str = "smart-turn-v3.2-cpu.onnx";

/// The sha256 of the pinned model (`pipecat/audio/turn/smart_turn/data/` in
/// `pipecat-ai==1.14.0`); any other file is refused.
pub const MODEL_SHA256: &str = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f";

/// The ONNX Runtime library's file name, looked for beside the model.
pub const RUNTIME_FILE: &str = "libonnxruntime.so.1.24.3";

/// The sha256 of the pinned library (`onnxruntime/capi/` in `onnxruntime==1.24.3`, Linux
/// x86-64): `ort` is built for its API, and no other library is loaded into the process.
pub const RUNTIME_SHA256: &str = "12e097b0705253189cd2cde73a091febefb7348edcfe606cd54aec010a4bab2b";

/// The model's input.
const INPUT: &str = "input_features";

/// Why the model cannot be used or an evaluation failed.
#[derive(Debug, thiserror::Error)]
pub enum SmartTurnError {
    /// The model file could not be read (most often: not installed).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not the pinned one.
    #[error("{path} has sha256 {actual}, not the pinned {expected}")]
    Checksum {
        /// The file.
        path: PathBuf,
        /// Its sha256.
        actual: String,
        /// The pinned sha256.
        expected: &'static str,
    },
    /// ONNX Runtime could not be loaded.
    #[error("cannot load ONNX Runtime from {path}: {message}")]
    Runtime {
        /// The library.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// ONNX Runtime could not load the model.
    #[error("cannot load the model: {0}")]
    Load(String),
    /// Running the model failed.
    #[error("evaluation failed: {0}")]
    Evaluate(String),
    /// The worker threads could not be started.
    #[error("cannot start the evaluation threads: {0}")]
    Threads(std::io::Error),
}

/// Reads `path` and checks that its sha256 is `expected`.
fn read_pinned(path: &Path, expected: &'static str) -> Result<Vec<u8>, SmartTurnError> {
    let bytes = std::fs::read(path).map_err(|source| SmartTurnError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let actual = hex::encode(Sha256::digest(&bytes));
    if actual != expected {
        return Err(SmartTurnError::Checksum {
            path: path.to_path_buf(),
            actual,
            expected,
        });
    }
    Ok(bytes)
}

/// The bytes of the pinned model file, read and checked against [`MODEL_SHA256`].
pub struct ModelBytes(Vec<u8>);

impl std::fmt::Debug for ModelBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ModelBytes({} bytes)", self.0.len())
    }
}

impl ModelBytes {
    /// Reads `path` and checks that it is the pinned model.
    pub fn read(path: &Path) -> Result<Self, SmartTurnError> {
        read_pinned(path, MODEL_SHA256).map(Self)
    }
}

/// The process's one ONNX Runtime environment (the library allows one per process, and
/// loads its shared library once).
static ENVIRONMENT: Mutex<Option<Environment>> = Mutex::new(None);

/// Loads the pinned ONNX Runtime library at `path` (once per process) and returns its
/// environment.
fn environment(path: &Path) -> Result<Environment, SmartTurnError> {
    let mut slot = ENVIRONMENT.lock();
    if let Some(env) = slot.as_ref() {
        return Ok(env.clone());
    }
    let runtime = |message: String| SmartTurnError::Runtime {
        path: path.to_path_buf(),
        message,
    };
    // Checked before it is mapped into the process: loading runs the library's code.
    read_pinned(path, RUNTIME_SHA256)?;
    let env = ort::init_from(path)
        .map_err(|e| runtime(e.to_string()))?
        .with_name("voxline-smart-turn")
        .build()
        .map_err(|e| runtime(e.to_string()))?;
    *slot = Some(env.clone());
    Ok(env)
}

/// The checked model with the runtime that runs it; each worker opens its own session.
#[derive(Clone)]
pub struct SmartTurnModel {
    env: Environment,
    bytes: Arc<ModelBytes>,
}

impl std::fmt::Debug for SmartTurnModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SmartTurnModel")
    }
}

impl SmartTurnModel {
    /// Reads and checks the model at `model` and the ONNX Runtime library at `runtime`, and
    /// loads the library.
    pub fn open(model: &Path, runtime: &Path) -> Result<Self, SmartTurnError> {
        let bytes = Arc::new(ModelBytes::read(model)?);
        Ok(Self {
            env: environment(runtime)?,
            bytes,
        })
    }

    /// A session of this model for one thread: one intra-op thread (the caller's), so a
    /// worker uses exactly one core, with the optimizations Pipecat's analyzer uses.
    pub fn runner(&self) -> Result<ModelRunner, SmartTurnError> {
        let load = |e: String| SmartTurnError::Load(e);
        let session = Session::builder(&self.env)
            .map_err(|e| load(e.to_string()))?
            .with_optimization_level(GraphOptimizationLevel::All)
            .map_err(|e| load(e.to_string()))?
            .with_intra_threads(1)
            .map_err(|e| load(e.to_string()))?
            .with_inter_threads(1)
            .map_err(|e| load(e.to_string()))?
            .commit_from_memory(&self.bytes.0)
            .map_err(|e| load(e.to_string()))?;
        Ok(ModelRunner { session })
    }
}

/// One thread's session of the model.
pub struct ModelRunner {
    session: Session,
}

impl std::fmt::Debug for ModelRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModelRunner")
    }
}

impl ModelRunner {
    /// The probabilities of `features` (whole feature matrices one after another: the
    /// model's `[batch, 80, 800]`), one per matrix, into `probabilities`.
    pub fn evaluate(
        &mut self,
        features: &[f32],
        probabilities: &mut [f32],
    ) -> Result<(), SmartTurnError> {
        let evaluate = |e: ort::Error| SmartTurnError::Evaluate(e.to_string());
        let batch = features.len() / FEATURES_LEN;
        if batch == 0
            || !features.len().is_multiple_of(FEATURES_LEN)
            || probabilities.len() != batch
        {
            return Err(SmartTurnError::Evaluate(format!(
                "{} values for {} verdicts",
                features.len(),
                probabilities.len()
            )));
        }
        let input =
            TensorRef::from_array_view(([batch, N_MELS, N_FRAMES], features)).map_err(evaluate)?;
        let outputs = self
            .session
            .run(ort::inputs![INPUT => input])
            .map_err(evaluate)?;
        if outputs.len() == 0 {
            return Err(SmartTurnError::Evaluate("no output".into()));
        }
        // `logits` is named so, but the graph ends in a sigmoid: it is the probability.
        let (_, output) = outputs[0].try_extract_tensor::<f32>().map_err(evaluate)?;
        if output.len() != batch {
            return Err(SmartTurnError::Evaluate(format!(
                "{} outputs for a batch of {batch}",
                output.len()
            )));
        }
        probabilities.copy_from_slice(output);
        Ok(())
    }
}

/// What evaluates one batch of feature matrices: the model, or a stand-in in tests.
pub trait BatchEvaluator: Send + 'static {
    /// Writes one probability per feature matrix in `features` into `probabilities`.
    fn evaluate(
        &mut self,
        features: &[f32],
        probabilities: &mut [f32],
    ) -> Result<(), SmartTurnError>;
}

impl BatchEvaluator for ModelRunner {
    fn evaluate(
        &mut self,
        features: &[f32],
        probabilities: &mut [f32],
    ) -> Result<(), SmartTurnError> {
        ModelRunner::evaluate(self, features, probabilities)
    }
}

/// The pool's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Worker threads, each evaluating one batch at a time.
    pub workers: usize,
    /// Submissions that may wait; one more is refused.
    pub queue: usize,
    /// The most queued submissions one evaluation takes together.
    pub max_batch: usize,
}

/// One submission waiting for a worker.
struct Job {
    audio: Vec<f32>,
    reply: oneshot::Sender<EndOfTurnVerdict>,
}

struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    capacity: usize,
}

/// Smart Turn on a bounded pool of worker threads: the service's [`EndOfTurnModel`].
pub struct SmartTurnPool {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SmartTurnPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmartTurnPool")
            .field("capacity", &self.shared.capacity)
            .finish_non_exhaustive()
    }
}

impl SmartTurnPool {
    /// Starts `settings.workers` threads evaluating `model`, each with its own session.
    pub fn start(model: &SmartTurnModel, settings: PoolSettings) -> Result<Self, SmartTurnError> {
        let runners = (0..settings.workers.max(1))
            .map(|_| model.runner())
            .collect::<Result<Vec<_>, _>>()?;
        Self::start_with(runners, settings)
    }

    /// Starts one worker thread per evaluator.
    pub fn start_with<E: BatchEvaluator>(
        evaluators: Vec<E>,
        settings: PoolSettings,
    ) -> Result<Self, SmartTurnError> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::with_capacity(settings.queue),
                closed: false,
            }),
            ready: Condvar::new(),
            capacity: settings.queue,
        });
        let max_batch = settings.max_batch.max(1);
        for (i, evaluator) in evaluators.into_iter().enumerate() {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("smart-turn-{i}"))
                .spawn(move || work(&shared, evaluator, max_batch))
                .map_err(SmartTurnError::Threads)?;
        }
        Ok(Self { shared })
    }
}

impl EndOfTurnModel for SmartTurnPool {
    fn submit(&self, audio: &[f32]) -> Option<oneshot::Receiver<EndOfTurnVerdict>> {
        let audio = &audio[audio.len().saturating_sub(END_OF_TURN_MAX_SAMPLES)..];
        let (reply, verdict) = oneshot::channel();
        {
            let mut queue = self.shared.queue.lock();
            if queue.closed || queue.jobs.len() >= self.shared.capacity {
                drop(queue);
                metrics::counter!("voxline_smart_turn_saturated_total").increment(1);
                return None;
            }
            queue.jobs.push_back(Job {
                audio: audio.to_vec(),
                reply,
            });
        }
        self.shared.ready.notify_one();
        Some(verdict)
    }
}

impl Drop for SmartTurnPool {
    /// Stops the workers once they finish what they hold; queued submissions are dropped
    /// (their callers see the sender gone and time silence).
    fn drop(&mut self) {
        let mut queue = self.shared.queue.lock();
        queue.closed = true;
        queue.jobs.clear();
        drop(queue);
        self.shared.ready.notify_all();
    }
}

/// One worker: waits for submissions, takes up to `max_batch` of them, computes their
/// features and evaluates them together.
fn work<E: BatchEvaluator>(shared: &Shared, mut evaluator: E, max_batch: usize) {
    let mut mel = WhisperMel::new();
    let mut features = vec![0.0f32; max_batch * FEATURES_LEN];
    let mut probabilities = vec![0.0f32; max_batch];
    let mut batch: Vec<Job> = Vec::with_capacity(max_batch);
    loop {
        {
            let mut queue = shared.queue.lock();
            while queue.jobs.is_empty() && !queue.closed {
                shared.ready.wait(&mut queue);
            }
            if queue.closed {
                return;
            }
            while batch.len() < max_batch {
                let Some(job) = queue.jobs.pop_front() else {
                    break;
                };
                // A caller that stopped waiting (the caller spoke again, the call ended)
                // costs nothing.
                if !job.reply.is_closed() {
                    batch.push(job);
                }
            }
        }
        if batch.is_empty() {
            continue;
        }
        let n = batch.len();
        let started = ThreadCpu::now();
        for (job, slot) in batch.iter().zip(features.chunks_exact_mut(FEATURES_LEN)) {
            if let Ok(slot) = <&mut Features>::try_from(slot) {
                mel.compute(&job.audio, slot);
            }
        }
        let result = evaluator.evaluate(&features[..n * FEATURES_LEN], &mut probabilities[..n]);
        let cpu = started.elapsed() / u32::try_from(n).unwrap_or(1);
        match result {
            Ok(()) => {
                metrics::counter!("voxline_smart_turn_evaluations_total").increment(n as u64);
                metrics::histogram!("voxline_smart_turn_batch_size").record(n as f64);
                for (job, &probability) in batch.drain(..).zip(&probabilities[..n]) {
                    metrics::histogram!("voxline_smart_turn_cpu_seconds").record(cpu.as_secs_f64());
                    // The caller may have stopped waiting meanwhile; nothing to do then.
                    let _ = job.reply.send(EndOfTurnVerdict { probability, cpu });
                }
            }
            Err(err) => {
                tracing::error!(error = %err, batch = n, "smart turn evaluation failed; those turns fall back to silence timing");
                // Dropping the senders tells each caller there is no verdict.
                batch.clear();
            }
        }
    }
}

/// CPU time of the calling thread, where the platform tells it; wall time otherwise.
struct ThreadCpu {
    cpu: Option<Duration>,
    wall: Instant,
}

impl ThreadCpu {
    fn now() -> Self {
        Self {
            cpu: thread_cpu_time(),
            wall: Instant::now(),
        }
    }

    fn elapsed(&self) -> Duration {
        match (self.cpu, thread_cpu_time()) {
            (Some(start), Some(end)) => end.saturating_sub(start),
            _ => self.wall.elapsed(),
        }
    }
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> Option<Duration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Some(Duration::new(
        u64::try_from(t.tv_sec).ok()?,
        u32::try_from(t.tv_nsec).ok()?,
    ))
}

/// Where the model is, and how its pool is shaped (resolved settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmartTurnSettings {
    /// The model file (`VOXLINE_SMART_TURN_MODEL`, default `<data dir>/models/smart-turn-v3.2-cpu.onnx`).
    pub model: PathBuf,
    /// The ONNX Runtime library (`VOXLINE_ONNXRUNTIME_LIB`, default beside the model).
    pub runtime: PathBuf,
    /// The evaluation pool.
    pub pool: PoolSettings,
}

/// Loads the model and starts its pool, or says once why turns will be timed by silence
/// alone and returns `None`. Blocking (reads and plans the model): call it off the runtime.
pub fn start(settings: &SmartTurnSettings) -> Option<Arc<dyn EndOfTurnModel>> {
    let started = Instant::now();
    match SmartTurnModel::open(&settings.model, &settings.runtime)
        .and_then(|model| SmartTurnPool::start(&model, settings.pool))
    {
        Ok(pool) => {
            tracing::info!(
                model = %settings.model.display(),
                runtime = %settings.runtime.display(),
                workers = settings.pool.workers,
                queue = settings.pool.queue,
                max_batch = settings.pool.max_batch,
                load_ms = started.elapsed().as_millis() as u64,
                "smart turn model loaded"
            );
            Some(Arc::new(pool))
        }
        Err(err) => {
            tracing::warn!(
                error = %err,
                "no smart turn model ({}, {}: install them with scripts/smart-turn-model.sh); turn detection uses silence timing",
                settings.model.display(),
                settings.runtime.display()
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::sync::mpsc;

    /// Answers each matrix's first value as its probability, after the test lets it go.
    struct Gate {
        go: mpsc::Receiver<()>,
        batches: mpsc::Sender<usize>,
    }

    impl BatchEvaluator for Gate {
        fn evaluate(
            &mut self,
            features: &[f32],
            probabilities: &mut [f32],
        ) -> Result<(), SmartTurnError> {
            self.batches.send(probabilities.len()).unwrap();
            self.go.recv().unwrap();
            for (p, matrix) in probabilities.iter_mut().zip(features.chunks(FEATURES_LEN)) {
                *p = matrix[FEATURES_LEN - 1];
            }
            Ok(())
        }
    }

    fn gated(settings: PoolSettings) -> (SmartTurnPool, mpsc::Sender<()>, mpsc::Receiver<usize>) {
        let (go_tx, go) = mpsc::channel();
        let (batches, batch_rx) = mpsc::channel();
        let pool = SmartTurnPool::start_with(vec![Gate { go, batches }], settings).unwrap();
        (pool, go_tx, batch_rx)
    }

    fn speech() -> Vec<f32> {
        (0..16_000).map(|i| (i as f32 * 0.07).sin() * 0.2).collect()
    }

    #[test]
    fn a_full_queue_refuses_at_once_and_what_waited_is_evaluated_as_one_batch() {
        let (pool, go, batches) = gated(PoolSettings {
            workers: 1,
            queue: 3,
            max_batch: 8,
        });
        let first = pool.submit(&speech()).unwrap();
        // The worker holds the first submission in the evaluator until we let it go.
        assert_eq!(batches.recv().unwrap(), 1);
        let waiting: Vec<_> = (0..3).map(|_| pool.submit(&speech()).unwrap()).collect();
        assert!(
            pool.submit(&speech()).is_none(),
            "a fourth waiting submission"
        );
        go.send(()).unwrap();
        assert!(first.blocking_recv().is_ok());
        // The three that waited go in one batch.
        assert_eq!(batches.recv().unwrap(), 3);
        go.send(()).unwrap();
        for verdict in waiting {
            assert!(verdict.blocking_recv().is_ok());
        }
        // Room again.
        assert!(pool.submit(&speech()).is_some());
    }

    #[test]
    fn a_submission_nobody_waits_for_is_not_evaluated() {
        let (pool, go, batches) = gated(PoolSettings {
            workers: 1,
            queue: 4,
            max_batch: 4,
        });
        let first = pool.submit(&speech()).unwrap();
        assert_eq!(batches.recv().unwrap(), 1);
        drop(pool.submit(&speech()).unwrap());
        let kept = pool.submit(&speech()).unwrap();
        go.send(()).unwrap();
        assert!(first.blocking_recv().is_ok());
        assert_eq!(batches.recv().unwrap(), 1, "only the one still awaited");
        go.send(()).unwrap();
        assert!(kept.blocking_recv().is_ok());
    }

    #[test]
    fn a_missing_or_foreign_model_file_means_no_model() {
        let dir = tempfile::tempdir().unwrap();
        let settings = |model: PathBuf| SmartTurnSettings {
            runtime: model.with_file_name(RUNTIME_FILE),
            model,
            pool: PoolSettings {
                workers: 1,
                queue: 1,
                max_batch: 1,
            },
        };
        let missing = dir.path().join(MODEL_FILE);
        assert!(matches!(
            ModelBytes::read(&missing),
            Err(SmartTurnError::Read { .. })
        ));
        assert!(start(&settings(missing)).is_none());
        let foreign = dir.path().join("other.onnx");
        std::fs::write(&foreign, b"not the model").unwrap();
        assert!(matches!(
            ModelBytes::read(&foreign),
            Err(SmartTurnError::Checksum { .. })
        ));
        assert!(start(&settings(foreign)).is_none());
    }
}
