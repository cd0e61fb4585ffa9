//! baresip, a SIP phone nobody here wrote (Debian's `baresip-core`), run on
//! loopback as the far end of SIP calls: it auto-answers, plays a WAV through
//! its file audio source, records what it hears (the `sndfile` module), and
//! takes commands (dial, send DTMF, hang up) over its `ctrl_tcp` socket.

use serde_json::{Value, json};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// The baresip binary.
const BARESIP: &str = "baresip";

/// A running baresip.
pub struct Baresip {
    child: Child,
    dir: TempDir,
    /// Where it takes SIP (UDP and TCP).
    pub sip: SocketAddr,
    ctrl: SocketAddr,
}

/// Whether baresip is installed; tests that need it say they skip otherwise.
pub fn baresip_installed() -> bool {
    std::process::Command::new(BARESIP)
        .arg("-h")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A port free on loopback for both UDP and TCP right now.
fn free_port() -> u16 {
    loop {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("a UDP port");
        let port = udp.local_addr().expect("its address").port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

impl Baresip {
    /// Starts baresip as `user` (its account's user part: the number calls to
    /// it are addressed to), playing `source` (an 8 kHz mono 16-bit WAV) to
    /// every call it answers.
    pub async fn start(user: &str, source: &Path) -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        let sip = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let ctrl = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let config = format!(
            "module_path\t/usr/lib/baresip/modules\n\
             poll_method\tepoll\n\
             sip_listen\t{sip}\n\
             audio_player\taubridge,nil\n\
             audio_source\taufile,{source}\n\
             audio_alert\taubridge,nil\n\
             ausrc_srate\t8000\n\
             auplay_srate\t8000\n\
             ausrc_channels\t1\n\
             auplay_channels\t1\n\
             rtp_timeout\t0\n\
             module\tg711.so\n\
             module\taufile.so\n\
             module\taubridge.so\n\
             module\tsndfile.so\n\
             module_app\taccount.so\n\
             module_app\tmenu.so\n\
             module_app\tctrl_tcp.so\n\
             ctrl_tcp_listen\t{ctrl}\n\
             snd_path\t{records}\n",
            source = source.display(),
            records = dir.path().display(),
        );
        std::fs::write(dir.path().join("config"), config).expect("baresip config");
        std::fs::write(
            dir.path().join("accounts"),
            format!("<sip:{user}@{sip}>;regint=0;answermode=auto\n"),
        )
        .expect("baresip accounts");
        let log = std::fs::File::create(dir.path().join("baresip.log")).expect("a log file");
        let child = Command::new(BARESIP)
            .arg("-4")
            // The SIP trace goes to its log: tests read what was said, failures show it.
            .arg("-s")
            .arg("-f")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("baresip starts");
        let this = Self {
            child,
            dir,
            sip,
            ctrl,
        };
        for _ in 0..250 {
            if TcpStream::connect(ctrl).await.is_ok() {
                return this;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("baresip did not start:\n{}", this.log());
    }

    /// baresip's own log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("baresip.log")).unwrap_or_default()
    }

    /// Sends one command over `ctrl_tcp` (a JSON netstring) and returns its response.
    pub async fn command(&self, command: &str, params: &str) -> Value {
        let mut stream = TcpStream::connect(self.ctrl).await.expect("ctrl_tcp");
        let body = json!({"command": command, "params": params, "token": "t"}).to_string();
        stream
            .write_all(format!("{}:{body},", body.len()).as_bytes())
            .await
            .expect("a command sent");
        // Events may come first; read netstrings until the response.
        let mut buffer = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            while let Some((message, rest)) = netstring(&buffer) {
                buffer = rest;
                if message["response"] == true {
                    return message;
                }
            }
            let mut chunk = [0u8; 4096];
            let read = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
                .await
                .expect("a ctrl_tcp response in time")
                .expect("ctrl_tcp read");
            assert!(read > 0, "ctrl_tcp closed before responding");
            buffer.extend_from_slice(&chunk[..read]);
        }
    }

    /// The WAV files baresip recorded of what it heard (`dump-…-dec.wav`).
    pub fn heard(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .map(|dir| {
                dir.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with("dump-") && n.ends_with("-dec.wav"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    }

    /// Stops baresip (its recordings stay until it is dropped).
    pub async fn stop(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// One JSON netstring off the front of `buffer`, and the rest.
fn netstring(buffer: &[u8]) -> Option<(Value, Vec<u8>)> {
    let colon = buffer.iter().position(|b| *b == b':')?;
    let len: usize = std::str::from_utf8(&buffer[..colon]).ok()?.parse().ok()?;
    let end = colon + 1 + len;
    if buffer.len() <= end {
        return None;
    }
    let message = serde_json::from_slice(&buffer[colon + 1..end]).unwrap_or(Value::Null);
    Some((message, buffer[end + 1..].to_vec()))
}
