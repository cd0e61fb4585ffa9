//! Recording formats (issue 21): with the `opus` feature every call is also
//! recorded as Ogg Opus beside the WAV; `/recording` serves the format the
//! `format` query or `Accept` asks for, the signed link by its extension, and
//! retention deletes both. Without the feature, asking for Ogg is a clear 404.
//! Calls run end to end on the sim carrier.

use crate::support::{TestApp, Workspace, eventually};
use chrono::Utc;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;
use voxline::domain::Paise;
use voxline::domain::clock::ManualClock;

const CALL_WAIT: Duration = Duration::from_secs(40);

/// A workspace dialing on the sim carrier, and a call of it that has ended; returns its id.
async fn recorded_call(app: &TestApp) -> (Workspace, String) {
    let ws = app.workspace("Formats").await;
    let now = app.now();
    app.store()
        .credit_wallet(ws.org_id, Paise(1_000_000), now.timestamp_millis())
        .await
        .expect("credit");
    app.add_number(&ws, "+918000000012", "sim").await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({
                "name": "Recorder",
                "welcomeMessage": "Hello from Voxline.",
                "prompt": "You confirm appointments.",
            }),
        )
        .await;
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent["id"], "to": "+919845012310",
                   "variables": {"simScript": ["Yes, I can talk.", "Goodbye."]}}),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().expect("callId").to_string();
    let call = eventually(CALL_WAIT, "the call to end", || async {
        let call = app.get(&ws.key, &format!("/api/calls/{id}")).await.body;
        let status = call["rawStatus"].as_str().unwrap_or_default();
        (!["queued", "ringing", "in-progress"].contains(&status)).then_some(call)
    })
    .await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    (ws, id)
}

