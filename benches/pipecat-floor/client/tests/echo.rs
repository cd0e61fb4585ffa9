//! The client against a tiny Twilio-protocol echo server started in the test: it must count
//! every frame that comes back, the rate at which it comes, and a server that returns only
//! half, or hangs up early, must show in the figures.

// Tests may unwrap: a panic there is a failed test, which is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use pipecat_floor_client::{Config, Report, run};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// How the test server answers.
#[derive(Clone, Copy)]
enum Echo {
    /// Returns every `n`-th media event.
    Every(u64),
    /// Closes the stream after this many media events.
    HangUpAfter(u64),
}

async fn echo_server(echo: Echo) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut socket = tokio_tungstenite::accept_async(tcp).await.unwrap();
                let mut media = 0u64;
                let mut stream_sid = String::new();
                let mut saw_connected = false;
                while let Some(Ok(message)) = socket.next().await {
                    let Message::Text(text) = message else {
                        continue;
                    };
                    let event: serde_json::Value = serde_json::from_str(text.as_str()).unwrap();
                    match event["event"].as_str().unwrap() {
                        "connected" => saw_connected = true,
                        "start" => {
                            assert!(saw_connected, "start before connected");
                            let start = &event["start"];
                            assert_eq!(start["mediaFormat"]["encoding"], "audio/x-mulaw");
                            assert_eq!(start["mediaFormat"]["sampleRate"], 8000);
                            assert_eq!(start["mediaFormat"]["channels"], 1);
                            assert!(start["callSid"].as_str().unwrap().starts_with("CA"));
                            stream_sid = start["streamSid"].as_str().unwrap().to_owned();
                        }
                        "media" => {
                            assert_eq!(event["streamSid"], stream_sid.as_str());
                            media += 1;
                            match echo {
                                Echo::Every(n) if media.is_multiple_of(n) => {
                                    let back = serde_json::json!({
                                        "event": "media",
                                        "streamSid": stream_sid,
                                        "media": {"payload": event["media"]["payload"]},
                                    });
                                    socket.send(Message::text(back.to_string())).await.unwrap();
                                }
                                Echo::HangUpAfter(n) if media >= n => break,
                                _ => {}
                            }
                        }
                        "stop" => break,
                        other => panic!("unexpected event {other}"),
                    }
                }
                let _ = socket.close(None).await;
            });
        }
    });
    address
}

async fn run_against(echo: Echo, calls: usize) -> Report {
    let address = echo_server(echo).await;
    run(&Config {
        url: format!("ws://{address}/ws"),
        calls,
        duration: Duration::from_secs(4),
        warmup: Duration::from_millis(500),
        idle: Duration::from_millis(300),
        drain: Duration::from_secs(1),
        // The server runs in this process.
        server_pid: Some(std::process::id()),
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_echo_returns_every_frame_at_50_a_second() {
    let report = run_against(Echo::Every(1), 4).await;
    assert_eq!(report.started, 4);
    assert_eq!(report.failed, 0, "{:?}", report.failures);
    // 4 s of 20 ms frames per call.
    assert_eq!(report.frames_sent, 4 * 200);
    assert_eq!(report.frames_returned, report.frames_sent);
    assert!((report.audio_seconds_returned - 16.0).abs() < 1e-9);
    let plateau = &report.plateau;
    assert_eq!(plateau.live_calls, 4);
    assert!(plateau.seconds >= 1.0, "{plateau:?}");
    assert!(
        (42.0..=58.0).contains(&plateau.frames_sent_per_second_per_call),
        "{plateau:?}"
    );
    assert!(
        (42.0..=58.0).contains(&plateau.frames_returned_per_second_per_call),
        "{plateau:?}"
    );
    assert!(
        plateau.frames_returned_per_second_min >= 35.0,
        "{plateau:?}"
    );
    let usage = plateau.usage.unwrap();
    assert_eq!(usage.server_pid, std::process::id());
    assert!(usage.plateau_cpu_cores > 0.0, "{usage:?}");
    assert!(usage.cpu_percent_of_core_per_call >= 0.0);
    assert!(usage.plateau_rss_kib > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_returning_half_shows_25_a_second() {
    let report = run_against(Echo::Every(2), 3).await;
    assert_eq!(report.failed, 0, "{:?}", report.failures);
    assert_eq!(report.frames_sent, 3 * 200);
    assert_eq!(report.frames_returned, 3 * 100);
    let plateau = &report.plateau;
    assert!(
        (20.0..=30.0).contains(&plateau.frames_returned_per_second_per_call),
        "{plateau:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_hanging_up_early_fails_the_calls() {
    let report = run_against(Echo::HangUpAfter(10), 2).await;
    assert_eq!(report.started, 2);
    assert_eq!(report.failed, 2, "{:?}", report.failures);
    assert!(report.frames_sent < 2 * 200);
    assert_eq!(report.frames_returned, 0);
    assert_eq!(report.plateau.live_calls, 0);
}
