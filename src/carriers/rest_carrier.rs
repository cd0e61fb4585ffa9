//! The skeleton every REST carrier shares: a workspace's account looked up per
//! request, authorized requests, answers mapped to [`CarriersError`], the placed
//! calls remembered for hang-up and transfer, and the engine's [`Carrier`] trait.
//! A carrier's own file implements [`CarrierApi`]: its account, how it signs a
//! request, and its three requests (dial, hang up, transfer).

use super::{CallIndex, CarrierCredentials, CarrierKind, CarriersError, call_lifetime, send};
use async_trait::async_trait;
use std::marker::PhantomData;
use std::sync::Arc;
use voxline_actors::carrier::{Carrier, CarrierError, DialRequest, StatusSink, TransferRequest};

/// What one carrier's REST API does its own way.
#[async_trait]
pub trait CarrierApi: Send + Sync + Sized + 'static {
    /// The workspace's account: keys and the API's base URL.
    type Account: Send + Sync;
    /// Which carrier this is.
    const KIND: CarrierKind;
    /// Whether the API can end a call. Without it, a call ends when the media
    /// socket closes or rings out, and a hang-up only forgets it.
    const HANGS_UP: bool = true;

    /// Parses the workspace's credential JSON.
    fn account(credential: &serde_json::Value) -> Result<Self::Account, CarriersError>;

    /// Adds the account's authentication to a request.
    fn authorize(
        account: &Self::Account,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, CarriersError>;

    /// Places a call; the carrier's id for it.
    async fn create_call(
        client: &AccountClient<'_, Self>,
        req: &DialRequest,
    ) -> Result<String, CarriersError>;

    /// Ends a call; one that already ended is success.
    async fn end_call(
        client: &AccountClient<'_, Self>,
        carrier_call_id: &str,
    ) -> Result<(), CarriersError>;

    /// Hands a live call to the person in `req`.
    async fn transfer_call(
        client: &AccountClient<'_, Self>,
        req: &TransferRequest,
    ) -> Result<(), CarriersError>;
}

/// One workspace's account with the HTTP client: builds authorized requests and
/// sends them, mapping the answer.
pub struct AccountClient<'a, A: CarrierApi> {
    http: &'a reqwest::Client,
    /// The workspace's account.
    pub account: A::Account,
}

impl<'a, A: CarrierApi> AccountClient<'a, A> {
    /// `account` with the client that sends its requests.
    pub fn new(http: &'a reqwest::Client, account: A::Account) -> Self {
        Self { http, account }
    }

    /// An authorized request to `url`.
    pub fn request(
        &self,
        method: reqwest::Method,
        url: &str,
    ) -> Result<reqwest::RequestBuilder, CarriersError> {
        A::authorize(&self.account, self.http.request(method, url))
    }

    /// Sends `request`; the status and body of a 2xx answer, otherwise
    /// `Unreachable` (no answer, or a 5xx) or `Rejected` (a 4xx, with its body).
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(u16, bytes::Bytes), CarriersError> {
        send(A::KIND, request).await
    }

    /// Sends `request` and reads the new call's id from the JSON answer at
    /// `pointer` (a JSON pointer such as `/data/call_control_id`).
    pub async fn send_for_id(
        &self,
        request: reqwest::RequestBuilder,
        pointer: &str,
    ) -> Result<String, CarriersError> {
        let (_, body) = self.send(request).await?;
        json_id(&body, pointer).ok_or_else(|| CarriersError::UnexpectedResponse {
            kind: A::KIND,
            reason: format!("the answer has no {pointer}"),
        })
    }
}

/// A non-empty string at `pointer` in a JSON body.
pub fn json_id(body: &[u8], pointer: &str) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .pointer(pointer)?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// A REST carrier behind the engine's [`Carrier`] trait, one account per workspace.
pub struct RestCarrier<A: CarrierApi> {
    credentials: Arc<dyn CarrierCredentials>,
    http: reqwest::Client,
    calls: CallIndex,
    api: PhantomData<A>,
}

impl<A: CarrierApi> RestCarrier<A> {
    /// A carrier that looks up each workspace's account in `credentials`.
    pub fn new(credentials: Arc<dyn CarrierCredentials>, http: reqwest::Client) -> Self {
        Self {
            credentials,
            http,
            calls: CallIndex::default(),
            api: PhantomData,
        }
    }

    /// The workspace's account, ready to send requests.
    async fn client(&self, org_id: &str) -> Result<AccountClient<'_, A>, CarriersError> {
        let credential = self
            .credentials
            .for_org(org_id, A::KIND)
            .await
            .ok_or_else(|| CarriersError::NotConfigured {
                kind: A::KIND,
                org_id: org_id.to_string(),
            })?;
        Ok(AccountClient::new(&self.http, A::account(&credential)?))
    }

    /// Places a call and returns the carrier's id for it, remembered for hang-up.
    pub async fn create_call(&self, req: &DialRequest) -> Result<String, CarriersError> {
        let client = self.client(&req.org_id).await?;
        let id = A::create_call(&client, req).await?;
        self.calls.insert(
            &id,
            &req.org_id,
            call_lifetime(req.ring_timeout_seconds, req.time_limit_seconds),
        );
        Ok(id)
    }

    /// Ends a call of a workspace; an already-ended call is success.
    pub async fn end_call(&self, org_id: &str, carrier_call_id: &str) -> Result<(), CarriersError> {
        let client = self.client(org_id).await?;
        A::end_call(&client, carrier_call_id).await
    }

    /// Hands a live call of a workspace to a person.
    pub async fn transfer_call(&self, req: &TransferRequest) -> Result<(), CarriersError> {
        let client = self.client(&req.org_id).await?;
        A::transfer_call(&client, req).await
    }
}

#[async_trait]
impl<A: CarrierApi> Carrier for RestCarrier<A> {
    async fn place(&self, req: DialRequest, _status: StatusSink) -> Result<String, CarrierError> {
        // Progress arrives by the carrier's callbacks, routed to the engine by the service.
        Ok(self.create_call(&req).await?)
    }

    async fn hangup(&self, carrier_call_id: &str) -> Result<(), CarrierError> {
        if !A::HANGS_UP {
            tracing::debug!(
                kind = %A::KIND,
                carrier_call_id,
                "no hang-up request: the media socket's close ends the call"
            );
            self.calls.remove(carrier_call_id);
            return Ok(());
        }
        let Some(org_id) = self.calls.org_for_hangup(A::KIND, carrier_call_id)? else {
            return Ok(());
        };
        self.end_call(&org_id, carrier_call_id).await?;
        self.calls.remove(carrier_call_id);
        Ok(())
    }

    fn adopt(&self, carrier_call_id: &str, org_id: &str, time_limit_seconds: u32) {
        self.calls.insert(
            carrier_call_id,
            org_id,
            call_lifetime(0, time_limit_seconds),
        );
    }

    async fn transfer(&self, req: TransferRequest) -> Result<(), CarrierError> {
        self.transfer_call(&req).await?;
        self.calls.mark_transferred(&req.carrier_call_id);
        Ok(())
    }
}
