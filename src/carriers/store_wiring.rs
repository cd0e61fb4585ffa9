//! Connects the real carriers to the service: workspace carrier accounts come
//! from the encrypted credentials table, verified status callbacks go to the
//! call engine, and transferred calls' leg reports (from real carriers' callbacks
//! and from the sim carrier) go to the store.

use super::callbacks::CallbackHost;
use super::{CarrierCredentials, CarrierKind, CarriersError};
use crate::domain::{CallId, OrgId};
use crate::secrets::credentials::CredentialCipher;
use crate::store::Store;
use crate::store::marked_cache::{MarkedCache, follow};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use voxline_actors::carrier::{CarrierStatus, TransferLeg};
use voxline_actors::engine::Engine;
use voxline_actors::sim::carrier::TransferLegSink;

/// How long an opened credential may be served though no change was marked,
/// bounding staleness should a change ever bypass the store.
const OPENED_TTL: Duration = Duration::from_secs(30);

/// Opened credentials kept at most; beyond it the cache starts over.
const MAX_OPENED: usize = 10_000;

/// An opened credential (`None`: the workspace has none of that kind).
type Opened = Option<Arc<serde_json::Value>>;

/// Reads and decrypts a workspace's carrier account from the store.
///
/// A server keeps what it opened ([`StoreCredentials::cached`]): every dial
/// and every carrier status callback needs the account (callbacks to check
/// their signature), and a burst of 1,000 answered calls brings about 5,000
/// callbacks within seconds. Reading and opening the row for each queued
/// them on the database pool. The cache drops everything when the store
/// marks a credential change, so a replaced or deleted account is never
/// served after its write answered on this node, nor after the other nodes
/// hear of it on Postgres.
pub struct StoreCredentials {
    store: Store,
    cipher: Arc<CredentialCipher>,
    opened: Arc<MarkedCache<(OrgId, String), Opened>>,
}

impl StoreCredentials {
    /// Credentials sealed with this server's secret, read from the store
    /// every time (one-shot commands).
    pub fn new(store: Store, secret: &[u8]) -> Self {
        Self {
            store,
            cipher: Arc::new(CredentialCipher::new(secret)),
            opened: Arc::new(MarkedCache::new(None, OPENED_TTL, MAX_OPENED)),
        }
    }

    /// Credentials sealed with this server's secret, kept once opened until
    /// the store's credentials marker moves or a notice of `notices` (the
    /// cluster bus's credentials channel) arrives. Off when the marker sees
    /// only this process and no notices tell of the others.
    pub fn cached(
        store: Store,
        secret: &[u8],
        notices: Option<broadcast::Receiver<String>>,
    ) -> Self {
        let marker = store
            .credentials_marker()
            .filter(|marker| !marker.is_local() || notices.is_some())
            .cloned();
        let opened = Arc::new(MarkedCache::new(marker, OPENED_TTL, MAX_OPENED));
        if let Some(notices) = notices {
            // A workspace's change drops every entry: changes are rare, and
            // one workspace's kinds would otherwise need a scan.
            tokio::spawn(follow(Arc::downgrade(&opened), notices, |_| None));
        }
        Self {
            store,
            cipher: Arc::new(CredentialCipher::new(secret)),
            opened,
        }
    }

    /// The decrypted credential JSON of `kind`, or `None` when absent or unreadable.
    pub async fn load(&self, org_id: OrgId, kind: &str) -> Option<serde_json::Value> {
        let key = (org_id, kind.to_string());
        let miss = match self.opened.get(&key) {
            Ok(opened) => return opened.as_deref().cloned(),
            Err(miss) => miss,
        };
        let sealed = match self.store.credential(org_id, kind).await {
            Ok(sealed) => sealed,
            Err(err) => {
                tracing::warn!(%org_id, kind, error = %err, "reading a credential failed");
                return None;
            }
        };
        let opened = match sealed {
            Some(sealed) => match self.cipher.open(&sealed.0, &sealed.1) {
                Ok(plain) => serde_json::from_slice(&plain).ok().map(Arc::new),
                Err(err) => {
                    // Not kept: a row that does not open is worth a warning every time.
                    tracing::warn!(%org_id, kind, error = %err, "a stored credential does not open");
                    return None;
                }
            },
            None => None,
        };
        if let Some(miss) = miss {
            self.opened.put(miss, key, opened.clone());
        }
        opened.as_deref().cloned()
    }
}

#[async_trait]
impl CarrierCredentials for StoreCredentials {
    async fn for_org(&self, org_id: &str, kind: CarrierKind) -> Option<serde_json::Value> {
        // The engine names workspaces by text; one that is no workspace id has no account.
        self.load(org_id.parse().ok()?, kind.as_str()).await
    }
}

