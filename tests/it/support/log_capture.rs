//! The process's one tracing subscriber. A test binary can install only one,
//! and two kinds of test want it: `VOXLINE_TEST_LOG=<filter>` prints the
//! servers' logs through the test writer, and tests that prove a secret never
//! reaches a log line read everything logged at DEBUG once they call [`logs`].
//! Capture stays off until then, so the other tests pay nothing for it.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tracing::Level;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, dynamic_filter_fn};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer as _, fmt};

/// Env var holding a filter for printing the servers' logs, e.g. `warn`.
const TEST_LOG_ENV: &str = "VOXLINE_TEST_LOG";

/// Set by the first [`logs`] call; from then on the capture layer records.
static CAPTURING: AtomicBool = AtomicBool::new(false);

/// Every log line formatted since capture started.
#[derive(Clone, Default)]
pub struct LogBuffer(pub Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Starts capturing every log line of this process at DEBUG (for good: tests
/// running beside it are captured too) and returns the buffer.
pub fn logs() -> &'static LogBuffer {
    CAPTURING.store(true, Ordering::SeqCst);
    installed()
}

/// Installs the subscriber when `VOXLINE_TEST_LOG` asks for the servers' logs.
pub fn install_if_asked() {
    if std::env::var_os(TEST_LOG_ENV).is_some() {
        installed();
    }
}

/// The subscriber, installed on first use: a capture layer that records
/// only while [`CAPTURING`] is set, and a printing layer when asked for.
fn installed() -> &'static LogBuffer {
    static BUFFER: OnceLock<LogBuffer> = OnceLock::new();
    BUFFER.get_or_init(|| {
        let buffer = LogBuffer::default();
        let writer = buffer.clone();
        // Dynamic, so callsites are asked again after capture starts.
        let capturing = dynamic_filter_fn(|meta, _| {
            CAPTURING.load(Ordering::Relaxed) && *meta.level() <= Level::DEBUG
        })
        .with_max_level_hint(LevelFilter::DEBUG);
        let capture = fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .with_filter(capturing);
        let print = std::env::var(TEST_LOG_ENV).ok().map(|filter| {
            fmt::layer()
                .with_test_writer()
                .with_filter(EnvFilter::new(filter))
        });
        tracing_subscriber::registry()
            .with(capture)
            .with(print)
            .init();
        buffer
    })
}
