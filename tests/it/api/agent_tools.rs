//! Agent tools (issue 17): `tools` and `toolLimits` on create, update and read;
//! every refusal names the JSON path of the bad value; function URLs into
//! private networks are refused when the agent is saved; function secrets.

use crate::support::TestApp;
use serde_json::{Value, json};

fn id_of(agent: &Value) -> String {
    agent["id"].as_str().expect("agent id").to_string()
}

fn function(name: &str, url: &str) -> Value {
    json!({
        "type": "function",
        "name": name,
        "description": "Looks an order up by its id",
        "parameters": {
            "type": "object",
            "properties": {"orderId": {"type": "string"}},
            "required": ["orderId"],
        },
        "url": url,
    })
}

fn is_hex_secret(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// POSTs an agent with `tools` (and `extra` fields) and returns the 400's message.
async fn refused(app: &TestApp, key: &str, tools: Value, extra: Value) -> String {
    let mut body = json!({"name": "Tools", "tools": tools});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let reply = app.post(key, "/api/agents", body.clone()).await;
    assert_eq!(
        reply.status.as_u16(),
        400,
        "not refused: {body}\n{}",
        reply.text
    );
    reply.message().to_string()
}

#[tokio::test]
async fn every_tool_type_round_trips_and_functions_get_a_secret() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let mut lookup = function("lookup_order", "http://127.0.0.1:9/hook");
    lookup["async"] = json!(true);
    lookup["message"] = json!("One moment while I check");
    let mut signed = function("notify-crm", "http://localhost:9/crm");
    signed["secret"] = json!("client-chosen-secret-0123456789");
    signed["timeoutSeconds"] = json!(30);
    let tools = json!([
        {"type": "endCall", "message": "Thanks, goodbye"},
        {"type": "transferCall", "destinations": [
            {"number": "+91 98450 12310", "description": "Sales", "message": "Connecting you to sales"},
            {"number": "+919845012311", "description": "Support", "message": ""},
        ]},
        {"type": "dtmf"},
        {"type": "checkAvailability", "eventTypeId": 42, "timeZone": "Asia/Kolkata"},
        {"type": "bookAppointment", "provider": "calcom", "eventTypeId": 42,
         "timeZone": "America/New_York", "message": "Booking that now"},
        lookup,
        signed,
    ]);
    let created = app
        .create_agent(&ws.key, json!({"name": "Tools", "tools": tools}))
        .await;
    let got = &created["tools"];
    assert_eq!(got.as_array().map(Vec::len), Some(7), "{created}");
    assert_eq!(
        got[0],
        json!({"type": "endCall", "message": "Thanks, goodbye"})
    );
    // Numbers come back in E.164 form.
    assert_eq!(got[1]["destinations"][0]["number"], "+919845012310");
    assert_eq!(got[1]["destinations"][1]["number"], "+919845012311");
    assert_eq!(got[1]["destinations"][0]["description"], "Sales");
    assert_eq!(got[2], json!({"type": "dtmf"}));
    assert_eq!(
        got[3],
        json!({"type": "checkAvailability", "provider": "calcom", "eventTypeId": 42, "timeZone": "Asia/Kolkata"})
    );
    assert_eq!(got[4]["message"], "Booking that now");
    assert_eq!(got[4]["timeZone"], "America/New_York");
    assert_eq!(got[5]["name"], "lookup_order");
    assert_eq!(got[5]["timeoutSeconds"], 10, "the default timeout");
    assert_eq!(got[5]["async"], true);
    assert_eq!(got[5]["parameters"]["required"], json!(["orderId"]));
    assert!(is_hex_secret(&got[5]["secret"]), "generated: {}", got[5]);
    assert_eq!(got[6]["secret"], "client-chosen-secret-0123456789");
    assert_eq!(got[6]["timeoutSeconds"], 30);
    assert_eq!(got[6]["async"], false);
    assert_eq!(created["toolLimits"], json!({"perTurn": 4, "perCall": 16}));

    let read = app
        .get(&ws.key, &format!("/api/agents/{}", id_of(&created)))
        .await
        .expect(200)
        .body;
    assert_eq!(read["tools"], created["tools"]);
    assert_eq!(read["toolLimits"], created["toolLimits"]);
    let listed = app.get(&ws.key, "/api/agents").await.expect(200).body;
    assert_eq!(listed[0]["tools"], created["tools"]);

    // Two agents get different secrets.
    let other = app
        .create_agent(
            &ws.key,
            json!({"name": "Other", "tools": [function("lookup_order", "http://127.0.0.1:9/hook")]}),
        )
        .await;
    assert!(is_hex_secret(&other["tools"][0]["secret"]));
    assert_ne!(other["tools"][0]["secret"], got[5]["secret"]);

    // Agents without tools read an empty list and the default limits.
    let plain = app.create_agent(&ws.key, json!({"name": "Plain"})).await;
    assert_eq!(plain["tools"], json!([]));
    assert_eq!(plain["toolLimits"], json!({"perTurn": 4, "perCall": 16}));
}

