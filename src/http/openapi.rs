//! The OpenAPI document, generated from the handlers, and a small docs page.

use crate::domain::text::{self, Lines};
use crate::http::state::AppState;
use axum::Json;
use axum::Router;
use axum::response::Html;
use axum::routing::get;
use serde_json::{Value, json};
use std::sync::Arc;
use utoipa::Modify;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

#[derive(OpenApi)]
#[openapi(
    info(title = "Voxline API", description = "Automated AI voice calls over HTTP. Every /api request needs `Authorization: Bearer acai_…`."),
    modifiers(&BearerAuth, &Webhooks),
    security(("bearer" = [])),
    components(schemas(
        super::MessageBody,
        crate::webhooks::events::CallCompletedEvent,
        crate::webhooks::events::RatingCompletedEvent,
        crate::webhooks::events::NumberOptedOutEvent,
    ))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("acai_ API key")
                    .build(),
            ),
        );
    }
}

/// The events Voxline posts to a workspace's webhook subscriptions, in the
/// document's `webhooks` section: each a POST of its payload, signed as the
/// README describes.
struct Webhooks;

impl Modify for Webhooks {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem};
        use utoipa::openapi::request_body::RequestBodyBuilder;
        use utoipa::openapi::{
            ContentBuilder, PathsBuilder, Ref, ResponseBuilder, ResponsesBuilder,
        };
        let event = |schema: &str, summary: &str, description: &str| {
            PathItem::new(
                HttpMethod::Post,
                OperationBuilder::new()
                    .summary(Some(summary))
                    .description(Some(description))
                    .request_body(Some(
                        RequestBodyBuilder::new()
                            .content(
                                "application/json",
                                ContentBuilder::new()
                                    .schema(Some(Ref::from_schema_name(schema)))
                                    .build(),
                            )
                            .build(),
                    ))
                    .responses(
                        ResponsesBuilder::new()
                            .response(
                                "2XX",
                                ResponseBuilder::new().description(
                                    "Delivered; any other answer is retried with backoff",
                                ),
                            )
                            .build(),
                    )
                    .build(),
            )
        };
        const HEADERS: &str = " Headers: `X-Service-Event` (the event), `X-Service-Delivery` \
            (the delivery id), `X-Service-Timestamp` (Unix seconds) and `X-Service-Signature` \
            (`v1=` and the hex HMAC-SHA256 of `{timestamp}.{body}` with the subscription's secret).";
        openapi.webhooks = Some(
            PathsBuilder::new()
                .path(
                    "call.completed",
                    event(
                        "CallCompletedEvent",
                        "A call ended",
                        &format!(
                            "Sent once the call's analysis and rating are settled, or when the \
                             agent's analysis.timeoutSeconds (default 60) has passed since the \
                             call ended, whichever is first; at once for calls that never \
                             connected.{HEADERS}"
                        ),
                    ),
                )
                .path(
                    "call.analyzed",
                    event(
                        "CallCompletedEvent",
                        "A call's analysis finished after call.completed went out",
                        &format!(
                            "Follows call.completed when the analysis was not done in time \
                             (a failed analysis sends nothing), and after every re-run. Same \
                             payload, `event` = call.analyzed.{HEADERS}"
                        ),
                    ),
                )
                .path(
                    "rating.completed",
                    event(
                        "RatingCompletedEvent",
                        "A call's scorecard finished after call.completed went out",
                        &format!(
                            "Follows call.completed when the scorecard was not done in time, \
                             and after every re-scoring.{HEADERS}"
                        ),
                    ),
                )
                .path(
                    "number.opted_out",
                    event(
                        "NumberOptedOutEvent",
                        "A callee asked not to be called again",
                        &format!(
                            "Sent when a callee opted out during a call (the agent's \
                             compliance.optOut): the call ended with endedReason opt-out and \
                             the number is on the workspace's do-not-call list with source \
                             opt-out. Subscriptions get it only when they name it.{HEADERS}"
                        ),
                    ),
                )
                .build(),
        );
    }
}

