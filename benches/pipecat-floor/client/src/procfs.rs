//! A process's CPU time and resident memory, read from `/proc/PID/stat` and `/proc/PID/status`
//! (the same fields `voxline loadgen --server-pid` reads).

use anyhow::{Context, bail};

/// Clock ticks per second of `/proc/*/stat` times (`USER_HZ`, 100 on every Linux port).
const TICKS_PER_SECOND: f64 = 100.0;

/// One reading of a process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcSample {
    /// User plus system CPU time so far, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size (`VmRSS`), KiB.
    pub rss_kib: u64,
}

/// Reads `pid`'s CPU time and RSS.
pub fn read(pid: u32) -> anyhow::Result<ProcSample> {
    let stat_path = format!("/proc/{pid}/stat");
    let stat =
        std::fs::read_to_string(&stat_path).with_context(|| format!("reading {stat_path}"))?;
    let status_path = format!("/proc/{pid}/status");
    let status =
        std::fs::read_to_string(&status_path).with_context(|| format!("reading {status_path}"))?;
    Ok(ProcSample {
        cpu_seconds: parse_cpu_ticks(&stat)? as f64 / TICKS_PER_SECOND,
        rss_kib: parse_vm_rss_kib(&status)?,
    })
}

/// utime + stime (fields 14 and 15) of a `stat` line, in clock ticks. The command name may
/// hold spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_cpu_ticks(stat: &str) -> anyhow::Result<u64> {
    let Some(close) = stat.rfind(')') else {
        bail!("no ')' in stat line {stat:?}");
    };
    // Fields after the command start at field 3 (state).
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let field = |number: usize| -> anyhow::Result<u64> {
        let Some(text) = fields.get(number - 3) else {
            bail!("stat line has no field {number}");
        };
        text.parse::<u64>()
            .with_context(|| format!("stat field {number} is {text:?}"))
    };
    Ok(field(14)? + field(15)?)
}

/// `VmRSS` in KiB from a `status` text.
pub fn parse_vm_rss_kib(status: &str) -> anyhow::Result<u64> {
    let Some(line) = status.lines().find(|line| line.starts_with("VmRSS:")) else {
        bail!("no VmRSS line in status");
    };
    let mut parts = line["VmRSS:".len()..].split_whitespace();
    match (parts.next().map(str::parse::<u64>), parts.next()) {
        (Some(Ok(kib)), Some("kB")) => Ok(kib),
        _ => bail!("unexpected VmRSS line {line:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command() {
        let stat = "4242 (python3 (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 1234 56 0 0 20 0 3 0";
        assert_eq!(parse_cpu_ticks(stat).unwrap(), 1290);
        assert!(parse_cpu_ticks("4242 python3 S 1").is_err());
    }

    #[test]
    fn vm_rss_is_read_in_kib() {
        let status = "Name:\tpython3\nVmPeak:\t 900000 kB\nVmRSS:\t   51234 kB\nThreads:\t9\n";
        assert_eq!(parse_vm_rss_kib(status).unwrap(), 51234);
        assert!(parse_vm_rss_kib("VmRSS:\t12 MB\n").is_err());
        assert!(parse_vm_rss_kib("Name:\tx\n").is_err());
    }

    #[test]
    fn reads_this_process() {
        let sample = read(std::process::id()).unwrap();
        assert!(sample.rss_kib > 0);
        assert!(sample.cpu_seconds >= 0.0);
    }
}