/// GET `/api/calls/{id}/recording{query}` with an optional `Accept`: status, content type, body.
async fn recording(
    app: &TestApp,
    ws: &Workspace,
    id: &str,
    query: &str,
    accept: Option<&str>,
) -> (u16, String, Vec<u8>) {
    let mut req = app.request(
        &ws.key,
        Method::GET,
        &format!("/api/calls/{id}/recording{query}"),
    );
    if let Some(accept) = accept {
        req = req.header("accept", accept);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (
        status,
        content_type,
        resp.bytes().await.expect("body").to_vec(),
    )
}

fn message(body: &[u8]) -> String {
    let value: Value = serde_json::from_slice(body).expect("a JSON error");
    value["message"].as_str().unwrap_or_default().to_string()
}

/// A WAV's length from its header: data bytes over 32,000 bytes a second (8 kHz, 16-bit stereo).
#[cfg(feature = "opus")]
fn wav_seconds(wav: &[u8]) -> f64 {
    assert_eq!(&wav[..4], b"RIFF");
    let data = u32::from_le_bytes([wav[40], wav[41], wav[42], wav[43]]);
    f64::from(data) / 32_000.0
}

#[tokio::test]
async fn the_format_query_is_checked_and_the_wav_is_served_by_default() {
    let app = TestApp::spawn().await;
    let (ws, id) = recorded_call(&app).await;
    for (query, accept) in [
        ("", None),
        ("?format=wav", None),
        ("", Some("audio/wav")),
        ("", Some("audio/x-wav")),
        ("", Some("*/*")),
        ("?format=wav", Some("audio/ogg")),
        ("", Some("application/json")),
    ] {
        let (status, content_type, body) = recording(&app, &ws, &id, query, accept).await;
        assert_eq!(status, 200, "{query} {accept:?}");
        assert_eq!(content_type, "audio/wav", "{query} {accept:?}");
        assert_eq!(&body[..4], b"RIFF");
    }
    let (status, _, body) = recording(&app, &ws, &id, "?format=mp3", None).await;
    assert_eq!(status, 400);
    assert!(message(&body).starts_with("format "), "{}", message(&body));
    let refused = app
        .get(
            &ws.key,
            &format!("/api/calls/{id}/recording-url?format=flac"),
        )
        .await
        .expect(400);
    assert!(refused.message().starts_with("format "), "{}", refused.text);

    let link = app
        .get(&ws.key, &format!("/api/calls/{id}/recording-url"))
        .await
        .expect(200)
        .body;
    let url = link["url"].as_str().expect("url");
    assert!(url.contains(".wav?"), "{url}");
    let formats: Vec<&str> = link["formats"]
        .as_array()
        .expect("formats")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if cfg!(feature = "opus") {
        assert_eq!(formats, ["wav", "ogg"]);
    } else {
        assert_eq!(formats, ["wav"]);
    }
}

/// Without the `opus` feature no Ogg is written, and asking for one says so.
#[cfg(not(feature = "opus"))]
#[tokio::test]
async fn without_opus_asking_for_ogg_is_a_clear_refusal() {
    let app = TestApp::spawn().await;
    let (ws, id) = recorded_call(&app).await;
    for (query, accept) in [("?format=ogg", None), ("", Some("audio/ogg"))] {
        let (status, _, body) = recording(&app, &ws, &id, query, accept).await;
        assert_eq!(status, 404, "{query} {accept:?}");
        let message = message(&body);
        assert!(
            message.contains("no ogg recording") && message.contains("opus feature"),
            "{message}"
        );
    }
    // An Accept that also takes WAV gets the WAV.
    let (status, content_type, _) =
        recording(&app, &ws, &id, "", Some("audio/ogg, audio/wav;q=0.5")).await;
    assert_eq!((status, content_type.as_str()), (200, "audio/wav"));
    let link = app
        .get(&ws.key, &format!("/api/calls/{id}/recording-url"))
        .await
        .expect(200)
        .body;
    let ogg_link = link["url"].as_str().expect("url").replace(".wav?", ".ogg?");
    let resp = app.http.get(&ogg_link).send().await.expect("send");
    assert_eq!(resp.status().as_u16(), 404);
    app.get(
        &ws.key,
        &format!("/api/calls/{id}/recording-url?format=ogg"),
    )
    .await
    .expect(404);
}

/// Decodes an Ogg Opus file with libopus: (channels in its header, samples per channel at 8 kHz,
/// peak level of each channel).
#[cfg(feature = "opus")]
fn decode_ogg_opus(bytes: &[u8]) -> (u8, usize, [i32; 2]) {
    use voxline_media::ogg::parse_ogg_pages;
    use voxline_media::opus::audiopus::coder::Decoder;
    use voxline_media::opus::audiopus::{Channels, SampleRate};
    let pages = parse_ogg_pages(bytes).expect("Ogg pages");
    assert!(pages.iter().all(|p| p.crc_ok), "every page's CRC holds");
    let head = &pages[0].packets[0];
    assert_eq!(&head[..8], b"OpusHead");
    let channels = head[9];
    assert_eq!(&pages[1].packets[0][..8], b"OpusTags");
    let mut decoder = Decoder::new(SampleRate::Hz8000, Channels::Stereo).expect("decoder");
    let mut pcm = vec![0i16; 2 * 960];
    let mut samples = 0;
    let mut peaks = [0i32; 2];
    for packet in pages[2..].iter().flat_map(|p| p.packets.iter()) {
        let decoded = decoder
            .decode(Some(packet.as_slice()), pcm.as_mut_slice(), false)
            .expect("decodes");
        for frame in pcm[..decoded * 2].chunks_exact(2) {
            peaks[0] = peaks[0].max(i32::from(frame[0]).abs());
            peaks[1] = peaks[1].max(i32::from(frame[1]).abs());
        }
        samples += decoded;
    }
    (channels, samples, peaks)
}

#[cfg(feature = "opus")]
#[tokio::test]
async fn the_ogg_recording_decodes_to_the_calls_length_in_stereo() {
    let app = TestApp::spawn().await;
    let (ws, id) = recorded_call(&app).await;
    let (status, content_type, wav) = recording(&app, &ws, &id, "", None).await;
    assert_eq!((status, content_type.as_str()), (200, "audio/wav"));
    let wav_length = wav_seconds(&wav);

    let (status, content_type, ogg) = recording(&app, &ws, &id, "?format=ogg", None).await;
    assert_eq!((status, content_type.as_str()), (200, "audio/ogg"));
    assert_eq!(&ogg[..4], b"OggS");
    let (channels, samples, peaks) = decode_ogg_opus(&ogg);
    assert_eq!(channels, 2);
    let ogg_length = samples as f64 / 8_000.0;
    assert!(
        (ogg_length - wav_length).abs() <= 0.04,
        "ogg {ogg_length:.3} s, wav {wav_length:.3} s"
    );
    assert!(wav_length > 2.0, "{wav_length}");
    // Caller left, agent right: both spoke.
    assert!(peaks[0] > 500 && peaks[1] > 500, "{peaks:?}");

    // Accept picks it too, and the query wins over Accept.
    for (query, accept, expected) in [
        ("", Some("audio/ogg"), "audio/ogg"),
        ("", Some("audio/wav;q=0.5, audio/ogg"), "audio/ogg"),
        ("", Some("audio/*"), "audio/wav"),
        ("?format=ogg", Some("audio/wav"), "audio/ogg"),
        ("?format=wav", Some("audio/ogg"), "audio/wav"),
    ] {
        let (status, content_type, body) = recording(&app, &ws, &id, query, accept).await;
        assert_eq!(status, 200, "{query} {accept:?}");
        assert_eq!(content_type, expected, "{query} {accept:?}");
        if expected == "audio/ogg" {
            assert_eq!(body, ogg);
        }
    }
    // Range works on the Ogg too.
    let resp = app
        .request(
            &ws.key,
            Method::GET,
            &format!("/api/calls/{id}/recording?format=ogg"),
        )
        .header("range", "bytes=0-3")
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 206);
    assert_eq!(resp.bytes().await.expect("body").as_ref(), b"OggS");

    // The signed link: asked as ogg, or the WAV link with the other extension.
    let link = app
        .get(
            &ws.key,
            &format!("/api/calls/{id}/recording-url?format=ogg"),
        )
        .await
        .expect(200)
        .body;
    let url = link["url"].as_str().expect("url");
    assert!(url.contains(".ogg?"), "{url}");
    let resp = app.http.get(url).send().await.expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("audio/ogg")
    );
    assert_eq!(resp.bytes().await.expect("body").to_vec(), ogg);
}

#[tokio::test]
async fn retention_deletes_every_format_of_a_recording() {
    let clock = ManualClock::new(Utc::now());
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let (ws, id) = recorded_call(&app).await;
    let dir = app.data_dir.join("recordings").join(ws.org_id.to_string());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("recordings dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut expected = vec![format!("{id}.wav")];
    if cfg!(feature = "opus") {
        expected.insert(0, format!("{id}.ogg"));
    }
    assert_eq!(names, expected);

    clock.advance(chrono::Duration::days(91));
    eventually(
        Duration::from_secs(10),
        "every recording object to go",
        || async {
            let left = std::fs::read_dir(&dir)
                .map(|d| d.filter_map(Result::ok).count())
                .unwrap_or(0);
            (left == 0).then_some(())
        },
    )
    .await;
    for query in ["", "?format=ogg", "?format=wav"] {
        app.get(&ws.key, &format!("/api/calls/{id}/recording{query}"))
            .await
            .expect(404);
    }
}
