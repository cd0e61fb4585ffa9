//! The service's one SIP user agent: an rsipstack endpoint listening on UDP
//! and TCP, its dialog layer, and the loop that answers requests from outside.
//!
//! rsipstack owns the SIP grammar, the transaction state machines (retransmits,
//! timers, ACK of 2xx) and the dialogs; this module only decides what a request
//! that belongs to no transaction means here: an in-dialog request (BYE,
//! re-INVITE, NOTIFY) goes to its dialog; OPTIONS (a trunk's keep-alive) gets
//! 200; a new INVITE goes to the inbound hook, or 403 without one; anything
//! else 405, or 481 when it names a dialog we do not have.

use rsipstack::EndpointBuilder;
use rsipstack::dialog::dialog_layer::DialogLayer;
use rsipstack::sip::{Method, StatusCode};
use rsipstack::transaction::Endpoint;
use rsipstack::transaction::transaction::Transaction;
use rsipstack::transport::TransportLayer;
use rsipstack::transport::tcp_listener::TcpListenerConnection;
use rsipstack::transport::tls::TlsListenerConnection;
use rsipstack::transport::udp::UdpConnection;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::settings::{SipListen, SipSettings};

/// Why the user agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum UserAgentError {
    /// The listen socket could not be bound.
    #[error("the SIP listener on {addr} could not start: {reason}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// rsipstack's or the OS's reason.
        reason: String,
    },
}

/// What answers a new INVITE from outside (the inbound calls' route).
#[async_trait::async_trait]
pub trait InviteHook: Send + Sync + 'static {
    /// Takes the INVITE's server transaction; answers it (or rejects it) in
    /// its own time.
    async fn invite(&self, tx: Transaction);
}

/// The running SIP user agent.
pub struct SipUserAgent {
    endpoint: Endpoint,
    dialogs: Arc<DialogLayer>,
    local: SocketAddr,
    advertised: IpAddr,
    cancel: CancellationToken,
}

impl SipUserAgent {
    /// Starts listening, or returns `None` when the settings turn SIP off.
    pub async fn start(
        settings: &SipSettings,
        hook: Option<Arc<dyn InviteHook>>,
    ) -> Result<Option<Arc<Self>>, UserAgentError> {
        let SipListen::On(addr) = settings.listen else {
            return Ok(None);
        };
        let bind_error = |reason: String| UserAgentError::Bind { addr, reason };
        let cancel = CancellationToken::new();
        let transport = TransportLayer::new(cancel.clone());
        let external = settings
            .public_ip
            .map(|ip| SocketAddr::new(ip, addr.port()));
        let udp = UdpConnection::create_connection(addr, external, Some(cancel.child_token()))
            .await
            .map_err(|e| bind_error(e.to_string()))?;
        let udp_addr = udp
            .get_addr()
            .get_socketaddr()
            .map_err(|e| bind_error(e.to_string()))?;
        // TCP on the same port number as UDP (a port-0 UDP bind chose it).
        let local = SocketAddr::new(addr.ip(), udp_addr.port());
        let tcp_external = external.map(|e| SocketAddr::new(e.ip(), local.port()));
        let tcp = TcpListenerConnection::new(local, tcp_external)
            .await
            .map_err(|e| bind_error(e.to_string()))?;
        transport.add_transport(udp.into());
        transport.add_transport(tcp.into());
        // Built once: it reads the system's root certificates.
        let tls_config = super::tls::transport_tls_config(&settings.tls);
        transport.set_tls_config(tls_config.clone());
        if let Some(tls) = &settings.tls.listen {
            let tls_bind_error = |reason: String| UserAgentError::Bind {
                addr: tls.addr,
                reason,
            };
            // rsipstack binds when the endpoint starts serving and only logs a
            // failure then; a taken port must stop the start here instead.
            drop(std::net::TcpListener::bind(tls.addr).map_err(|e| tls_bind_error(e.to_string()))?);
            let tls_external = settings
                .public_ip
                .map(|ip| SocketAddr::new(ip, tls.addr.port()));
            let listener = TlsListenerConnection::new(tls.addr, tls_external, tls_config)
                .await
                .map_err(|e| tls_bind_error(e.to_string()))?;
            transport.add_transport(listener.into());
        }
        let endpoint = EndpointBuilder::new()
            .with_cancel_token(cancel.clone())
            .with_transport_layer(transport)
            .with_user_agent(concat!("voxline/", env!("CARGO_PKG_VERSION")))
            .build();
        let incoming = endpoint
            .incoming_transactions()
            .map_err(|e| bind_error(e.to_string()))?;
        let dialogs = Arc::new(DialogLayer::new(endpoint.inner.clone()));
        let advertised = settings.public_ip.unwrap_or_else(|| udp_addr.ip());
        let agent = Arc::new(Self {
            endpoint,
            dialogs,
            local: SocketAddr::new(udp_addr.ip(), local.port()),
            advertised,
            cancel,
        });
        let serving = agent.endpoint.inner.clone();
        tokio::spawn(async move {
            if let Err(err) = serving.serve().await {
                tracing::warn!(error = %err, "the SIP endpoint stopped");
            }
        });
        tokio::spawn(answer_requests(Arc::clone(&agent.dialogs), incoming, hook));
        tracing::info!(
            addr = %agent.local,
            advertised = %agent.advertised,
            tls = ?settings.tls.listen.as_ref().map(|l| l.addr),
            "SIP user agent listening (udp, tcp; tls when configured)"
        );
        Ok(Some(agent))
    }

    /// The endpoint's core, for requests outside dialogs (REGISTER).
    pub fn endpoint_inner(&self) -> rsipstack::transaction::endpoint::EndpointInnerRef {
        self.endpoint.inner.clone()
    }

    /// The dialog layer (client dialogs are made here).
    pub fn dialogs(&self) -> &Arc<DialogLayer> {
        &self.dialogs
    }

    /// The address it listens on (UDP and TCP).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The address peers reach us at: for Contact, Via and SDP.
    pub fn advertised_ip(&self) -> IpAddr {
        self.advertised
    }

    /// Stops listening and ends every transaction.
    pub fn shutdown(&self) {
        self.cancel.cancel();
    }
}

impl Drop for SipUserAgent {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Answers requests that belong to no running transaction, until the
/// endpoint stops.
async fn answer_requests(
    dialogs: Arc<DialogLayer>,
    mut incoming: rsipstack::transaction::TransactionReceiver,
    hook: Option<Arc<dyn InviteHook>>,
) {
    while let Some(mut tx) = incoming.recv().await {
        if let Some(mut dialog) = dialogs.match_dialog(&tx) {
            tokio::spawn(async move {
                if let Err(err) = dialog.handle(&mut tx).await {
                    tracing::debug!(error = %err, "an in-dialog request failed");
                }
            });
            continue;
        }
        let method = tx.original.method;
        let reply = match method {
            Method::Invite => match &hook {
                Some(hook) => {
                    let hook = Arc::clone(hook);
                    tokio::spawn(async move { hook.invite(tx).await });
                    continue;
                }
                None => StatusCode::Forbidden,
            },
            Method::Options => StatusCode::OK,
            // The ACK of a final response we sent; nothing to say.
            Method::Ack => continue,
            Method::Bye | Method::Cancel | Method::Notify | Method::Refer | Method::Info => {
                StatusCode::CallTransactionDoesNotExist
            }
            _ => StatusCode::MethodNotAllowed,
        };
        tokio::spawn(async move {
            if let Err(err) = tx.reply(reply).await {
                tracing::debug!(%method, error = %err, "replying to a SIP request failed");
            }
        });
    }
}
