//! Issue 19 point 1: text at the edge. NUL and control characters in any
//! string of any body or query are refused with a 400 naming the field, never
//! a 500, and nothing of the request is stored; in a CSV cell they reject the
//! row, naming the column, and nothing of that row is stored.

use crate::support::{Reply, TestApp, Workspace};
use reqwest::Method;
use serde_json::{Map, Value, json};

const BOUNDARY: &str = "voxline-text-boundary";

/// Two poisons: NUL (Postgres refuses it) and BEL (a C0 control character).
const POISONS: &[(&str, &str)] = &[("NUL", "a\u{0}b"), ("BEL", "a\u{7}b")];

/// Follows `$ref`s into `components`.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..16 {
        let Some(reference) = schema["$ref"].as_str() else {
            return schema;
        };
        let name = reference.rsplit('/').next().unwrap_or_default();
        schema = &doc["components"]["schemas"][name];
    }
    schema
}

/// A schema's type, the first non-null one when it lists several.
fn type_of(schema: &Value) -> Option<&str> {
    match &schema["type"] {
        Value::String(t) => Some(t.as_str()),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null"),
        _ => None,
    }
}

/// A valid-looking value of `schema` with every property filled, so that
/// every string the schema allows is present to be poisoned one at a time.
fn example(doc: &Value, schema: &Value, depth: usize) -> Value {
    let schema = resolve(doc, schema);
    if depth > 8 {
        return Value::Null;
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(first) = schema[key].as_array().and_then(|variants| {
            variants
                .iter()
                .find(|v| type_of(resolve(doc, v)) != Some("null"))
        }) {
            return example(doc, first, depth + 1);
        }
    }
    if let Some(parts) = schema["allOf"].as_array() {
        let mut merged = Map::new();
        for part in parts {
            if let Value::Object(fields) = example(doc, part, depth + 1) {
                merged.extend(fields);
            }
        }
        return Value::Object(merged);
    }
    match type_of(schema) {
        Some("string") => match schema["format"].as_str() {
            Some("date-time") => json!("2030-01-01T10:00:00Z"),
            Some("date") => json!("2030-01-01"),
            _ => json!("text"),
        },
        Some("integer") => json!(schema["minimum"].as_i64().unwrap_or(1).max(1)),
        Some("number") => json!(1),
        Some("boolean") => json!(true),
        Some("array") => {
            // An array of variants (tools) holds one of each, so every variant's strings are poisoned.
            let items = resolve(doc, &schema["items"]);
            let variants: Vec<&Value> = ["oneOf", "anyOf"]
                .iter()
                .filter_map(|key| items[*key].as_array())
                .flatten()
                .filter(|v| type_of(resolve(doc, v)) != Some("null"))
                .collect();
            if variants.len() > 1 {
                Value::Array(
                    variants
                        .iter()
                        .map(|v| example(doc, v, depth + 1))
                        .collect(),
                )
            } else {
                json!([example(doc, items, depth + 1)])
            }
        }
        _ => {
            let mut object = Map::new();
            if let Some(properties) = schema["properties"].as_object() {
                for (name, property) in properties {
                    object.insert(name.clone(), example(doc, property, depth + 1));
                }
            } else {
                // A free-form object (variables): one string member.
                object.insert("name".into(), json!("text"));
            }
            Value::Object(object)
        }
    }
}

/// JSON pointers of every string in `value`.
fn string_pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::String(_) => out.push(at),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                string_pointers(item, format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                string_pointers(item, format!("{at}/{key}"), out);
            }
        }
        _ => {}
    }
}

/// Everything a workspace has stored that a refused request could add to.
async fn stored(app: &TestApp, ws: &Workspace) -> Vec<(String, Value)> {
    let mut counts = Vec::new();
    let agents = app.get(&ws.key, "/api/agents").await.expect(200).body;
    counts.push(("agents".into(), json!(agents.as_array().map(Vec::len))));
    for list in ["/api/calls", "/api/batches", "/api/campaigns"] {
        let body = app.get(&ws.key, list).await.expect(200).body;
        counts.push((list.into(), body["total"].clone()));
    }
    let items = app.get(&ws.key, "/api/campaigns").await.expect(200).body;
    for campaign in items["rows"].as_array().into_iter().flatten() {
        let id = campaign["id"].as_str().unwrap_or_default();
        let students = app
            .get(&ws.key, &format!("/api/campaigns/{id}/students"))
            .await
            .expect(200)
            .body;
        counts.push((format!("students of {id}"), students["total"].clone()));
    }
    counts
}