/// The document's fixed parts; paths are added by the routers.
pub fn base_document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// `/openapi.json` and `/docs`; no authentication.
pub fn router(doc: utoipa::openapi::OpenApi) -> Router<AppState> {
    let doc = Arc::new(finished(doc));
    Router::new()
        .route(
            "/openapi.json",
            get(move || {
                let doc = Arc::clone(&doc);
                async move { Json(doc.as_ref().clone()) }
            }),
        )
        .route("/docs", get(|| async { Html(DOCS_PAGE) }))
}

/// The headers every answer to an authenticated request carries, and the
/// one a 429 adds (see `http::auth`).
const QUOTA_HEADERS: [(&str, &str); 3] = [
    ("X-RateLimit-Limit", "The key's daily request cap."),
    (
        "X-RateLimit-Remaining",
        "Requests left today under the cap.",
    ),
    (
        "X-RateLimit-Reset",
        "Unix seconds at which the daily count resets (midnight IST).",
    ),
];

/// The document as served: the handlers' annotations plus what every
/// operation shares and no single handler states, so the document says
/// everything the server can answer.
///
/// - every response has a `description` (OpenAPI requires one);
/// - every `/api` operation documents 401 and 429, and the quota headers on
///   each answer past authentication; the others (health) ask for no key;
/// - an operation with a JSON body documents 400, 413 and 415; one with
///   query parameters 400; one with path parameters 404.
pub fn finished(doc: utoipa::openapi::OpenApi) -> Value {
    let mut doc = serde_json::to_value(doc).unwrap_or(Value::Null);
    add_shared_components(&mut doc);
    require_on_create(&mut doc);
    state_text_rules(&mut doc);
    end_patterns_at_the_end(&mut doc);
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for (method, op) in item.iter_mut() {
                if matches!(
                    method.as_str(),
                    "get" | "put" | "post" | "delete" | "patch" | "head" | "options"
                ) {
                    complete_operation(path, op);
                }
            }
        }
    }
    if let Some(webhooks) = doc.get_mut("webhooks").and_then(Value::as_object_mut) {
        for item in webhooks.values_mut() {
            if let Some(item) = item.as_object_mut() {
                for op in item.values_mut() {
                    describe_responses(op);
                }
            }
        }
    }
    doc
}

/// States the text rules of `domain::text` where a client's generator can see
/// them: every free-form string of a request refuses NUL and control
/// characters (query parameters are one line; body text may hold tab and line
/// breaks unless its field says one line). Strings with a format, an enum or a
/// pattern of their own already exclude them, except a bare "not blank" (`\S`),
/// which becomes the rule's own not-blank pattern. Responses are left alone: a
/// 404 may echo the id it was given.
fn state_text_rules(doc: &mut Value) {
    let mut bodies = Vec::new();
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for item in paths.values_mut().filter_map(Value::as_object_mut) {
            for op in item.values_mut().filter_map(Value::as_object_mut) {
                if let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) {
                    for param in params.iter_mut().filter(|p| p["in"] == "query") {
                        if let Some(schema) = param.get_mut("schema") {
                            add_text_pattern(schema, Lines::One);
                        }
                    }
                }
                if let Some(body) = op.get_mut("requestBody") {
                    collect_refs(body, &mut bodies);
                    add_text_pattern(body, Lines::Many);
                }
            }
        }
    }
    if let Some(components) = doc.get_mut("components") {
        state_one_line_lists(components);
    }
    if let Some(paths) = doc.get_mut("paths") {
        state_one_line_lists(paths);
    }
    if let Some(schemas) = doc
        .get_mut("components")
        .and_then(|c| c.get_mut("schemas"))
        .and_then(Value::as_object_mut)
    {
        schemas.insert("TextJson".into(), text_json_schema());
    }
    // Components a request body reaches, followed through their own refs.
    let mut seen = std::collections::HashSet::new();
    while let Some(name) = bodies.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(schema) = doc["components"]["schemas"].get_mut(&name) {
            collect_refs(schema, &mut bodies);
            add_text_pattern(schema, Lines::Many);
        }
    }
}

