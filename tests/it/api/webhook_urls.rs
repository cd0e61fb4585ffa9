//! Issue 19 point 4: a webhook URL is checked when it is stored. Loopback,
//! private, link-local and metadata addresses are refused by `admin webhook
//! add` unless the operator's allow-list names the host.

use crate::support::TestApp;

/// Runs `admin webhook add` for `url`; `(succeeded, stdout, stderr)`.
async fn add(app: &TestApp, org: &str, url: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["webhook", "add", "--org", org, "--url", url];
    args.extend_from_slice(extra);
    let out = app.admin(&args).await;
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn internal_webhook_urls_are_refused_when_added_unless_allow_listed() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Hooks").await;
    let org = ws.org_id.to_string();
    let why = "a loopback, private, link-local or metadata address; only hosts on the \
               allow-list (--allow-host or VOXLINE_WEBHOOK_ALLOW_HOSTS) may receive webhooks";
    // The harness passes the test servers' allow-list (127.0.0.1, localhost); these are not on it.
    for (url, host, address) in [
        ("http://127.0.0.2:8080/hook", "127.0.0.2", "127.0.0.2"),
        ("http://10.1.2.3/hook", "10.1.2.3", "10.1.2.3"),
        ("https://172.16.0.9/hook", "172.16.0.9", "172.16.0.9"),
        ("http://192.168.1.10/hook", "192.168.1.10", "192.168.1.10"),
        (
            "http://169.254.169.254/latest/meta-data",
            "169.254.169.254",
            "169.254.169.254",
        ),
        (
            "http://[fd00:ec2::254]/hook",
            "fd00:ec2::254",
            "fd00:ec2::254",
        ),
        ("http://[fc00::1]/hook", "fc00::1", "fc00::1"),
        ("http://[::1]:9/hook", "::1", "::1"),
    ] {
        let (ok, stdout, stderr) = add(&app, &org, url, &[]).await;
        assert!(!ok, "{url} was accepted: {stdout}");
        assert!(stdout.is_empty(), "{url}: {stdout}");
        assert_eq!(
            stderr.trim(),
            format!("voxline admin: --url is refused: {host} resolves to {address}, {why}"),
            "{url}"
        );
    }
    // A name is resolved and checked too (an explicit list replaces the harness's).
    let (ok, _, stderr) = add(
        &app,
        &org,
        "http://localhost:9/hook",
        &["--allow-host", "127.0.0.1"],
    )
    .await;
    assert!(!ok);
    assert!(
        stderr.starts_with("voxline admin: --url is refused: localhost resolves to "),
        "{stderr}"
    );

    // The allow-list admits loopback (the harness sets the test servers' list) …
    let (ok, stdout, stderr) = add(&app, &org, "http://127.0.0.1:9/hook", &[]).await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains("http://127.0.0.1:9/hook"), "{stdout}");
    // … and --allow-host names one more host.
    let (ok, _, stderr) = add(
        &app,
        &org,
        "http://10.1.2.3/hook",
        &["--allow-host", "10.1.2.3"],
    )
    .await;
    assert!(ok, "{stderr}");
    // A public address needs no allow-list.
    let (ok, _, stderr) = add(&app, &org, "https://203.0.113.10/hook", &[]).await;
    assert!(ok, "{stderr}");
    assert_eq!(app.store().webhooks(ws.org_id).await.unwrap().len(), 3);
}
