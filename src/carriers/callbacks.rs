//! Carrier status callbacks (`POST /carrier/{provider}/status/{callId}`) and
//! Plivo's answer URL (`GET|POST /carrier/plivo/answer/{callId}`): verify the
//! request came from the workspace's carrier account, then turn it into
//! [`CarrierStatus`].
//!
//! The handlers take what they need as arguments (the callback's public URL,
//! a lookup of the call's workspace credential, and a sink for the status), so
//! the service can mount them on its own router; [`router`] does that wiring
//! for a [`CallbackHost`].

use super::{CarrierKind, CarriersError, plivo, twilio, verify_callback_sig, vonage};
use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::future::Future;
use std::sync::Arc;
use voxline_actors::carrier::CarrierStatus;

/// One callback request as the carrier sent it.
#[derive(Debug, Clone)]
pub struct CallbackRequest {
    /// HTTP method (`GET` or `POST`).
    pub method: Method,
    /// The full public URL the carrier called, query included: what it signed.
    pub url: String,
    /// Request headers (signatures live here).
    pub headers: HeaderMap,
    /// Raw body (form-encoded or JSON).
    pub body: Bytes,
}

impl CallbackRequest {
    /// Rebuilds the public URL from the service's public base URL (e.g.
    /// `https://voxline.example.com`) and the request's original path and query;
    /// without a base, from the `X-Forwarded-Proto` and `Host` headers.
    pub fn new(
        public_base_url: Option<&str>,
        method: Method,
        original_uri: &Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Self {
        let path_and_query = original_uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or("/");
        let base = match public_base_url {
            Some(base) => base.trim_end_matches('/').to_string(),
            None => {
                let scheme = header_str(&headers, "x-forwarded-proto").unwrap_or("http");
                let host = header_str(&headers, "host").unwrap_or("localhost");
                format!("{scheme}://{host}")
            }
        };
        Self {
            method,
            url: format!("{base}{path_and_query}"),
            headers,
            body,
        }
    }

    /// The body's fields: form pairs, or a JSON object's scalar members as strings.
    pub fn fields(&self) -> Vec<(String, String)> {
        let trimmed = self.body.trim_ascii_start();
        if trimmed.starts_with(b"{") {
            let Ok(serde_json::Value::Object(map)) =
                serde_json::from_slice::<serde_json::Value>(trimmed)
            else {
                return Vec::new();
            };
            return map
                .into_iter()
                .filter_map(|(k, v)| match v {
                    serde_json::Value::String(s) => Some((k, s)),
                    serde_json::Value::Number(n) => Some((k, n.to_string())),
                    serde_json::Value::Bool(b) => Some((k, b.to_string())),
                    _ => None,
                })
                .collect();
        }
        form_urlencoded::parse(&self.body).into_owned().collect()
    }

    /// A body field by name (first occurrence).
    pub fn field(&self, name: &str) -> Option<String> {
        field(&self.fields(), name)
    }

    /// A query parameter of the URL by name (decoded).
    pub fn query_param(&self, name: &str) -> Option<String> {
        let query = self.url.split_once('?')?.1;
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    fn header(&self, name: &str) -> Option<&str> {
        header_str(&self.headers, name)
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

fn unverifiable(message: &str) -> CarriersError {
    CarriersError::Unverifiable(message.to_string())
}

/// Checks that a callback was sent by the carrier account in `credential`.
pub fn verify(
    kind: CarrierKind,
    call_id: &str,
    request: &CallbackRequest,
    credential: &serde_json::Value,
) -> Result<(), CarriersError> {
    match kind {
        CarrierKind::Twilio => {
            let account = twilio::TwilioAccount::from_credential(credential)?;
            let signature = request
                .header("x-twilio-signature")
                .ok_or_else(|| unverifiable("missing X-Twilio-Signature"))?;
            if twilio::verify_form(&account.auth_token, &request.url, &request.body, signature) {
                Ok(())
            } else {
                Err(unverifiable("X-Twilio-Signature does not match"))
            }
        }
        CarrierKind::Plivo => {
            let account = plivo::PlivoAccount::from_credential(credential)?;
            let signature = request
                .header("x-plivo-signature-v3")
                .ok_or_else(|| unverifiable("missing X-Plivo-Signature-V3"))?;
            let nonce = request
                .header("x-plivo-signature-v3-nonce")
                .ok_or_else(|| unverifiable("missing X-Plivo-Signature-V3-Nonce"))?;
            let params = if request.method == Method::GET {
                Vec::new()
            } else {
                request.fields()
            };
            if plivo::verify_v3(
                &account.auth_token,
                request.method.as_str(),
                &request.url,
                &params,
                nonce,
                signature,
            ) {
                Ok(())
            } else {
                Err(unverifiable("X-Plivo-Signature-V3 does not match"))
            }
        }
        CarrierKind::Exotel => {
            // Exotel does not sign: our own `sig` in the status URL stands in.
            let account = super::ExotelAccount::from_credential(credential)?;
            let sig = request
                .query_param("sig")
                .ok_or_else(|| unverifiable("missing callback sig"))?;
            if verify_callback_sig(&account.api_token, call_id, &sig) {
                Ok(())
            } else {
                Err(unverifiable("callback sig does not match"))
            }
        }
        CarrierKind::Vonage => {
            let account = vonage::VonageAccount::from_credential(credential)?;
            let sig = request
                .query_param("sig")
                .ok_or_else(|| unverifiable("missing callback sig"))?;
            if !verify_callback_sig(&account.private_key_pem, call_id, &sig) {
                return Err(unverifiable("callback sig does not match"));
            }
            if let Some(secret) = &account.signature_secret {
                let authorization = request
                    .header("authorization")
                    .ok_or_else(|| unverifiable("missing signed-webhook Authorization"))?;
                if !vonage::verify_signed_webhook(secret, authorization, &request.body) {
                    return Err(unverifiable("signed-webhook JWT does not match"));
                }
            }
            Ok(())
        }
    }
}

/// Reads the progress a (verified) status callback reports; `None` when it
/// reports nothing the engine acts on.
pub fn parse_status(
    kind: CarrierKind,
    request: &CallbackRequest,
) -> Result<Option<CarrierStatus>, CarriersError> {
    let fields = request.fields();
    let status = match kind {
        CarrierKind::Twilio => {
            let call_status = field(&fields, "CallStatus")
                .ok_or_else(|| CarriersError::BadCallback("missing CallStatus".into()))?;
            twilio::map_status(&call_status, field(&fields, "AnsweredBy").as_deref())
        }
        CarrierKind::Plivo => {
            let call_status = field(&fields, "CallStatus");
            let event = field(&fields, "Event");
            if call_status.is_none() && event.is_none() {
                return Err(CarriersError::BadCallback(
                    "missing CallStatus and Event".into(),
                ));
            }
            plivo::map_status(call_status.as_deref(), event.as_deref())
        }
        CarrierKind::Exotel => {
            let status = field(&fields, "Status").or_else(|| field(&fields, "status"));
            let event_type = field(&fields, "EventType").or_else(|| field(&fields, "event_type"));
            if status.is_none() && event_type.is_none() {
                return Err(CarriersError::BadCallback("missing Status".into()));
            }
            super::exotel::map_status(status.as_deref(), event_type.as_deref())
        }
        CarrierKind::Vonage => {
            let status = field(&fields, "status")
                .ok_or_else(|| CarriersError::BadCallback("missing status".into()))?;
            vonage::map_status(&status)
        }
    };
    Ok(status)
}

/// Resolves a provider path segment to a carrier kind.
pub fn provider_kind(provider: &str) -> Result<CarrierKind, CarriersError> {
    CarrierKind::parse(provider).ok_or_else(|| CarriersError::UnknownProvider(provider.to_string()))
}

/// Verifies and parses a status callback; on success hands the status (if any) to `on_status`.
pub async fn process_status<L, Fut>(
    provider: &str,
    call_id: &str,
    request: &CallbackRequest,
    credential_for: L,
    on_status: impl FnOnce(CarrierStatus),
) -> Result<Option<CarrierStatus>, CarriersError>
where
    L: FnOnce(CarrierKind) -> Fut,
    Fut: Future<Output = Option<serde_json::Value>>,
{
    let kind = provider_kind(provider)?;
    let credential = credential_for(kind)
        .await
        .ok_or_else(|| unverifiable("callback cannot be verified"))?;
    verify(kind, call_id, request, &credential)?;
    let status = parse_status(kind, request)?;
    if let Some(status) = &status {
        on_status(status.clone());
    }
    Ok(status)
}

/// The handler of `POST /carrier/{provider}/status/{callId}`: 200 on success
/// (also for statuses the engine ignores), 403 `{message}` when unverifiable,
/// 400 when unreadable, 404 for an unknown provider.
///
/// `credential_for(kind)` returns the decrypted credential of the workspace
/// that owns `call_id` (`None` when the call or credential is unknown);
/// `on_status` receives the parsed status, typically `Engine::carrier_status`.
pub async fn status_callback<L, Fut>(
    provider: &str,
    call_id: &str,
    request: CallbackRequest,
    credential_for: L,
    on_status: impl FnOnce(CarrierStatus),
) -> Response
where
    L: FnOnce(CarrierKind) -> Fut,
    Fut: Future<Output = Option<serde_json::Value>>,
{
    match process_status(provider, call_id, &request, credential_for, on_status).await {
        Ok(_) => StatusCode::OK.into_response(),
        Err(err) => {
            tracing::warn!(provider, call = call_id, error = %err, "carrier callback refused");
            err.into_response()
        }
    }
}

/// The handler of `GET|POST /carrier/plivo/answer/{callId}`: verifies Plivo's
/// signature, reports the call answered, and returns the `<Stream>` XML built
/// from the `media` and `token` the answer URL carries.
pub async fn plivo_answer<L, Fut>(
    call_id: &str,
    request: CallbackRequest,
    credential_for: L,
    on_status: impl FnOnce(CarrierStatus),
) -> Response
where
    L: FnOnce(CarrierKind) -> Fut,
    Fut: Future<Output = Option<serde_json::Value>>,
{
    let answer = async move {
        let credential = credential_for(CarrierKind::Plivo)
            .await
            .ok_or_else(|| unverifiable("callback cannot be verified"))?;
        verify(CarrierKind::Plivo, call_id, &request, &credential)?;
        let media = request
            .query_param("media")
            .ok_or_else(|| CarriersError::BadCallback("answer URL lacks media".into()))?;
        let token = request
            .query_param("token")
            .ok_or_else(|| CarriersError::BadCallback("answer URL lacks token".into()))?;
        Ok::<_, CarriersError>(plivo::stream_xml(&media, &token))
    };
    match answer.await {
        Ok(xml) => {
            // Plivo fetches the answer URL when the callee picks up; it sends no separate answered event.
            on_status(CarrierStatus::Answered);
            ([(header::CONTENT_TYPE, "application/xml")], xml).into_response()
        }
        Err(err) => {
            tracing::warn!(call = call_id, error = %err, "plivo answer refused");
            err.into_response()
        }
    }
}

/// What [`router`] needs from the service.
#[async_trait]
pub trait CallbackHost: Send + Sync + 'static {
    /// The public base URL carriers call (e.g. `https://voxline.example.com`),
    /// or `None` to rebuild it from the request's `Host` header.
    fn public_base_url(&self) -> Option<String>;

    /// The decrypted credential of `kind` of the workspace that owns `call_id`.
    async fn credential_for_call(
        &self,
        call_id: &str,
        kind: CarrierKind,
    ) -> Option<serde_json::Value>;

    /// Delivers a verified status to the engine.
    fn carrier_status(&self, call_id: &str, status: CarrierStatus);
}

/// The callback routes over a [`CallbackHost`], mergeable into any router.
pub fn router<S>(host: Arc<dyn CallbackHost>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    Router::new()
        .route("/carrier/{provider}/status/{call_id}", post(status_route))
        .route(
            "/carrier/plivo/answer/{call_id}",
            get(answer_route).post(answer_route),
        )
        .with_state(host)
}

async fn status_route(
    State(host): State<Arc<dyn CallbackHost>>,
    Path((provider, call_id)): Path<(String, String)>,
    OriginalUri(uri): OriginalUri,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = CallbackRequest::new(
        host.public_base_url().as_deref(),
        method,
        &uri,
        headers,
        body,
    );
    let lookup_host = Arc::clone(&host);
    let lookup_call = call_id.clone();
    status_callback(
        &provider,
        &call_id,
        request,
        |kind| async move { lookup_host.credential_for_call(&lookup_call, kind).await },
        |status| host.carrier_status(&call_id, status),
    )
    .await
}

async fn answer_route(
    State(host): State<Arc<dyn CallbackHost>>,
    Path(call_id): Path<String>,
    OriginalUri(uri): OriginalUri,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = CallbackRequest::new(
        host.public_base_url().as_deref(),
        method,
        &uri,
        headers,
        body,
    );
    let lookup_host = Arc::clone(&host);
    let lookup_call = call_id.clone();
    plivo_answer(
        &call_id,
        request,
        |kind| async move { lookup_host.credential_for_call(&lookup_call, kind).await },
        |status| host.carrier_status(&call_id, status),
    )
    .await
}
