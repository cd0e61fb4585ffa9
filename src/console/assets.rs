//! The console's static files, compiled into the binary so one `voxline
//! serve` needs nothing beside it. Vendored: htmx 2.0.10 and uPlot 1.6.32
//! (both MIT); ours: `console.css` and `console.js`.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "htmx.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../assets/console/htmx.min.js"),
    },
    Asset {
        name: "uPlot.iife.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../assets/console/uPlot.iife.min.js"),
    },
    Asset {
        name: "uPlot.min.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../assets/console/uPlot.min.css"),
    },
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../assets/console/console.css"),
    },
    Asset {
        name: "console.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../assets/console/console.js"),
    },
];

/// `GET /assets/{name}`; the files need no state, so any router takes them.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/assets/{name}", get(serve))
}

/// The ETag of an asset: the binary's version, since assets only change with it.
fn etag() -> HeaderValue {
    HeaderValue::from_static(concat!("\"", env!("CARGO_PKG_VERSION"), "\""))
}

async fn serve(Path(name): Path<String>, headers: axum::http::HeaderMap) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let tag = etag();
    if headers.get(header::IF_NONE_MATCH) == Some(&tag) {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, tag)]).into_response();
    }
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            // Revalidated hourly: a new binary may bring new files under the
            // same names.
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=3600"),
            ),
            (header::ETAG, tag),
        ],
        asset.body,
    )
        .into_response()
}