/// Hands a carrier status for a call this node does not hold to the node
/// that does (several nodes on one database); the cluster room implements it,
/// so carriers need not know how nodes talk.
#[async_trait]
pub trait StatusForwarder: Send + Sync {
    /// Sends `status` of `call_id` on to its owner, if a live peer owns it.
    async fn forward_status(&self, call_id: CallId, status: CarrierStatus);
}

/// The service side of carrier callbacks: the call's workspace account, the
/// engine (whatever media its calls run on), and the peers that may hold the call.
pub struct ServiceCallbackHost<M: Send + 'static> {
    store: Store,
    engine: Engine<M>,
    public_url: Option<String>,
    credentials: Arc<StoreCredentials>,
    peers: Option<Arc<dyn StatusForwarder>>,
}

impl<M: Send + 'static> ServiceCallbackHost<M> {
    /// Callbacks answered from `store`, `credentials` (the server's, so
    /// callbacks share what dials opened) and `engine`; `public_url` is the
    /// configured base URL, and `peers` forwards statuses of calls other
    /// nodes hold (None on one node).
    pub fn new(
        store: Store,
        credentials: Arc<StoreCredentials>,
        engine: Engine<M>,
        public_url: Option<String>,
        peers: Option<Arc<dyn StatusForwarder>>,
    ) -> Self {
        Self {
            store,
            engine,
            public_url,
            credentials,
            peers,
        }
    }
}

#[async_trait]
impl<M: Send + 'static> CallbackHost for ServiceCallbackHost<M> {
    fn public_base_url(&self) -> Option<String> {
        self.public_url.clone()
    }

    async fn credential_for_call(
        &self,
        call_id: &str,
        kind: CarrierKind,
    ) -> Option<serde_json::Value> {
        // A callback path that names no call id names no stored call.
        let call_id: CallId = call_id.parse().ok()?;
        // A call live here names its workspace without a database read;
        // one that ended, or lives on another node, is looked up.
        let org_id = match self.engine.live_call_org(call_id.into()) {
            Some(org) => OrgId::from(org),
            None => match self.store.call_org(call_id).await {
                Ok(org) => org?,
                Err(err) => {
                    tracing::warn!(%call_id, error = %err, "looking up a callback's call failed");
                    return None;
                }
            },
        };
        self.credentials.load(org_id, kind.as_str()).await
    }

    fn carrier_status(&self, call_id: &str, status: CarrierStatus) {
        // A verified callback path that names no call id names no call we placed.
        let Ok(id) = call_id.parse::<CallId>() else {
            tracing::debug!(call_id, "carrier status for a path that names no call");
            return;
        };
        let Err(err) = self.engine.carrier_status(id.into(), status.clone()) else {
            return;
        };
        // Another node may own the call (a load balancer sent the callback
        // here): it gets the status over the bus.
        if let Some(peers) = &self.peers {
            let peers = peers.clone();
            tokio::spawn(async move { peers.forward_status(id, status).await });
            return;
        }
        // A status for a call that is no longer live (ended, or lost in a
        // restart and already reconciled) has nothing left to change.
        tracing::debug!(call = %id, error = %err, "carrier status for a call that is not live");
    }

    async fn record_transfer_leg(&self, leg: TransferLeg) -> Result<bool, CarriersError> {
        store_transfer_leg(&self.store, &leg).await
    }
}

/// Stores a transferred call's leg report; `false` when the call is not stored
/// (including a call id that is no call id at all).
pub async fn store_transfer_leg(store: &Store, leg: &TransferLeg) -> Result<bool, CarriersError> {
    let Ok(call_id) = leg.call_id.parse::<CallId>() else {
        return Ok(false);
    };
    Ok(store
        .record_transfer_leg(call_id, &leg.status, leg.duration_seconds)
        .await?)
}

/// The sink the in-process carriers (the sim carrier, and the SIP carrier from
/// its REFER's NOTIFYs) report transferred legs to, storing them like the REST
/// carriers' leg reports: `sim.report_transfers_to(transfer_leg_sink(store.clone()))`.
pub fn transfer_leg_sink(store: Store) -> TransferLegSink {
    Arc::new(move |leg: TransferLeg| {
        // The sim carrier reports from a synchronous callback; storing is async.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(call = %leg.call_id, "a transfer leg reported outside a runtime; dropped");
            return;
        };
        let store = store.clone();
        runtime.spawn(async move {
            match store_transfer_leg(&store, &leg).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(call = %leg.call_id, "a transfer leg for a call that is not stored");
                }
                Err(err) => {
                    tracing::error!(call = %leg.call_id, error = %err, "storing a transfer leg failed");
                }
            }
        });
    })
}