#[tokio::test]
async fn update_replaces_the_list_and_keeps_secrets_of_functions_sent_back() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let created = app
        .create_agent(
            &ws.key,
            json!({"name": "Tools", "tools": [
                {"type": "endCall"},
                function("lookup_order", "http://127.0.0.1:9/hook"),
                function("cancel_order", "http://127.0.0.1:9/cancel"),
            ]}),
        )
        .await;
    let path = format!("/api/agents/{}", id_of(&created));
    let lookup_secret = created["tools"][1]["secret"].clone();
    assert!(is_hex_secret(&lookup_secret));

    // The list is replaced: endCall and cancel_order are gone; lookup_order
    // comes back without its secret and keeps it; check_stock gets a new one.
    let mut lookup = function("lookup_order", "http://127.0.0.1:9/v2/hook");
    lookup["timeoutSeconds"] = json!(5);
    let patched = app
        .patch(
            &ws.key,
            &path,
            json!({"tools": [lookup, function("check_stock", "http://127.0.0.1:9/stock")]}),
        )
        .await
        .expect(200)
        .body;
    let tools = patched["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 2, "{patched}");
    assert_eq!(tools[0]["name"], "lookup_order");
    assert_eq!(tools[0]["url"], "http://127.0.0.1:9/v2/hook");
    assert_eq!(tools[0]["timeoutSeconds"], 5);
    assert_eq!(tools[0]["secret"], lookup_secret, "kept across the update");
    assert!(is_hex_secret(&tools[1]["secret"]));
    assert_ne!(tools[1]["secret"], lookup_secret);

    // A secret sent on update replaces the stored one.
    let mut rotated = function("lookup_order", "http://127.0.0.1:9/v2/hook");
    rotated["secret"] = json!("a-rotated-secret-for-lookup");
    let patched = app
        .patch(&ws.key, &path, json!({"tools": [rotated]}))
        .await
        .expect(200)
        .body;
    assert_eq!(patched["tools"][0]["secret"], "a-rotated-secret-for-lookup");

    // Patches without `tools` leave them alone; toolLimits fields left out
    // take their defaults.
    let patched = app
        .patch(
            &ws.key,
            &path,
            json!({"prompt": "Be brief", "toolLimits": {"perTurn": 2}}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(patched["tools"][0]["secret"], "a-rotated-secret-for-lookup");
    assert_eq!(patched["toolLimits"], json!({"perTurn": 2, "perCall": 16}));

    // A refused update changes nothing.
    let reply = app
        .patch(
            &ws.key,
            &path,
            json!({"tools": [{"type": "dtmf"}, {"type": "dtmf"}]}),
        )
        .await
        .expect(400);
    assert!(reply.message().contains("tools[1]"), "{}", reply.text);
    let read = app.get(&ws.key, &path).await.expect(200).body;
    assert_eq!(read["tools"], patched["tools"]);

    // An empty list removes every tool.
    let cleared = app
        .patch(&ws.key, &path, json!({"tools": []}))
        .await
        .expect(200)
        .body;
    assert_eq!(cleared["tools"], json!([]));
}

#[tokio::test]
async fn bad_tools_are_refused_naming_the_path() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let key = &ws.key;
    let url = "http://127.0.0.1:9/hook";
    let long = "x".repeat(501);
    let calendar =
        |tz: &str| json!({"type": "checkAvailability", "eventTypeId": 7, "timeZone": tz});
    let with = |field: &str, value: Value| {
        let mut f = function("lookup_order", url);
        f[field] = value;
        f
    };
    let eleven: Vec<Value> = (0..11)
        .map(|i| json!({"number": format!("+9198450123{i:02}")}))
        .collect();
    let thirty_three: Vec<Value> = (0..33).map(|i| function(&format!("f{i}"), url)).collect();

    let cases: Vec<(Value, &str)> = vec![
        // Unknown type, unknown field, missing type: the entry is named.
        (json!([{"type": "teleport"}]), "tools[0]"),
        (
            json!([{"type": "dtmf"}, {"type": "endCall", "bogus": 1}]),
            "tools[1]",
        ),
        (json!([{"type": "dtmf", "keys": "12"}]), "tools[0]"),
        (
            json!([{"type": "dtmf"}, {"type": "endCall"}, with("extra", json!(true))]),
            "tools[2]",
        ),
        (
            json!([{"type": "endCall"}, {"type": "checkAvailability", "eventTypeId": 1, "timeZone": "UTC", "calendar": "x"}]),
            "tools[1]",
        ),
        (json!([{"message": "hi"}]), "tools[0]"),
        // Names and counts.
        (
            json!([{"type": "endCall"}, {"type": "dtmf"}, {"type": "endCall"}]),
            "tools[2] is a second endCall tool",
        ),
        (
            json!([function("end_call", url)]),
            "tools[0].name \"end_call\" is the name of a built-in tool",
        ),
        (
            json!([{"type": "dtmf"}, function("dtmf", url)]),
            "tools[1].name \"dtmf\" is the name of a built-in tool",
        ),
        (
            json!([function("a", url), {"type": "dtmf"}, function("a", url)]),
            "tools[2].name \"a\" is already the name of tools[0]",
        ),
        (
            Value::Array(thirty_three),
            "tools must hold at most 32 tools",
        ),
        // endCall.
        (
            json!([{"type": "endCall", "message": long}]),
            "tools[0].message must be at most 500 characters",
        ),
        // transferCall.
        (
            json!([{"type": "endCall"}, {"type": "transferCall", "destinations": [{"number": "12345"}]}]),
            "tools[1].destinations[0].number must be an E.164 number",
        ),
        (
            json!([{"type": "transferCall", "destinations": [{"number": "+919845012310"}, {"number": "+911111111111"}]}]),
            "tools[0].destinations[1].number must be an E.164 number",
        ),
        (
            json!([{"type": "transferCall", "destinations": [{"number": "+919845012310"}, {"number": "+91 98450 12310"}]}]),
            "tools[0].destinations[1].number repeats tools[0].destinations[0].number",
        ),
        (
            json!([{"type": "transferCall", "destinations": []}]),
            "tools[0].destinations must hold 1 to 10 destinations",
        ),
        (
            json!([{"type": "transferCall", "destinations": eleven}]),
            "tools[0].destinations must hold 1 to 10 destinations",
        ),
        (
            json!([{"type": "transferCall", "destinations": [{"number": "+919845012310", "message": long}]}]),
            "tools[0].destinations[0].message must be at most 500 characters",
        ),
        (
            json!([{"type": "transferCall", "destinations": [{"number": "+919845012310", "phone": "x"}]}]),
            "tools[0]",
        ),
        // Calendars.
        (
            json!([{"type": "bookAppointment", "provider": "google", "eventTypeId": 7, "timeZone": "UTC"}]),
            "tools[0].provider must be calcom",
        ),
        (
            json!([{"type": "bookAppointment", "eventTypeId": 0, "timeZone": "UTC"}]),
            "tools[0].eventTypeId must be greater than 0",
        ),
        (
            json!([{"type": "dtmf"}, calendar("Mars/Olympus_Mons")]),
            "tools[1].timeZone must be an IANA time zone",
        ),
        (
            json!([{"type": "checkAvailability", "eventTypeId": 7, "timeZone": "UTC", "message": long}]),
            "tools[0].message must be at most 500 characters",
        ),
        // Functions.
        (
            json!([function("look up", url)]),
            "tools[0].name must match ^[a-zA-Z0-9_-]{1,64}$",
        ),
        (
            json!([function(&"n".repeat(65), url)]),
            "tools[0].name must match",
        ),
        (
            json!([with("description", json!("  "))]),
            "tools[0].description must not be blank",
        ),
        (
            json!([with("description", json!("d".repeat(1001)))]),
            "tools[0].description must be at most 1000 characters",
        ),
        (
            json!([with("parameters", json!({"type": "string"}))]),
            "tools[0].parameters.type must be \"object\"",
        ),
        (
            json!([with(
                "parameters",
                json!({"type": "object", "properties": {"x": {"type": "nope"}}})
            )]),
            "tools[0].parameters is not a valid JSON Schema",
        ),
        (
            json!([with("parameters", json!(["object"]))]),
            "tools[0].parameters is not a valid JSON Schema",
        ),
        (
            json!([{"type": "dtmf"}, {"type": "endCall"}, with("url", json!("ftp://example.com/x"))]),
            "tools[2].url must be an http or https URL with a host",
        ),
        (
            json!([with("url", json!("not a url"))]),
            "tools[0].url must be an http or https URL with a host",
        ),
        (
            json!([with("timeoutSeconds", json!(0))]),
            "tools[0].timeoutSeconds must be between 1 and 60",
        ),
        (
            json!([with("timeoutSeconds", json!(61))]),
            "tools[0].timeoutSeconds must be between 1 and 60",
        ),
        (
            json!([with("message", json!(long))]),
            "tools[0].message must be at most 500 characters",
        ),
        (
            json!([with("secret", json!("too-short"))]),
            "tools[0].secret must be 16 to 128 characters",
        ),
        (
            json!([with("secret", json!("s".repeat(129)))]),
            "tools[0].secret must be 16 to 128 characters",
        ),
    ];
    for (tools, expected) in cases {
        let message = refused(&app, key, tools.clone(), json!({})).await;
        assert!(
            message.contains(expected),
            "{tools}\nexpected {expected:?} in {message:?}"
        );
    }

    for (limits, expected) in [
        (
            json!({"perTurn": 0}),
            "toolLimits.perTurn must be between 1 and 10",
        ),
        (
            json!({"perTurn": 11}),
            "toolLimits.perTurn must be between 1 and 10",
        ),
        (
            json!({"perCall": 51}),
            "toolLimits.perCall must be between 1 and 50",
        ),
        (json!({"perReply": 2}), "toolLimits"),
    ] {
        let message = refused(&app, key, json!([]), json!({"toolLimits": limits})).await;
        assert!(
            message.contains(expected),
            "{limits}: expected {expected:?} in {message:?}"
        );
    }
    // Nothing refused was stored.
    let listed = app.get(key, "/api/agents").await.expect(200).body;
    assert_eq!(listed, json!([]));
}

#[tokio::test]
async fn function_urls_into_private_networks_are_refused_at_save() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let key = &ws.key;

    let message = refused(
        &app,
        key,
        json!([function("hook", "http://10.1.2.3/hook")]),
        json!({}),
    )
    .await;
    assert!(message.starts_with("tools[0].url"), "{message}");
    assert!(message.contains("10.1.2.3"), "{message}");
    let message = refused(
        &app,
        key,
        json!([
            {"type": "endCall"},
            function("a", "http://127.0.0.1:9/a"),
            function("metadata", "http://169.254.169.254/"),
        ]),
        json!({}),
    )
    .await;
    assert!(message.starts_with("tools[2].url"), "{message}");
    assert!(message.contains("169.254.169.254"), "{message}");
    let message = refused(
        &app,
        key,
        json!([function("v6", "http://[::1]:9/hook")]),
        json!({}),
    )
    .await;
    assert!(message.starts_with("tools[0].url"), "{message}");

    // The test settings allow-list 127.0.0.1 (as for webhooks).
    assert!(
        app.state()
            .settings
            .webhook_allow_hosts
            .contains(&"127.0.0.1".to_string())
    );
    let port = app.server().addr.port();
    let agent = app
        .create_agent(
            key,
            json!({"name": "Local", "tools": [function("hook", &format!("http://127.0.0.1:{port}/hook"))]}),
        )
        .await;

    // Updates are checked as well.
    let path = format!("/api/agents/{}", id_of(&agent));
    let reply = app
        .patch(
            key,
            &path,
            json!({"tools": [{"type": "dtmf"}, function("hook", "http://192.168.1.10/hook")]}),
        )
        .await
        .expect(400);
    assert!(
        reply.message().starts_with("tools[1].url"),
        "{}",
        reply.text
    );

    // Without the allow-list entry, loopback is refused too.
    let strict = TestApp::spawn_with_settings(|s| s.webhook_allow_hosts.clear()).await;
    let ws = strict.workspace("B").await;
    let message = refused(
        &strict,
        &ws.key,
        json!([function("hook", &format!("http://127.0.0.1:{port}/hook"))]),
        json!({}),
    )
    .await;
    assert!(message.starts_with("tools[0].url"), "{message}");
    assert!(message.contains("127.0.0.1"), "{message}");
}