/// The path with each `{param}` replaced by one of the workspace's real ids
/// when the name says which, or a random UUID (a 404 is then fine).
fn concrete(path: &str, ids: &[(&str, String)]) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').map_or(rest.len(), |c| c + open);
        let name = &rest[open + 1..close];
        let id = ids
            .iter()
            .find(|(param, _)| *param == name)
            .map_or_else(|| uuid::Uuid::now_v7().to_string(), |(_, id)| id.clone());
        out.push_str(&id);
        rest = &rest[(close + 1).min(rest.len())..];
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn every_string_of_every_body_and_query_refuses_nul_and_control_characters() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Edge", 2).await;
    app.set_limits(ws.key_id, 1_000_000, 10_000_000).await;
    let agent = app
        .create_agent(&ws.key, json!({"name": "Edge agent", "prompt": "Hi"}))
        .await;
    let agent_id = agent["id"].as_str().unwrap().to_string();
    let batch = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "Edge batch", "agentId": agent_id}),
        )
        .await
        .expect(201)
        .body;
    let campaign = app
        .post(
            &ws.key,
            "/api/campaigns",
            json!({"name": "Edge campaign", "agentId": agent_id}),
        )
        .await
        .expect(201)
        .body;
    let ids = [
        ("agentId", agent_id.clone()),
        ("batchId", batch["id"].as_str().unwrap().to_string()),
        ("campaignId", campaign["id"].as_str().unwrap().to_string()),
    ];
    let before = stored(&app, &ws).await;

    let doc = app.get("", "/openapi.json").await.expect(200).body;
    let mut failures = Vec::new();
    let mut sent = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().into_iter().flatten() {
            let Ok(m) = Method::from_bytes(method.to_ascii_uppercase().as_bytes()) else {
                continue;
            };
            if !op.is_object() {
                continue;
            }
            let url = concrete(path, &ids);
            // With every id real the route is reached, so the answer must be exactly 400.
            let reached = path.split('{').skip(1).all(|p| {
                ids.iter()
                    .any(|(name, _)| p.starts_with(&format!("{name}}}")))
            });
            let mut requests: Vec<(String, String, Option<Value>)> = Vec::new();
            if let Some(schema) = op
                .pointer("/requestBody/content/application~1json/schema")
                .filter(|s| s.is_object())
            {
                let base = example(&doc, schema, 0);
                let mut pointers = Vec::new();
                string_pointers(&base, String::new(), &mut pointers);
                for pointer in pointers {
                    for (poison_name, poison) in POISONS {
                        let mut body = base.clone();
                        *body.pointer_mut(&pointer).unwrap() = json!(poison);
                        requests.push((
                            format!("{method} {path} body {pointer} {poison_name}"),
                            url.clone(),
                            Some(body),
                        ));
                    }
                }
            }
            for param in op["parameters"].as_array().into_iter().flatten() {
                let param = resolve(&doc, param);
                if param["in"] != "query" {
                    continue;
                }
                let name = param["name"].as_str().unwrap_or_default();
                for (poison_name, poison) in POISONS {
                    let encoded: String =
                        form_urlencoded::byte_serialize(poison.as_bytes()).collect();
                    requests.push((
                        format!("{method} {path} query {name} {poison_name}"),
                        format!("{url}?{name}={encoded}"),
                        None,
                    ));
                }
            }
            for (what, url, body) in requests {
                let mut req = app.request(&ws.key, m.clone(), &url);
                if let Some(body) = &body {
                    req = req
                        .header("content-type", "application/json")
                        .body(body.to_string());
                }
                sent += 1;
                match req.send().await {
                    Ok(resp) => {
                        let r: Reply = crate::support::reply(resp).await;
                        let refused = if reached {
                            r.status == 400
                        } else {
                            r.status.is_client_error()
                        };
                        if !refused {
                            failures.push(format!("{what}: {} {}", r.status, r.text));
                        }
                    }
                    Err(err) => failures.push(format!("{what}: {err}")),
                }
            }
        }
    }
    assert!(sent > 400, "only {sent} poisoned requests were built");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        stored(&app, &ws).await,
        before,
        "a refused request stored something"
    );
}