/// Where the schema of free-form JSON in a request lives.
const TEXT_JSON_REF: &str = "#/components/schemas/TextJson";

/// Free-form JSON as a request may hold it: any value, but no NUL or control
/// character in a key, nor in a string but tab and line breaks, at any depth.
fn text_json_schema() -> Value {
    json!({
        "description": "Any JSON value whose keys hold no NUL or control character, and whose strings none but tab and line breaks.",
        "anyOf": [
            {"type": "string", "pattern": text::MANY_LINES_PATTERN},
            {"type": ["number", "boolean", "null"]},
            {"type": "array", "items": {"$ref": TEXT_JSON_REF}},
            {
                "type": "object",
                "propertyNames": {"pattern": text::ONE_LINE_PATTERN},
                "additionalProperties": {"$ref": TEXT_JSON_REF}
            }
        ]
    })
}

/// One-line text the derive cannot describe: the items of a list of `Line`s
/// and the names of call variables (a `Line` each).
fn state_one_line_lists(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(items) = map
                .get_mut("endCallPhrases")
                .and_then(|phrases| phrases.get_mut("items"))
                .and_then(Value::as_object_mut)
            {
                items.insert("pattern".into(), json!(text::ONE_LINE_PATTERN));
            }
            if let Some(variables) = map.get_mut("variables").and_then(Value::as_object_mut)
                && has_type(variables, "object")
            {
                variables.insert(
                    "propertyNames".into(),
                    json!({"pattern": text::ONE_LINE_PATTERN, "maxLength": 200}),
                );
            }
            map.values_mut().for_each(state_one_line_lists);
        }
        Value::Array(items) => items.iter_mut().for_each(state_one_line_lists),
        _ => {}
    }
}

/// Whether a schema's `type` is `name`, alone or among others (`["string", "null"]`).
fn has_type(schema: &serde_json::Map<String, Value>, name: &str) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == name,
        Some(Value::Array(types)) => types.iter().any(|t| t == name),
        _ => false,
    }
}

/// The component names `value` refers to (`#/components/schemas/<name>`).
fn collect_refs(value: &Value, names: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(name) = map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                names.push(name.to_owned());
            }
            map.values().for_each(|v| collect_refs(v, names));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, names)),
        _ => {}
    }
}

