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
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    components(schemas(super::MessageBody))
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