#[tokio::test]
async fn the_refusal_names_the_field() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Edge", 2).await;

    let r = app
        .post(&ws.key, "/api/agents", json!({"name": "Asha\u{0}"}))
        .await
        .expect(400);
    assert_eq!(r.message(), "name: must not contain NUL (U+0000)");
    let r = app
        .post(&ws.key, "/api/agents", json!({"name": "Asha\nRao"}))
        .await
        .expect(400);
    assert_eq!(
        r.message(),
        "name: must not contain the control character U+000A"
    );
    assert_eq!(
        app.get(&ws.key, "/api/agents").await.expect(200).body,
        json!([])
    );

    // A prompt may hold line breaks and tabs, not other control characters; names are trimmed.
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "  Asha  ", "prompt": "Line one\n\tLine two"}),
        )
        .await;
    assert_eq!(agent["name"], "Asha");
    assert_eq!(agent["prompt"], "Line one\n\tLine two");
    let id = agent["id"].as_str().unwrap();
    let r = app
        .patch(
            &ws.key,
            &format!("/api/agents/{id}"),
            json!({"prompt": "Ring\u{7}"}),
        )
        .await
        .expect(400);
    assert_eq!(
        r.message(),
        "prompt: must not contain the control character U+0007"
    );

    let r = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": id, "to": "+919845012310", "variables": {"name": "A\u{0}"}}),
        )
        .await
        .expect(400);
    assert_eq!(r.message(), "variables.name: must not contain NUL (U+0000)");
    let r = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"agentId": id, "contacts": [
                {"phone": "+919845012310"},
                {"phone": "+919845012311", "name": "B\u{85}"},
            ]}),
        )
        .await
        .expect(400);
    assert_eq!(
        r.message(),
        "contacts[1].name: must not contain the control character U+0085"
    );

    let r = app.get(&ws.key, "/api/calls?search=%00").await.expect(400);
    assert_eq!(r.message(), "search must not contain NUL (U+0000)");
    let r = app.get(&ws.key, "/api/calls?search=a%07").await.expect(400);
    assert_eq!(
        r.message(),
        "search must not contain the control character U+0007"
    );
    assert_eq!(
        app.get(&ws.key, "/api/calls").await.expect(200).body["total"],
        0
    );
    assert_eq!(
        app.get(&ws.key, "/api/batches").await.expect(200).body["total"],
        0
    );
}

/// Uploads `csv` as the multipart field `file` of a campaign.
async fn upload(app: &TestApp, ws: &Workspace, id: &str, csv: Vec<u8>) -> Reply {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"s.csv\"\r\n\
         Content-Type: text/csv\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&csv);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    app.raw(
        &ws.key,
        Method::POST,
        &format!("/api/campaigns/{id}/students/upload"),
        &format!("multipart/form-data; boundary={BOUNDARY}"),
        body,
    )
    .await
}

