//! The OpenAPI document, generated from the handlers, and a small docs page.

use crate::app::state::AppState;
use axum::Json;
use axum::Router;
use axum::response::Html;
use axum::routing::get;
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
    let doc = Arc::new(doc);
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