/// Gives every string schema in `value` without a pattern, format or enum the
/// control-character `pattern` of `lines`, and one whose pattern only says
/// "not blank" that rule's not-blank pattern.
fn add_text_pattern(value: &mut Value, lines: Lines) {
    match value {
        Value::Object(map) => {
            let constrained = ["pattern", "format", "enum", "const", "contentMediaType"]
                .iter()
                .any(|k| map.contains_key(*k));
            if has_type(map, "string") && !constrained {
                map.insert("pattern".into(), json!(lines.pattern()));
            }
            if has_type(map, "string") && map.get("pattern").is_some_and(|p| p == NOT_BLANK) {
                map.insert("pattern".into(), json!(lines.not_blank_pattern()));
            }
            // A free-form object (variables, a tool's JSON Schema): any JSON
            // whose strings and keys, at any depth, follow the body's rule.
            if has_type(map, "object")
                && !map.contains_key("properties")
                && !map.contains_key("additionalProperties")
            {
                map.insert(
                    "additionalProperties".into(),
                    json!({"$ref": TEXT_JSON_REF}),
                );
                map.entry("propertyNames")
                    .or_insert_with(|| json!({"pattern": text::ONE_LINE_PATTERN}));
            }
            // Examples are data, not schemas.
            for (key, v) in map.iter_mut() {
                if key != "example" && key != "examples" && key != "default" {
                    add_text_pattern(v, lines);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| add_text_pattern(v, lines)),
        _ => {}
    }
}

/// The pattern a handler's annotation gives a string that must not be blank.
const NOT_BLANK: &str = r"\S";

/// Ends every `pattern` of the document that ends in `$` with
/// [`text::PATTERN_END`] instead, so that the end of the string is meant in
/// every regex dialect: Python's `re`, which schemathesis generates and checks
/// with, also lets `$` match before a final line break, and so took `"done\n"`
/// as a valid status and `"a\n"` as valid one-line text, which the server
/// refuses. The annotations keep the familiar `$`.
fn end_patterns_at_the_end(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(pattern)) = map.get_mut("pattern")
                && let Some(body) = pattern.strip_suffix('$')
                // An escaped `\$` is a dollar sign, not the end.
                && body.chars().rev().take_while(|c| *c == '\\').count().is_multiple_of(2)
            {
                *pattern = format!("{body}{}", text::PATTERN_END);
            }
            // Examples are data, not schemas.
            map.iter_mut()
                .filter(|(key, _)| !matches!(key.as_str(), "example" | "examples" | "default"))
                .for_each(|(_, v)| end_patterns_at_the_end(v));
        }
        Value::Array(items) => items.iter_mut().for_each(end_patterns_at_the_end),
        _ => {}
    }
}

/// Create and patch share one body schema whose fields are all optional;
/// creating an agent needs a `name` that is not blank.
fn require_on_create(doc: &mut Value) {
    let body = &mut doc["paths"]["/api/agents"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"];
    if body.is_object() {
        *body = json!({
            "allOf": [body.take()],
            "required": ["name"],
            "properties": {"name": {"type": "string", "pattern": text::ONE_LINE_NOT_BLANK_PATTERN}},
        });
    }
}

/// The quota headers and the shared error answers, referred to by name.
fn add_shared_components(doc: &mut Value) {
    let Some(root) = doc.as_object_mut() else {
        return;
    };
    let components = root
        .entry("components")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    let Some(components) = components else {
        return;
    };
    let headers = components.entry("headers").or_insert_with(|| json!({}));
    for (name, description) in QUOTA_HEADERS {
        headers[name] = json!({
            "description": description,
            "schema": {"type": "integer", "format": "int64", "minimum": 0},
        });
    }
    headers["Retry-After"] = json!({
        "description": "Seconds until the daily count resets and requests are served again.",
        "schema": {"type": "integer", "format": "int64", "minimum": 0},
    });
}

fn message_body() -> Value {
    json!({"application/json": {"schema": {"$ref": "#/components/schemas/MessageBody"}}})
}

fn quota_headers(retry_after: bool) -> Value {
    let mut headers = serde_json::Map::new();
    for (name, _) in QUOTA_HEADERS {
        headers.insert(
            name.to_string(),
            json!({"$ref": format!("#/components/headers/{name}")}),
        );
    }
    if retry_after {
        headers.insert(
            "Retry-After".to_string(),
            json!({"$ref": "#/components/headers/Retry-After"}),
        );
    }
    Value::Object(headers)
}

/// What a status means when the handler's annotation says nothing more.
fn status_description(status: &str) -> &'static str {
    match status {
        "200" => "OK",
        "201" => "Created",
        "202" => "Accepted: the work is queued",
        "204" => "Done; no content",
        "206" => "The requested byte range",
        "400" => "A parameter or body field is missing or malformed; the message names it",
        "401" => "The API key is missing, wrong or revoked",
        "402" => "The wallet balance does not allow this",
        "403" => "Not allowed for this key, or a quota is spent",
        "404" => "No such record in this workspace",
        "409" => "The request conflicts with the record's current state",
        "413" => "The body is larger than allowed",
        "415" => "The body is not `application/json`",
        "416" => "The byte range is not satisfiable",
        "429" => "The key's daily or monthly request cap is spent; see `Retry-After`",
        "502" => "An upstream service failed the request",
        "503" => "A dependency is not ready",
        _ => "Answered",
    }
}

