//! Settings fail loudly: an environment variable whose value does not parse
//! stops `voxline serve` (the real binary) with a message naming the
//! variable, instead of falling back to a default. One test per kind of setting.

use std::time::Duration;

/// Runs `voxline serve` with `variable=value` (and `args`); asserts it exits
/// non-zero naming the variable and the value, and returns its stderr.
async fn serve_refuses(variable: &str, value: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_voxline"))
        .arg("--data-dir")
        .arg(dir.path())
        .arg("serve")
        .args(args)
        .env(variable, value)
        .env_remove("DATABASE_URL")
        .env_remove("VOXLINE_CONFIG")
        .kill_on_drop(true)
        .output();
    // A server that accepted the value would run until killed.
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| panic!("voxline serve started despite {variable}={value}"))
        .expect("run voxline serve");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "voxline serve accepted {variable}={value}: {stderr}"
    );
    assert!(
        stderr.contains(variable),
        "the error does not name {variable}: {stderr}"
    );
    assert!(
        stderr.contains(value),
        "the error does not show {value:?}: {stderr}"
    );
    stderr
}

/// Both listeners on port 0, so a regression that starts serving does not collide.
const EPHEMERAL: [&str; 4] = ["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"];

#[tokio::test]
async fn a_bad_storage_number_names_its_variable() {
    serve_refuses("VOXLINE_DB_POOL", "abc", &EPHEMERAL).await;
}

#[tokio::test]
async fn a_bad_address_names_its_variable() {
    serve_refuses(
        "VOXLINE_LISTEN",
        "nowhere",
        &["--admin-listen", "127.0.0.1:0"],
    )
    .await;
}

#[tokio::test]
async fn a_bad_switch_names_its_variable() {
    serve_refuses("VOXLINE_LOG_JSON", "maybe", &EPHEMERAL).await;
}

#[tokio::test]
async fn a_bad_sim_timing_names_its_variable() {
    serve_refuses("VOXLINE_SIM_ANSWER_MS", "soon", &EPHEMERAL).await;
}

#[tokio::test]
async fn a_bad_retention_names_its_variable() {
    serve_refuses("VOXLINE_RECORDING_RETENTION_DAYS", "forever", &EPHEMERAL).await;
}

#[tokio::test]
async fn a_bad_rating_wait_names_its_variable() {
    serve_refuses("VOXLINE_RATING_WEBHOOK_WAIT_SECONDS", "1m", &EPHEMERAL).await;
}

#[tokio::test]
async fn a_bad_provider_timeout_names_its_variable() {
    serve_refuses("VOXLINE_PROVIDER_READ_TIMEOUT_MS", "10s", &EPHEMERAL).await;
}

#[tokio::test]
async fn a_bad_retry_count_names_its_variable() {
    serve_refuses("VOXLINE_PROVIDER_RETRIES", "-1", &EPHEMERAL).await;
}

#[tokio::test]
async fn a_bad_platform_fee_names_its_variable() {
    serve_refuses("VOXLINE_PLATFORM_FEE_PAISE", "1.5", &EPHEMERAL).await;
}

#[tokio::test]
async fn a_bad_flag_is_reported_as_the_flag() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_voxline"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["serve", "--sim-answer-ms", "soon"])
        .args(EPHEMERAL)
        .env_remove("VOXLINE_SIM_ANSWER_MS")
        .kill_on_drop(true)
        .output()
        .await
        .expect("run voxline serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--sim-answer-ms"), "{stderr}");
    assert!(!stderr.contains("environment variable"), "{stderr}");
}

#[tokio::test]
async fn bad_calling_hours_name_their_variable_and_field() {
    let stderr = serve_refuses(
        "VOXLINE_CALLING_HOURS",
        r#"{"start":"09:00","end":"08:00"}"#,
        &EPHEMERAL,
    )
    .await;
    assert!(stderr.contains("callingHours.end"), "{stderr}");
}

#[tokio::test]
async fn bad_sip_settings_name_their_variables() {
    let stderr = serve_refuses("VOXLINE_SIP_LISTEN", "sip.example.com", &EPHEMERAL).await;
    assert!(stderr.contains("host:port"), "{stderr}");
    let stderr = serve_refuses("VOXLINE_RTP_PORTS", "40000:40999", &EPHEMERAL).await;
    assert!(stderr.contains("first-last"), "{stderr}");
    let stderr = serve_refuses("VOXLINE_RTP_PORTS", "80-90", &EPHEMERAL).await;
    assert!(stderr.contains("1024"), "{stderr}");
    let stderr = serve_refuses("VOXLINE_SIP_TLS_LISTEN", "127.0.0.1:0", &EPHEMERAL).await;
    assert!(
        stderr.contains("VOXLINE_SIP_TLS_CERT_FILE") && stderr.contains("VOXLINE_SIP_TLS_KEY_FILE"),
        "{stderr}"
    );
    let stderr = serve_refuses(
        "VOXLINE_SIP_TLS_CA_FILE",
        "/nonexistent/voxline-ca.pem",
        &EPHEMERAL,
    )
    .await;
    assert!(
        stderr.contains("VOXLINE_SIP_TLS_CA_FILE") && stderr.contains("voxline-ca.pem"),
        "{stderr}"
    );
    let not_pem = std::env::temp_dir().join(format!("voxline-not-pem-{}.txt", std::process::id()));
    std::fs::write(&not_pem, "not a certificate").unwrap();
    let stderr = serve_refuses(
        "VOXLINE_SIP_TLS_CA_FILE",
        not_pem.to_str().unwrap(),
        &EPHEMERAL,
    )
    .await;
    let _ = std::fs::remove_file(&not_pem);
    assert!(stderr.contains("holds no PEM certificate"), "{stderr}");
}