#[tokio::test]
async fn openapi_documents_tools_and_tool_limits() {
    let app = TestApp::spawn().await;
    let doc = app.get("", "/openapi.json").await.expect(200).body;
    let schemas = &doc["components"]["schemas"];
    for agent in ["AgentInput", "AgentSpec"] {
        let text = schemas[agent].to_string();
        assert!(text.contains("\"tools\""), "{agent}: {text}");
        assert!(text.contains("\"toolLimits\""), "{agent}: {text}");
    }
    let tool = &schemas["AgentTool"];
    let variants = tool["oneOf"].as_array().expect("AgentTool is oneOf");
    // Each variant is told apart by its `type`, a one-value enum it requires.
    let mut kinds = Vec::new();
    for variant in variants {
        let own = variant["allOf"]
            .as_array()
            .and_then(|parts| parts.iter().find(|p| p["properties"]["type"].is_object()))
            .unwrap_or(variant);
        assert!(
            own["required"]
                .as_array()
                .is_some_and(|r| r.contains(&json!("type"))),
            "{variant}"
        );
        kinds.push(own["properties"]["type"]["enum"][0].clone());
    }
    assert_eq!(
        kinds,
        json!([
            "endCall",
            "transferCall",
            "dtmf",
            "checkAvailability",
            "bookAppointment",
            "function"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    assert!(variants[1]["properties"]["destinations"].is_object());
    for (schema, fields) in [
        (
            "TransferDestination",
            &["number", "description", "message"][..],
        ),
        (
            "CalendarTool",
            &["provider", "eventTypeId", "timeZone", "message"],
        ),
        (
            "FunctionTool",
            &[
                "name",
                "description",
                "parameters",
                "url",
                "timeoutSeconds",
                "message",
                "async",
                "secret",
            ],
        ),
    ] {
        for field in fields {
            assert!(
                schemas[schema]["properties"][field].is_object(),
                "{schema}.{field}: {}",
                schemas[schema]
            );
        }
    }
    assert_eq!(
        schemas["FunctionTool"]["properties"]["timeoutSeconds"]["maximum"],
        60
    );
    let limits = &schemas["ToolLimits"]["properties"];
    assert!(limits["perTurn"].is_object(), "{}", schemas["ToolLimits"]);
    assert!(limits["perCall"].is_object(), "{}", schemas["ToolLimits"]);
}
