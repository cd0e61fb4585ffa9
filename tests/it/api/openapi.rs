//! `/openapi.json`, `/docs`, `/healthz`, `/readyz` (decisions §13).

use crate::support::TestApp;
use reqwest::Method;
use serde_json::{Value, json};

/// Routes issue 2 ships; each must be in the document.
const KNOWN_ROUTES: &[(&str, &str)] = &[
    ("get", "/api/agents"),
    ("post", "/api/agents"),
    ("get", "/api/agents/{agentId}"),
    ("patch", "/api/agents/{agentId}"),
    ("delete", "/api/agents/{agentId}"),
    ("post", "/api/agents/{agentId}/restore"),
    ("post", "/api/agents/{agentId}/activate"),
    ("post", "/api/agents/{agentId}/deactivate"),
    ("get", "/api/numbers"),
    ("get", "/api/wallet"),
    ("get", "/api/wallet/transactions"),
    ("get", "/api/balances"),
    ("get", "/api/recordings"),
];

const METHODS: &[&str] = &["get", "post", "put", "patch", "delete"];

fn concrete(path: &str) -> String {
    // Fill every {param} with an id no workspace owns.
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').expect("closed param") + open;
        out.push_str(&uuid::Uuid::now_v7().to_string());
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn openapi_document_describes_every_route() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    app.set_limits(ws.key_id, 100_000, 1_000_000).await;
    let doc = app.get("", "/openapi.json").await.expect(200).body;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
    let paths = doc["paths"].as_object().expect("paths");

    for (method, path) in KNOWN_ROUTES {
        let op = &paths
            .get(*path)
            .unwrap_or_else(|| panic!("{path} is not documented"))[*method];
        assert!(op.is_object(), "{method} {path} is not documented");
        assert!(
            op["responses"].is_object(),
            "{method} {path} has no responses"
        );
    }
    // Request and response schemas are described.
    let post_agents = &paths["/api/agents"]["post"];
    assert!(post_agents["requestBody"]["content"]["application/json"]["schema"].is_object());
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    for name in [
        "AgentInput",
        "AgentView",
        "MessageBody",
        "NumberList",
        "WalletView",
        "BalancesView",
    ] {
        assert!(schemas.contains_key(name), "schema {name} missing");
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"]
            .as_str()
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("bearer")
    );

    // Query parameters come from the typed query structs.
    let query_params = |method: &str, path: &str| -> Vec<String> {
        paths[path][method]["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("{method} {path} has no parameters"))
            .iter()
            .filter(|p| p["in"] == "query")
            .map(|p| p["name"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(
        query_params("get", "/api/calls"),
        [
            "page",
            "limit",
            "status",
            "search",
            "deep",
            "provider",
            "success",
            "analysisStatus",
            "agentId",
            "direction"
        ]
    );
    let limit = paths["/api/calls"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "limit")
        .unwrap();
    assert_eq!(limit["required"], false, "{limit}");
    assert_eq!(limit["schema"]["maximum"], 100, "{limit}");
    assert!(
        limit["description"]
            .as_str()
            .is_some_and(|d| d.contains("default 20")),
        "{limit}"
    );
    assert_eq!(
        query_params("get", "/api/campaigns/{campaignId}/students"),
        ["page", "limit", "status"]
    );
    assert_eq!(query_params("get", "/api/dashboard/call-volume"), ["days"]);

    // The router serves what the document lists, and nothing else on those paths.
    for (path, item) in paths {
        for method in METHODS {
            let documented = item.get(*method).is_some_and(Value::is_object);
            let url = concrete(path);
            let m = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            let mut req = app.request(&ws.key, m.clone(), &url);
            if matches!(*method, "post" | "patch" | "put") {
                req = req.header("content-type", "application/json").body("{}");
            }
            let r = crate::support::reply(req.send().await.unwrap()).await;
            if documented {
                let cannot = r.status == 404
                    && r.body["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("Cannot "));
                assert!(!cannot, "documented {m} {path} is not routed: {}", r.text);
                assert_ne!(r.status, 405, "documented {m} {path} answers 405");
                assert_ne!(r.status, 403, "documented {m} {path} is outside the mounts");
                assert!(r.status.as_u16() < 500, "{m} {path}: {}", r.text);
            } else {
                assert_eq!(
                    r.status, 405,
                    "{m} {path} is served but not documented: {}",
                    r.text
                );
            }
        }
    }
}

#[tokio::test]
async fn docs_health_and_readiness_need_no_key() {
    let app = TestApp::spawn().await;
    let docs = app.get("", "/docs").await.expect(200);
    assert!(
        docs.header("content-type")
            .unwrap()
            .starts_with("text/html"),
        "{docs:?}"
    );
    assert!(docs.text.contains("/openapi.json"));

    let health = app.get("", "/healthz").await.expect(200);
    assert_eq!(health.body["status"], "ok");
    // The node's load, as the document describes it.
    let doc = app.get("", "/openapi.json").await.expect(200).body;
    let schemas = &doc["components"]["schemas"];
    let healthz = &doc["paths"]["/healthz"]["get"];
    assert_eq!(healthz["security"], serde_json::json!([]), "{healthz}");
    let view = &schemas["HealthView"];
    assert_eq!(
        view["required"],
        serde_json::json!(["status", "node"]),
        "{view}"
    );
    let node = &schemas["NodeHealth"];
    let mut fields: Vec<&str> = node["properties"]
        .as_object()
        .expect("NodeHealth properties")
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    let mut answered: Vec<&str> = health.body["node"]
        .as_object()
        .expect("node")
        .keys()
        .map(String::as_str)
        .collect();
    answered.sort_unstable();
    assert_eq!(fields, answered, "{node} vs {}", health.body);
    assert_eq!(
        schemas["HealthStatus"]["enum"],
        serde_json::json!(["ok", "draining"])
    );
    let ready = app.get("", "/readyz").await.expect(200);
    assert_eq!(ready.body["status"], "ready");
    assert_eq!(ready.body["database"], app.store().dialect());
    // A request id comes back for log correlation.
    assert!(health.header("x-request-id").is_some());

    // Prometheus metrics live on the separate admin listener.
    let metrics = app
        .http
        .get(format!("http://{}/metrics", app.server().admin_addr))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    app.get("", "/metrics").await.expect(404);
}

/// Every response object, with where it is, for the checks below.
fn operations(doc: &Value) -> Vec<(String, String, &Value)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if let Some(op) = item.get(*method).filter(|op| op.is_object()) {
                ops.push((method.to_string(), path.clone(), op));
            }
        }
    }
    ops
}

#[tokio::test]
async fn the_document_is_exact_about_answers_and_bounds() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let doc = app.get("", "/openapi.json").await.expect(200).body;
    let ops = operations(&doc);
    assert!(ops.len() > 60, "{}", ops.len());
    let global_security = doc["security"].as_array().is_some_and(|s| !s.is_empty());

    for (method, path, op) in &ops {
        let responses = op["responses"].as_object().expect("responses");
        // OpenAPI requires a description on every response object.
        for (status, response) in responses {
            assert!(
                response["description"]
                    .as_str()
                    .is_some_and(|d| !d.trim().is_empty()),
                "{method} {path} {status} has no description: {response}"
            );
        }
        let secured = op
            .get("security")
            .and_then(Value::as_array)
            .map_or(global_security, |s| !s.is_empty());
        if secured {
            for status in ["401", "429"] {
                assert!(
                    responses.contains_key(status),
                    "{method} {path} does not document {status}"
                );
            }
            assert!(
                responses["429"]["headers"].get("Retry-After").is_some(),
                "{method} {path}: 429 without Retry-After"
            );
            for (status, response) in responses.iter().filter(|(s, _)| *s != "401") {
                assert!(
                    response["headers"].get("X-RateLimit-Remaining").is_some(),
                    "{method} {path} {status}: no X-RateLimit-* headers"
                );
            }
        }
        if op.get("requestBody").is_some() {
            for status in ["400", "413", "415"] {
                assert!(
                    responses.contains_key(status),
                    "{method} {path} takes a body but does not document {status}"
                );
            }
        }
        // Bounds equal the server's.
        for param in op["parameters"].as_array().into_iter().flatten() {
            let schema = &param["schema"];
            let bounds = (schema["minimum"].as_i64(), schema["maximum"].as_i64());
            match param["name"].as_str() {
                Some("page") => assert_eq!(bounds, (Some(1), Some(2_147_483_647)), "{path}"),
                Some("limit") => assert_eq!(bounds, (Some(1), Some(100)), "{path}"),
                Some("days") => {
                    let max = if path == "/api/dashboard/call-volume" {
                        90
                    } else {
                        365
                    };
                    assert_eq!(bounds, (Some(1), Some(max)), "{path}");
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        doc["components"]["headers"]["X-RateLimit-Limit"]["schema"]["type"],
        "integer"
    );
    // Values, required fields and formats as the server reads them.
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["LlmVendor"]["enum"],
        serde_json::json!(["sim", "openai"])
    );
    assert_eq!(
        schemas["TelephonyProvider"]["enum"][0], "sim",
        "{}",
        schemas["TelephonyProvider"]
    );
    let create_agent = &doc["paths"]["/api/agents"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"];
    assert_eq!(
        create_agent["required"],
        serde_json::json!(["name"]),
        "{create_agent}"
    );
    assert!(
        schemas["ExportSheetRequest"]["required"]
            .as_array()
            .is_some_and(|r| r.contains(&"spreadsheetId".into())),
        "{}",
        schemas["ExportSheetRequest"]
    );
    assert_eq!(
        schemas["PlaceCallBody"]["properties"]["to"]["pattern"],
        r"^\+[1-9][0-9]{6,14}(?![\s\S])"
    );
    assert_eq!(
        schemas["CreateCampaignBody"]["properties"]["scheduledStartAt"]["format"],
        "date-time"
    );
    assert!(
        schemas["AgentInput"]["properties"]["language"]["pattern"].is_string(),
        "{}",
        schemas["AgentInput"]["properties"]["language"]
    );
    let calls = doc["paths"]["/api/calls"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let analysis_status = calls
        .iter()
        .find(|p| p["name"] == "analysisStatus")
        .unwrap();
    assert_eq!(
        analysis_status["schema"]["enum"],
        serde_json::json!(["pending", "done", "failed", "skipped"]),
        "{analysis_status}"
    );

    // The server refuses what the document refuses.
    for (query, message) in [
        (
            "page=2147483648",
            "page must be an integer from 1 to 2147483647",
        ),
        ("page=", "page must be an integer from 1 to 2147483647"),
        ("limit=", "limit must be an integer from 1 to 100"),
    ] {
        let r = app.get(&ws.key, &format!("/api/calls?{query}")).await;
        assert_eq!(r.status, 400, "{query}: {r:?}");
        assert_eq!(r.message(), message, "{query}");
    }
    let r = app
        .get(&ws.key, "/api/calls?page=2147483647&limit=100")
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = app.get(&ws.key, "/api/calls?deep=").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.message(), "deep must be true or false, not \"\"");
    let r = app.get(&ws.key, "/api/ratings?minScore=").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.message(), "minScore must be a number from 0 to 10");
    let r = app.get(&ws.key, "/api/analytics/overview?days=").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.message(), "days must be an integer from 1 to 365");
}

#[tokio::test]
async fn a_text_model_without_a_key_is_the_clients_400_not_a_503() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let r = app
        .post(
            &ws.key,
            "/api/agents/prompt-assist",
            serde_json::json!({"prompt": "Be brief.", "llmProvider": "openai"}),
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(
        r.message(),
        "llm provider openai is unavailable: no API key: set VOXLINE_OPENAI_API_KEY, or an openai workspace credential"
    );
}

/// The document states the text rules the server enforces, so a client (or
/// schemathesis) generating from it never sends text the server refuses:
/// query strings are one line, body text refuses control characters but tab
/// and line breaks, one-line fields and variable names say so, and free-form
/// JSON follows the same rules at any depth.
#[tokio::test]
async fn the_document_states_the_text_rules() {
    let app = TestApp::spawn().await;
    let doc = app.get("", "/openapi.json").await.expect(200).body;
    let one = r"^[^\x00-\x1f\x7f-\x9f]*(?![\s\S])";
    let many = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*(?![\s\S])";
    let search = doc["paths"]["/api/calls"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "search")
        .unwrap();
    assert_eq!(search["schema"]["pattern"], one, "{search}");
    let agent = &doc["components"]["schemas"]["AgentInput"]["properties"];
    assert_eq!(agent["prompt"]["pattern"], many, "{}", agent["prompt"]);
    // One line and not blank.
    let model = agent["llmModel"]["pattern"].as_str().unwrap();
    assert!(model.starts_with(r"^[^\x00-\x1f\x7f-\x9f]*[^\s"), "{model}");
    assert_eq!(
        agent["endCallPhrases"]["items"]["pattern"], one,
        "{}",
        agent["endCallPhrases"]
    );
    let text_json = &doc["components"]["schemas"]["TextJson"];
    assert_eq!(text_json["anyOf"][0]["pattern"], many, "{text_json}");
    assert_eq!(
        text_json["anyOf"][3]["propertyNames"]["pattern"], one,
        "{text_json}"
    );
    // Responses are not constrained: a 404 may echo the id it was given.
    let message = &doc["components"]["schemas"]["MessageBody"]["properties"]["message"];
    assert!(message.get("pattern").is_none(), "{message}");
}

/// Every `pattern` string in the document, with where it is.
fn patterns(value: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(p)) = map.get("pattern") {
                out.push((at.to_string(), p.clone()));
            }
            for (key, v) in map {
                patterns(v, &format!("{at}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                patterns(v, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Whether `text` matches `pattern` as JSON Schema (ECMA-262) reads it.
fn matches(pattern: &str, text: &str) -> bool {
    jsonschema::validator_for(&json!({"type": "string", "pattern": pattern}))
        .unwrap_or_else(|e| panic!("{pattern}: {e}"))
        .is_valid(&json!(text))
}

/// Issue 28.5: the document is as strict as the server where a schema can
/// say so. `perMinuteRatePaise` carries the 0–100000 the server holds it to;
/// the text patterns accept exactly what the server accepts, on sample strings
/// sent to it (a query value is one line, a prompt may hold tab and line
/// breaks, a status filter may have spaces around it but no tab); and no
/// pattern ends in `$`, which Python's `re` (schemathesis's generator) also
/// matches before a final line break, so it took `"a\n"` as one line.
#[tokio::test]
async fn the_document_bounds_the_rate_and_its_patterns_agree_with_the_server() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    app.set_limits(ws.key_id, 100_000, 1_000_000).await;
    let doc = app.get("", "/openapi.json").await.expect(200).body;
    let agent = &doc["components"]["schemas"]["AgentInput"]["properties"];
    let rate = &agent["perMinuteRatePaise"];
    assert_eq!(
        (rate["minimum"].as_i64(), rate["maximum"].as_i64()),
        (Some(0), Some(100_000)),
        "{rate}"
    );
    for (value, status) in [(-1, 400), (100_001, 400), (0, 201), (100_000, 201)] {
        let r = app
            .post(
                &ws.key,
                "/api/agents",
                json!({"name": format!("Rate {value}"), "perMinuteRatePaise": value}),
            )
            .await;
        assert_eq!(r.status, status, "perMinuteRatePaise {value}: {r:?}");
    }

    let mut all = Vec::new();
    patterns(&doc, "", &mut all);
    assert!(all.len() > 50, "{}", all.len());
    for (at, pattern) in &all {
        assert!(
            !pattern.ends_with('$') || pattern.ends_with(r"\$"),
            "{at}: {pattern} ends in $, which Python's re also matches before a final line break"
        );
    }
    let query = |path: &str, name: &str| -> String {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{path} {name}"))["schema"]["pattern"]
            .as_str()
            .unwrap_or_else(|| panic!("{path} {name} has no pattern"))
            .to_string()
    };
    let samples = [
        "Asha Rao",
        "",
        "äöü 日本",
        "a\n",
        "a\nb",
        "a\r\nb",
        "tab\there",
        "bell\u{7}",
        "nul\u{0}",
        "del\u{7f}",
        "c1\u{85}",
        "c1\u{9f}",
        "\u{a0}nbsp",
    ];
    // One line: the calls list's search.
    let search = query("/api/calls", "search");
    for sample in samples {
        let url = format!("/api/calls?search={}", url_escape(sample));
        let accepted = app.get(&ws.key, &url).await.status == 200;
        assert_eq!(
            matches(&search, sample),
            accepted,
            "search {sample:?}: the pattern {search} and the server disagree"
        );
    }
    // Several lines: an agent's prompt.
    let prompt = agent["prompt"]["pattern"].as_str().unwrap().to_string();
    for (n, sample) in samples.iter().enumerate() {
        let r = app
            .post(
                &ws.key,
                "/api/agents",
                json!({"name": format!("Prompt {n}"), "prompt": sample}),
            )
            .await;
        assert_eq!(
            matches(&prompt, sample),
            r.status == 201,
            "prompt {sample:?}: the pattern {prompt} and the server disagree: {r:?}"
        );
    }
    // A status filter: spaces around it are trimmed, a tab or line break refused.
    let status = query("/api/ratings", "status");
    for sample in [
        "done",
        " done ",
        "\u{3000}all",
        "\tdone",
        "done\n",
        "\u{85}done",
        "nope",
    ] {
        let url = format!("/api/ratings?status={}", url_escape(sample));
        let accepted = app.get(&ws.key, &url).await.status == 200;
        assert_eq!(
            matches(&status, sample),
            accepted,
            "status {sample:?}: the pattern {status} and the server disagree"
        );
    }
    let statuses = query("/api/calls", "status");
    for sample in [
        "completed",
        " completed , busy ",
        "completed\n",
        "\tbusy",
        "busy,,",
    ] {
        let url = format!("/api/calls?status={}", url_escape(sample));
        let accepted = app.get(&ws.key, &url).await.status == 200;
        assert_eq!(
            matches(&statuses, sample),
            accepted,
            "status {sample:?}: the pattern {statuses} and the server disagree"
        );
    }
}

/// `text` percent-encoded for a query string, every byte outside A–Z, a–z and 0–9.
fn url_escape(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