async fn empty_campaign(app: &TestApp, ws: &Workspace) -> String {
    let agent = app
        .create_agent(&ws.key, json!({"name": "Admissions"}))
        .await;
    app.post(
        &ws.key,
        "/api/campaigns",
        json!({"name": "Intake", "agentId": agent["id"]}),
    )
    .await
    .expect(201)
    .body["id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn students(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    app.get(&ws.key, &format!("/api/campaigns/{id}/students"))
        .await
        .expect(200)
        .body["total"]
        .clone()
}

/// A CSV cell with NUL or a control character rejects its row (issue 28.4:
/// like a malformed number, not the whole file); nothing of it is stored, so
/// Postgres never sees the NUL, and the good rows are.
#[tokio::test]
async fn a_csv_cell_with_nul_rejects_its_row_and_stores_none_of_it() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Edge", 2).await;
    let id = empty_campaign(&app, &ws).await;
    // Row 3 of the file (the header is row 1) has a NUL in its course; row 2 is fine.
    let csv = b"name,phone,course\nAsha,+919845012310,MBA\nRavi,+919845012311,M\0BA\n".to_vec();
    let r = upload(&app, &ws, &id, csv).await.expect(200);
    assert_eq!(r.body["accepted"], 1, "{}", r.body);
    assert_eq!(
        r.body["rejectedRows"][0],
        json!({"row": 3, "reason": "course must not contain NUL (U+0000)"})
    );
    let csv = b"name,phone\nMeera,+919845012312\n\"Ra\x07vi\",+919845012311\n".to_vec();
    let r = upload(&app, &ws, &id, csv).await.expect(200);
    assert_eq!(r.body["accepted"], 1, "{}", r.body);
    assert_eq!(
        r.body["rejectedRows"][0],
        json!({"row": 3, "reason": "name must not contain the control character U+0007"})
    );
    assert_eq!(students(&app, &ws, &id).await, 2);
    // A line break inside a quoted variable cell is text, not a refusal.
    let csv = b"name,phone,note\nKabir,+919845012313,\"two\nlines\"\n".to_vec();
    let r = upload(&app, &ws, &id, csv).await.expect(200);
    assert_eq!(r.body["accepted"], 1);
    assert_eq!(students(&app, &ws, &id).await, 3);
}

#[tokio::test]
async fn a_csv_over_the_row_limit_stores_nothing() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Edge", 2).await;
    let id = empty_campaign(&app, &ws).await;
    let rows = 100_001;
    let mut csv = String::with_capacity(rows * 24 + 16);
    csv.push_str("name,phone\n");
    for i in 0..rows {
        csv.push_str(&format!("S{i},+9198{i:08}\n"));
    }
    let r = upload(&app, &ws, &id, csv.into_bytes()).await.expect(413);
    assert_eq!(
        r.message(),
        "file has 100001 data rows; one upload may hold at most 100000, and none was added"
    );
    assert_eq!(students(&app, &ws, &id).await, 0);
    let campaign = app
        .get(&ws.key, &format!("/api/campaigns/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(campaign["status"], "draft");
    assert_eq!(
        app.get(&ws.key, "/api/campaigns").await.expect(200).body["total"],
        1
    );
}

/// Text nested in an agent's analysis plan and tools follows the same rules as
/// its top-level fields: one-line labels refuse line breaks, descriptions and
/// prompts are bounded, and the refusal names the nested path.
#[tokio::test]
async fn nested_plan_and_tool_text_is_checked_by_its_kind() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Nested", 1).await;
    let refused = |body: serde_json::Value, message: &'static str| {
        let app = &app;
        let key = ws.key.clone();
        async move {
            let mut agent = json!({"name": "Screener"});
            for (k, v) in body.as_object().unwrap() {
                agent[k] = v.clone();
            }
            let r = app.post(&key, "/api/agents", agent).await.expect(400);
            assert_eq!(r.message(), message);
        }
    };
    refused(
        json!({"analysis": {"fields": [{"name": "shift", "type": "enum", "description": "Shift", "options": ["day\nnight"]}]}}),
        "analysis.fields[0].options[0] must not contain the control character U+000A",
    )
    .await;
    refused(
        json!({"analysis": {"fields": [{"name": "shift", "type": "string", "description": "x".repeat(2_001)}]}}),
        "analysis.fields[0].description must be at most 2000 characters",
    )
    .await;
    refused(
        json!({"analysis": {"success": {"rubric": "checklist", "prompt": "Done.", "criteria": [{"name": "Notice\tperiod", "description": "Gave one"}]}}}),
        "analysis.success.criteria[0].name must not contain the control character U+0009",
    )
    .await;
    refused(
        json!({"tools": [{"type": "transferCall", "destinations": [{"number": "+14155550123", "description": "Sales ".repeat(200), "message": "Connecting you."}]}]}),
        "tools[0].destinations[0].description must be at most 1000 characters",
    )
    .await;
    assert_eq!(
        app.get(&ws.key, "/api/agents").await.expect(200).body,
        json!([])
    );
    // Multi-line text keeps its line breaks.
    app.create_agent(
        &ws.key,
        json!({"name": "Screener", "analysis": {"fields": [{"name": "shift", "type": "enum", "description": "Your shift,\nday or night", "options": ["day", "night"]}]}}),
    )
    .await;
}
