//! CPU time and resident memory of a process, read from `/proc`: the node's
//! heartbeat measures its own CPU use with it, and the load generator the
//! server's.
//!
//! In-process load runs share one process between the server and the callee fleet, so the fleet
//! runs on threads of its own name and their CPU time is subtracted from the process total
//! (the process total also keeps the time of threads that already exited).

use std::path::PathBuf;

/// Clock ticks per second of `/proc/*/stat` times (`USER_HZ`, 100 on every Linux port).
const TICKS_PER_SECOND: f64 = 100.0;

/// Why `/proc` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The file could not be read (no such process, not Linux).
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file did not have the expected shape.
    #[error("unexpected contents in {what}: {detail}")]
    Format {
        /// Which file.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
}

/// The fields of one `/proc/<pid>/stat` (or `/proc/<pid>/task/<tid>/stat`) line we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatLine {
    /// The command (thread) name.
    pub comm: String,
    /// User plus system time, in clock ticks.
    pub cpu_ticks: u64,
}

/// Parses a `stat` line: `pid (comm) state ppid … utime stime …`; `comm` may hold spaces
/// and parentheses, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Result<StatLine, ProcError> {
    let format = |detail: &str| ProcError::Format {
        what: "stat",
        detail: detail.to_owned(),
    };
    let open = text.find('(').ok_or_else(|| format("no '('"))?;
    let close = text.rfind(')').ok_or_else(|| format("no ')'"))?;
    if close < open {
        return Err(format("')' before '('"));
    }
    let comm = text[open + 1..close].to_owned();
    // Fields after the comm start at field 3 (state); utime is field 14, stime field 15.
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |number: usize| -> Result<u64, ProcError> {
        fields
            .get(number - 3)
            .ok_or_else(|| format(&format!("missing field {number}")))?
            .parse::<u64>()
            .map_err(|_| format(&format!("field {number} is not a number")))
    };
    Ok(StatLine {
        comm,
        cpu_ticks: field(14)? + field(15)?,
    })
}

/// Reads `VmRSS` (KiB) from a `/proc/<pid>/status` text.
pub fn parse_vm_rss_kib(status: &str) -> Result<u64, ProcError> {
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .ok_or_else(|| ProcError::Format {
            what: "status",
            detail: "no VmRSS line".to_owned(),
        })?;
    let mut parts = line["VmRSS:".len()..].split_whitespace();
    let value = parts.next().and_then(|v| v.parse::<u64>().ok());
    match (value, parts.next()) {
        (Some(kib), Some("kB")) => Ok(kib),
        _ => Err(ProcError::Format {
            what: "status",
            detail: format!("VmRSS line {line:?}"),
        }),
    }
}

/// Converts clock ticks to seconds.
pub fn ticks_to_seconds(ticks: u64) -> f64 {
    ticks as f64 / TICKS_PER_SECOND
}

/// One reading of the server's usage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// CPU seconds used so far (user + system).
    pub cpu_seconds: f64,
    /// Resident set size, KiB.
    pub rss_kib: u64,
}

/// Reads one process's usage, optionally without the threads of one name.
#[derive(Debug, Clone)]
pub struct ProcessProbe {
    root: PathBuf,
    exclude_threads: Option<String>,
}

impl ProcessProbe {
    /// Probes this process, all of its threads.
    pub fn this_process() -> Self {
        Self {
            root: PathBuf::from("/proc/self"),
            exclude_threads: None,
        }
    }

    /// Probes this process, leaving out threads named `exclude_threads` (the load fleet).
    pub fn current_process(exclude_threads: &str) -> Self {
        Self {
            root: PathBuf::from("/proc/self"),
            exclude_threads: Some(exclude_threads.to_owned()),
        }
    }

    /// Probes another process (the server under `--target`).
    pub fn process(pid: u32) -> Self {
        Self {
            root: PathBuf::from(format!("/proc/{pid}")),
            exclude_threads: None,
        }
    }

    fn read(&self, relative: &str) -> Result<String, ProcError> {
        let path = self.root.join(relative);
        std::fs::read_to_string(&path).map_err(|source| ProcError::Read { path, source })
    }

    /// Samples CPU seconds and RSS now.
    pub fn sample(&self) -> Result<Usage, ProcError> {
        let mut ticks = parse_stat(&self.read("stat")?)?.cpu_ticks;
        if let Some(name) = &self.exclude_threads {
            ticks = ticks.saturating_sub(self.thread_ticks(name)?);
        }
        Ok(Usage {
            cpu_seconds: ticks_to_seconds(ticks),
            rss_kib: parse_vm_rss_kib(&self.read("status")?)?,
        })
    }

    /// CPU ticks of the live threads named `name`.
    fn thread_ticks(&self, name: &str) -> Result<u64, ProcError> {
        let dir = self.root.join("task");
        let entries = std::fs::read_dir(&dir).map_err(|source| ProcError::Read {
            path: dir.clone(),
            source,
        })?;
        let mut total = 0;
        for entry in entries.flatten() {
            // A thread may exit between listing and reading; it simply no longer counts.
            let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let line = parse_stat(&text)?;
            if line.comm == name {
                total += line.cpu_ticks;
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (tokio (worker) 1) S 1 4242 4242 0 -1 4194560 5321 0 0 0 \
                        1234 567 0 0 20 0 9 0 123456 987654321 2500 18446744073709551615";

    #[test]
    fn stat_fields_are_counted_from_the_last_paren() {
        let line = parse_stat(STAT).unwrap();
        assert_eq!(line.comm, "tokio (worker) 1");
        assert_eq!(line.cpu_ticks, 1234 + 567);
        assert!((ticks_to_seconds(line.cpu_ticks) - 18.01).abs() < 1e-9);
    }

    #[test]
    fn truncated_stat_is_an_error() {
        assert!(parse_stat("1 (x) S 1 2 3").is_err());
        assert!(parse_stat("no parens at all").is_err());
        assert!(parse_stat("1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 5").is_err());
    }

    #[test]
    fn vm_rss_is_read_in_kib() {
        let status = "Name:\tvoxline\nVmPeak:\t  900000 kB\nVmRSS:\t   51234 kB\nThreads:\t9\n";
        assert_eq!(parse_vm_rss_kib(status).unwrap(), 51_234);
        assert!(parse_vm_rss_kib("Name:\tx\n").is_err());
        assert!(parse_vm_rss_kib("VmRSS:\t12 MB\n").is_err());
    }

    #[test]
    fn own_process_can_be_sampled() {
        let usage = ProcessProbe::current_process("no-such-thread")
            .sample()
            .unwrap();
        assert!(usage.rss_kib > 0);
        assert!(usage.cpu_seconds >= 0.0);
    }
}