/// Adds the answers every operation of its kind can give, then describes
/// and, under `/api`, gives the quota headers to each response.
fn complete_operation(path: &str, op: &mut Value) {
    let has_body = op.get("requestBody").is_some();
    let params = op
        .get("parameters")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let has = |place: &str| params.iter().any(|p| p["in"] == place);
    let authenticated = path.starts_with("/api/");
    if !authenticated && let Some(op) = op.as_object_mut() {
        // Outside /api (health) no key is asked for: no security requirement.
        op.insert("security".to_string(), json!([]));
    }
    let Some(responses) = op
        .as_object_mut()
        .map(|op| op.entry("responses").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let mut add = |status: &str| {
        responses
            .entry(status.to_string())
            .or_insert_with(|| json!({"content": message_body()}));
    };
    if has_body {
        add("400");
        add("413");
        add("415");
    }
    if has("query") {
        add("400");
    }
    if has("path") {
        add("404");
    }
    if authenticated {
        add("401");
        add("429");
    }
    for (status, response) in responses.iter_mut() {
        let Some(response) = response.as_object_mut() else {
            continue;
        };
        describe(status, response);
        if authenticated && status != "401" {
            let headers = response.entry("headers").or_insert_with(|| json!({}));
            if let (Some(headers), Value::Object(quota)) =
                (headers.as_object_mut(), quota_headers(status == "429"))
            {
                for (name, header) in quota {
                    headers.entry(name).or_insert(header);
                }
            }
        }
    }
}

/// Gives a response without a description (or an empty one) its status's.
fn describe(status: &str, response: &mut serde_json::Map<String, Value>) {
    let described = response
        .get("description")
        .and_then(Value::as_str)
        .is_some_and(|d| !d.trim().is_empty());
    if !described {
        response.insert("description".into(), json!(status_description(status)));
    }
}

/// Gives every response without a description the one of its status.
fn describe_responses(op: &mut Value) {
    if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
        for (status, response) in responses.iter_mut() {
            if let Some(response) = response.as_object_mut() {
                describe(status, response);
            }
        }
    }
}

/// A self-contained page (no CDN: deployments may be offline) that renders
/// the document's operations.
const DOCS_PAGE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Voxline API</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em}
.op{border:1px solid #ddd;border-radius:6px;margin:.6em 0;padding:.5em .8em}
.m{display:inline-block;min-width:4.5em;font-weight:700;text-transform:uppercase}
code{background:#f4f4f4;padding:0 .3em}pre{background:#f7f7f7;padding:.6em;overflow:auto}</style></head>
<body><h1>Voxline API</h1><p>Send <code>Authorization: Bearer acai_…</code> with every <code>/api</code> request. Machine-readable document: <a href="/openapi.json">/openapi.json</a>.</p>
<div id="ops">Loading…</div>
<script>
fetch('/openapi.json').then(r=>r.json()).then(doc=>{
  const root=document.getElementById('ops'); root.textContent='';
  for (const [path, item] of Object.entries(doc.paths)) for (const [method, op] of Object.entries(item)) {
    const d=document.createElement('details'); d.className='op';
    const s=document.createElement('summary');
    s.innerHTML='<span class="m"></span> <code></code> <span></span>';
    s.children[0].textContent=method; s.children[1].textContent=path; s.children[2].textContent=op.summary||'';
    const pre=document.createElement('pre'); pre.textContent=JSON.stringify({parameters:op.parameters,requestBody:op.requestBody,responses:op.responses},null,2);
    d.append(s,pre); root.append(d);
  }
});
</script></body></html>"#;
