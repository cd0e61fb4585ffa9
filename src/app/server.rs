//! `voxline serve`: wires storage, state, the HTTP listeners and background jobs,
//! and shuts them down in order.

use crate::access::rate_limit::RateLimiter;
use crate::admin::bootstrap::{Bootstrapped, bootstrap_if_empty};
use crate::agents::service::AgentService;
use crate::app::telemetry::metrics_handle;
use crate::background::{janitor, leased_worker};
use crate::batches::service::BatchService;
use crate::calls::call_tools::ToolDeps;
use crate::calls::ledger::StoreLedger;
use crate::calls::media_stream::CallEngine;
use crate::calls::runner::CallRunner;
use crate::calls::service::CallService;
use crate::calls::welcome_cache::{WelcomeCache, sim_tts_for_agents};
use crate::carriers::store_wiring::StoreCredentials;
use crate::cluster::bus::ClusterBus;
use crate::cluster::service::{ClusterParts, ClusterService};
use crate::config::Settings;
use crate::domain::clock::SharedClock;
use crate::http;
use crate::http::state::{AppInner, AppState};
use crate::inbound::service::InboundParts;
use crate::postcall::analysis::worker::AnalysisJobs;
use crate::postcall::ratings::scoring::Rater;
use crate::postcall::ratings::worker::RatingJobs;
use crate::providers::resilience::Breakers;
use crate::providers::select::ProviderSelector;
use crate::recordings::RecordingStore;
use crate::store::nodes::ALL_CHANNELS;
use crate::store::{LEASED_JOB_TABLES, Store};
use crate::tools::function::FunctionCaller;
use crate::webhooks::delivery::DeliveryJobs;
use anyhow::Context;
use axum::Router;
use axum::routing::get;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use voxline_actors::carrier::Carrier;
use voxline_actors::ended_reason::EndedReason;
use voxline_actors::engine::EngineConfig;
use voxline_actors::media_token::MediaTokens;
use voxline_actors::sim::carrier::{CalleeLauncher, SimCarrier, SimCarrierConfig};

/// A running server.
pub struct Server {
    /// Where the API listens.
    pub addr: SocketAddr,
    /// Where /metrics listens.
    pub admin_addr: SocketAddr,
    /// What first-run bootstrap created, if it ran.
    pub bootstrapped: Option<Bootstrapped>,
    /// Where the SIP user agent listens (UDP and TCP), when SIP is on.
    pub sip_addr: Option<SocketAddr>,
    state: AppState,
    /// Cancelled to start the shutdown: listeners stop accepting, loops stop ticking.
    stop: CancellationToken,
    /// Cancelled when draining starts (a child of `stop`): the loops that
    /// hand out new calls (dispatcher, batch scheduler) stop ticking.
    intake: CancellationToken,
    /// Cancelled to cut post-call work in flight (analyses, ratings); a
    /// drain first lets it finish, within its bound.
    abandon: CancellationToken,
    /// The webhook client, for the final flush of the outbox.
    webhook_http: crate::egress::GuardedClient,
    /// The listeners and background loops, waited for on shutdown.
    tasks: TaskTracker,
}

impl Server {
    /// Opens the store, bootstraps if empty, binds both listeners and starts
    /// the background jobs.
    pub async fn start(settings: Settings, clock: SharedClock) -> anyhow::Result<Self> {
        Self::start_with_carriers(settings, clock, HashMap::new()).await
    }

    /// [`Server::start`] with `extra` carriers registered by name beside the
    /// built-in ones (replacing any of the same name), e.g. a test carrier
    /// that hands the dialed media stream to the test.
    pub async fn start_with_carriers(
        settings: Settings,
        clock: SharedClock,
        extra: HashMap<String, Arc<dyn Carrier>>,
    ) -> anyhow::Result<Self> {
        install_tls_provider();
        std::fs::create_dir_all(&settings.storage.data_dir).with_context(|| {
            format!("creating data dir {}", settings.storage.data_dir.display())
        })?;
        let node_id = settings.node.resolve_id(&settings.storage)?;
        let store = Store::connect(
            &settings.storage.database_url,
            settings.storage.db_pool_size,
        )
        .await
        .context("opening the database")?;
        let secret = crate::secrets::server_secret::ServerSecret::resolve(
            &store,
            settings.storage.secret.is_some(),
            || Ok(settings.storage.load_secret()?),
        )
        .await?;
        let bootstrapped = if settings.no_bootstrap {
            None
        } else {
            bootstrap_if_empty(&store, clock.now()).await?
        };
        let stop = CancellationToken::new();
        let intake = stop.child_token();
        let abandon = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("binding {}", settings.listen))?;
        let addr = listener.local_addr()?;
        let admin_listener = tokio::net::TcpListener::bind(settings.admin_listen)
            .await
            .with_context(|| format!("binding admin {}", settings.admin_listen))?;
        let admin_addr = admin_listener.local_addr()?;
        let public_url = settings
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{addr}"));
        let ws_base = public_url
            .replacen("https://", "wss://", 1)
            .replacen("http://", "ws://", 1);

        let limiter = RateLimiter::new(store.clone(), clock.clone());
        let ledger = Arc::new(StoreLedger::new(
            store.clone(),
            clock.clone(),
            settings.ratings.webhook_wait,
        ));
        let media_tokens = MediaTokens::new(&secret);
        let welcome_cache = WelcomeCache::new(sim_tts_for_agents(&settings.sim));
        let breakers = Breakers::default();
        let recordings = RecordingStore::open(&settings.recordings, &settings.storage.data_dir)
            .context("opening the recordings store (VOXLINE_RECORDINGS_URL)")?;
        let tasks = TaskTracker::new();
        // Started before the engine: the credentials its carriers dial with
        // follow the other nodes' changes on it.
        let bus = ClusterBus::start(&store, &ALL_CHANNELS, &tasks, &stop).await?;
        let credentials = Arc::new(StoreCredentials::cached(
            store.clone(),
            &secret,
            bus.as_ref()
                .and_then(|bus| bus.subscribe(crate::store::nodes::CREDENTIALS_CHANNEL)),
        ));
        let (engine, sip) = start_engine(
            &settings,
            &credentials,
            &store,
            &clock,
            &ledger,
            &media_tokens,
            &ws_base,
            &public_url,
            &welcome_cache,
            &breakers,
            &recordings,
            extra,
        )
        .await?;
        if let Some(agent) = sip.user_agent() {
            let registrations = Arc::new(crate::sip::registrations::Registrations::default());
            tasks.spawn(registrations.run(
                Arc::clone(agent),
                store.clone(),
                Arc::clone(&credentials) as _,
                stop.clone(),
            ));
        }
        store
            .register_node(&node_id, &public_url, clock.now().timestamp_millis())
            .await?;
        let key_cache = crate::access::key_cache::KeyCache::new(&store, bus.as_ref());
        let rater = Arc::new(Rater::new(ProviderSelector::new(
            store.clone(),
            &settings.providers,
            Some(&secret),
            breakers.clone(),
        )));
        let agent_cache = crate::http::agent_cache::AgentCache::new(&store, bus.as_ref());
        let node_status: Arc<crate::cluster::node_status::NodeStatus> = Arc::default();
        let calls = CallService::new(
            store.clone(),
            clock.clone(),
            engine.clone(),
            ledger.clone(),
            node_id.clone(),
            settings.sim.ring_seconds,
            settings.calling_hours,
        );
        let batches = BatchService::new(calls.clone());
        let postcall_slots = Arc::new(crate::postcall::llm_slots::LlmSlots::new(
            settings.ratings.postcall_llm_concurrency,
        ));
        let postcall = crate::postcall::service::PostcallService::new(
            store.clone(),
            clock.clone(),
            node_id.clone(),
            rater.clone(),
            postcall_slots.clone(),
        );
        let agents = AgentService::new(
            store.clone(),
            clock.clone(),
            welcome_cache.clone(),
            &settings.webhook_allow_hosts,
            ProviderSelector::new(
                store.clone(),
                &settings.providers,
                Some(&secret),
                breakers.clone(),
            ),
        );
        let cluster = ClusterService::new(ClusterParts {
            calls: calls.clone(),
            node: settings.node.clone(),
            public_url: public_url.clone(),
            bus: bus.clone(),
            node_status: node_status.clone(),
        });
        let inbound = crate::inbound::service::InboundService::new(InboundParts {
            calls: calls.clone(),
            secret: Arc::from(&secret[..]),
            credentials: Arc::clone(&credentials),
            tokens: media_tokens.clone(),
            media_base_url: format!("{ws_base}/media"),
            public_url: settings.public_url.clone(),
            node_url: public_url.clone(),
            allow_hosts: settings.webhook_allow_hosts.clone(),
        });
        sip.connect_inbound(Arc::new(inbound.clone()));
        let sip_addr = sip.local_addr();
        let state = AppState::new(AppInner {
            store,
            clock,
            limiter,
            settings: Arc::new(settings.clone()),
            secret: crate::secrets::server_secret::ServerSecret::new(secret),
            credentials,
            engine,
            ledger,
            media_tokens,
            used_tokens: Arc::default(),
            key_cache,
            agent_cache,
            welcome_cache,
            rater,
            postcall_slots,
            breakers,
            node_id,
            public_url: public_url.clone(),
            bus,
            recordings,
            node_status,
            agents,
            postcall,
            calls,
            batches,
            cluster,
            inbound,
        });
        let (ended, requeued) = state.calls.recover_after_restart().await?;
        if ended > 0 || requeued > 0 {
            tracing::info!(ended, requeued, "recovered calls from the previous run");
        }
        let lost = state.cluster.recover_dead_peers().await?;
        if lost > 0 {
            tracing::warn!(ended = lost, "recovered calls of dead peers");
        }
        state.batches.tick().await?;
        // Only this node's own leases: a peer's are held by its live jobs,
        // and a dead peer's run out by themselves.
        for jobs in LEASED_JOB_TABLES {
            let released = state.store.release_job_leases(jobs, &state.node_id).await?;
            if released > 0 {
                tracing::info!(
                    released,
                    table = jobs.table,
                    "leased jobs of the previous run re-queued"
                );
            }
        }

        // Should the start fail from here on, what it already spawned stops.
        let stop_on_failure = stop.clone().drop_guard();
        let app = crate::console::router(state.clone())
            .merge(http::router(state.clone()))
            .into_make_service_with_connect_info::<std::net::SocketAddr>();
        let shutdown = stop.clone().cancelled_owned();
        tasks.spawn(async move {
            if let Err(err) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %err, "API listener failed");
            }
        });
        let metrics = metrics_handle();
        let admin_app = Router::new().route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move { metrics.render() }
            }),
        );
        let shutdown = stop.clone().cancelled_owned();
        tasks.spawn(async move {
            if let Err(err) = axum::serve(admin_listener, admin_app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %err, "admin listener failed");
            }
        });
        spawn_every(&tasks, Duration::from_secs(1), &stop, {
            let state = state.clone();
            move || {
                let state = state.clone();
                async move {
                    if let Err(err) = state.limiter.flush().await {
                        tracing::warn!(error = %err, "usage flush failed; will retry");
                    }
                }
            }
        });
        tasks.spawn({
            let cluster = state.cluster.clone();
            let stop = stop.clone();
            async move { cluster.run_heartbeat(stop).await }
        });
        if state.bus.is_some() {
            // Nodes sharing the database: the dispatcher claims calls within
            // slots counted across nodes, orders for calls held here arrive
            // on the bus, and the reaper recovers dead peers' work.
            tasks.spawn({
                let cluster = state.cluster.clone();
                let (period, intake) = (settings.dispatch_interval, intake.clone());
                async move { cluster.run_dispatcher(period, intake).await }
            });
            tasks.spawn({
                let cluster = state.cluster.clone();
                let stop = stop.clone();
                async move { cluster.run_call_orders(stop).await }
            });
            // Held inbound callers who hung up stop holding the workspace's slots.
            spawn_every(&tasks, Duration::from_secs(1), &stop, {
                let inbound = state.inbound.clone();
                move || {
                    let inbound = inbound.clone();
                    async move {
                        if inbound.holds_callers() {
                            inbound.sweep_held().await;
                        }
                    }
                }
            });
            // Twice per heartbeat, so a dead peer's calls end soon after its lease.
            spawn_every(&tasks, settings.node.heartbeat / 2, &stop, {
                let state = state.clone();
                move || {
                    let state = state.clone();
                    async move {
                        if let Err(err) = state.cluster.recover_dead_peers().await {
                            tracing::warn!(error = %err, "reaper pass failed");
                        }
                    }
                }
            });
        } else {
            spawn_every(&tasks, settings.dispatch_interval, &intake, {
                let state = state.clone();
                move || {
                    let state = state.clone();
                    async move {
                        if let Err(err) = state.calls.dispatch_due().await {
                            tracing::warn!(error = %err, "dispatch pass failed");
                        }
                    }
                }
            });
        }
        let webhook_http = crate::egress::GuardedClient::new(settings.webhook_allow_hosts.clone());
        // Deliveries in flight at a stop finish (each within its timeout).
        leased_worker::spawn(
            &tasks,
            state.worker_node(),
            delivery_jobs(&state, webhook_http.clone()),
            settings.dispatch_interval,
            &stop,
            None,
        );
        spawn_every(&tasks, settings.dispatch_interval, &intake, {
            let state = state.clone();
            move || {
                let state = state.clone();
                async move {
                    if let Err(err) = state.batches.tick().await {
                        tracing::warn!(error = %err, "batch scheduler pass failed");
                    }
                }
            }
        });
        // Shutdown abandons ratings and analyses in flight (a drain lets
        // them finish first, within its bound): they stay pending in the
        // database and the next start re-queues them.
        leased_worker::spawn(
            &tasks,
            state.worker_node(),
            RatingJobs {
                postcall: state.postcall.clone(),
            },
            settings.dispatch_interval,
            &stop,
            Some(&abandon),
        );
        leased_worker::spawn(
            &tasks,
            state.worker_node(),
            AnalysisJobs {
                postcall: state.postcall.clone(),
            },
            settings.dispatch_interval,
            &stop,
            Some(&abandon),
        );
        spawn_every(&tasks, settings.janitor_interval, &stop, {
            let state = state.clone();
            move || {
                let state = state.clone();
                async move {
                    match janitor::run_once(
                        &state.store,
                        &state.clock,
                        &janitor::Policy::from_settings(&state.settings),
                        &state.welcome_cache,
                        &state.recordings,
                    )
                    .await
                    {
                        Ok(report) if report != janitor::JanitorReport::default() => {
                            tracing::info!(?report, "janitor pass");
                        }
                        Ok(_) => {}
                        Err(err) => tracing::warn!(error = %err, "janitor pass failed"),
                    }
                }
            }
        });
        // Per node, not a singleton: the kept files are on this node's disk.
        spawn_every(&tasks, settings.janitor_interval, &stop, {
            let recordings = state.recordings.clone();
            move || {
                let recordings = recordings.clone();
                async move {
                    match recordings.upload_unsent().await {
                        Ok(0) => {}
                        Ok(sent) => tracing::info!(sent, "kept recordings uploaded"),
                        Err(err) => {
                            tracing::warn!(error = %err, "could not retry kept recordings");
                        }
                    }
                }
            }
        });
        tracing::info!(%addr, %admin_addr, database = state.store.dialect(), "voxline serving");
        stop_on_failure.disarm();
        Ok(Self {
            addr,
            admin_addr,
            bootstrapped,
            sip_addr,
            state,
            stop,
            intake,
            abandon,
            webhook_http,
            tasks,
        })
    }

    /// The shared state, for tests and in-process tools.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Base URL of the API, e.g. `http://127.0.0.1:8080`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops at once: live calls end `service-restart` (after storing their
    /// results), listeners stop accepting, requests in flight finish, then
    /// counters persist and the store closes. What tests and the in-process
    /// load generator use; `voxline serve` drains with [`Server::drain`].
    pub async fn shutdown(self) {
        self.abandon.cancel();
        self.stop.cancel();
        self.state.engine.shutdown().await;
        self.close().await;
    }

    /// The graceful stop of `voxline serve` after SIGTERM or SIGINT.
    ///
    /// 1. No new call starts: `/healthz` says `draining`, `/readyz` answers
    ///    503, the dispatcher and batch scheduler stop, and queued calls stay
    ///    queued in the store for the next start. The API keeps answering.
    /// 2. Live calls go on for the grace period (`settings.shutdown_grace`),
    ///    or until `hurry` is cancelled (a second signal).
    /// 3. Those left are ended `service-shutdown` and billed to now; each
    ///    stores its results and recording before its end is recorded.
    /// 4. Post-call analyses and ratings in flight finish (they release held
    ///    webhooks), then the webhook outbox is flushed (what is due); both
    ///    bounded by what is left of the grace but never less than
    ///    [`FLUSH_FLOOR`], and skipped when `hurry` is cancelled.
    /// 5. Listeners and loops stop, counters persist, the store closes.
    pub async fn drain(self, hurry: CancellationToken) {
        let grace = self.state.settings.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace;
        let engine = self.state.engine.clone();
        engine.begin_drain();
        self.intake.cancel();
        tracing::info!(
            live_calls = engine.live_calls(),
            grace_seconds = grace.as_secs(),
            "draining: no new calls; live calls may finish"
        );
        tokio::select! {
            () = calls_ended(&engine) => {}
            () = tokio::time::sleep_until(deadline) => {}
            () = hurry.cancelled() => {}
        }
        let left = engine.live_calls();
        if left > 0 {
            tracing::info!(live_calls = left, "ending live calls: service-shutdown");
        }
        engine.end_live_calls(EndedReason::ServiceShutdown).await;
        // The loops stop first, so the flush is this node's only delivery
        // pass (peers' passes claim other rows). Analyses and ratings in
        // flight may finish, as they release held webhooks.
        let until = deadline.max(tokio::time::Instant::now() + FLUSH_FLOOR);
        if hurry.is_cancelled() {
            self.abandon.cancel();
        }
        self.stop.cancel();
        engine.shutdown_with(EndedReason::ServiceShutdown).await;
        self.tasks.close();
        tokio::select! {
            () = self.tasks.wait() => {}
            () = tokio::time::sleep_until(until) => self.abandon.cancel(),
            () = hurry.cancelled() => self.abandon.cancel(),
        }
        self.tasks.wait().await;
        if !hurry.is_cancelled() {
            tokio::select! {
                () = self.flush_webhooks() => {}
                () = tokio::time::sleep_until(until) => {
                    tracing::warn!("webhook flush cut short by the grace period");
                }
                () = hurry.cancelled() => {}
            }
        }
        self.close().await;
        tracing::info!("drained");
    }

    /// Delivers what is due in the webhook outbox until nothing is left due
    /// (a failed attempt is rescheduled later, so this ends).
    async fn flush_webhooks(&self) {
        let node = self.state.worker_node();
        let jobs = delivery_jobs(&self.state, self.webhook_http.clone());
        loop {
            match leased_worker::run_due(&node, &jobs).await {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "webhook flush failed");
                    break;
                }
            }
        }
    }

    /// Waits for the loops and listeners, persists counters, closes the store.
    async fn close(self) {
        self.abandon.cancel();
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        // Queued calls this node claimed but never started go back to the
        // other nodes at once, and peers need not wait out the lease.
        let store = &self.state.store;
        if store.is_shared()
            && let Err(err) = store
                .release_queued_calls_of_node(Some(&self.state.node_id))
                .await
        {
            tracing::warn!(error = %err, "could not hand back claimed queued calls");
        }
        // The loops are over, so the background leases this node holds
        // belong to no job any more: peers take those rows at once rather
        // than after the lease.
        let node = &self.state.node_id;
        for jobs in LEASED_JOB_TABLES {
            if let Err(err) = store.release_job_leases(jobs, node).await {
                tracing::warn!(table = jobs.table, error = %err, "could not hand back leased work");
            }
        }
        let now = self.state.clock.now().timestamp_millis();
        if let Err(err) = store.node_stopped(&self.state.node_id, now).await {
            tracing::warn!(error = %err, "could not record the node's stop");
        }
        if let Err(err) = self.state.limiter.shutdown().await {
            tracing::warn!(error = %err, "final usage flush failed");
        }
        self.state.store.close().await;
    }
}

/// The least time the webhook flush gets after the calls ended, even when
/// they used up the whole grace period.
pub const FLUSH_FLOOR: Duration = Duration::from_secs(5);

/// Returns once the engine holds no live call.
async fn calls_ended(engine: &CallEngine) {
    // A call's end is a store transaction; polling every 100 ms costs nothing
    // beside it and needs no hook in the engine.
    while engine.live_calls() > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `job` every `period` on `tasks` until `stop` is cancelled.
fn spawn_every<F, Fut>(tasks: &TaskTracker, period: Duration, stop: &CancellationToken, job: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let stop = stop.clone();
    tasks.spawn(async move {
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => job().await,
                _ = stop.cancelled() => break,
            }
        }
    });
}

/// SIGTERM and SIGINT, listened to once for the whole run, so that a second
/// one (which hurries the drain) is not missed between two waits.
pub struct ShutdownSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Starts listening; from here on SIGTERM and SIGINT no longer kill the
    /// process, [`ShutdownSignals::next`] reports them.
    pub fn listen() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for the next SIGTERM or SIGINT.
    pub async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Chooses rustls's crypto provider for the whole process (idempotent): with
/// both `ring` (rsipstack's SIP over TLS) and `aws-lc-rs` (the HTTP and
/// websocket clients) linked, rustls cannot pick one itself and the first TLS
/// connection would panic.
pub fn install_tls_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Starts the call engine with the sim carrier, the real carriers (which read
/// each workspace's account from its stored credentials) and `extra` ones.
#[allow(clippy::too_many_arguments)]
async fn start_engine(
    settings: &Settings,
    credentials: &Arc<StoreCredentials>,
    store: &Store,
    clock: &SharedClock,
    ledger: &Arc<StoreLedger>,
    tokens: &MediaTokens,
    ws_base: &str,
    public_url: &str,
    welcome_cache: &Arc<WelcomeCache>,
    breakers: &Breakers,
    recordings: &RecordingStore,
    extra: HashMap<String, Arc<dyn Carrier>>,
) -> anyhow::Result<(CallEngine, Arc<crate::sip::carrier::SipCarrier>)> {
    let voice =
        crate::calls::sim_callee::callee_voice(settings.sim.callee_voice, &settings.providers)
            .await?;
    let launcher: CalleeLauncher =
        Arc::new(move |start| Box::pin(crate::calls::sim_callee::run(start, voice.clone())));
    let sim = SimCarrier::new(
        SimCarrierConfig {
            answer_after: Duration::from_millis(settings.sim.answer_after_ms),
            ring_timeout: Duration::from_secs(u64::from(settings.sim.ring_seconds)),
            ..SimCarrierConfig::default()
        },
        launcher,
    );
    sim.report_transfers_to(crate::carriers::store_wiring::transfer_leg_sink(
        store.clone(),
    ));
    let credentials = Arc::clone(credentials);
    let mut carriers: HashMap<String, Arc<dyn Carrier>> =
        crate::carriers::all_carriers(Arc::clone(&credentials) as _);
    carriers.insert("sim".into(), sim);
    let sip_media = Arc::new(crate::calls::sip_media::EngineHandoff::default());
    let sip = start_sip_carrier(settings, Arc::clone(&credentials), Arc::clone(&sip_media)).await;
    sip.report_transfers_to(crate::carriers::store_wiring::transfer_leg_sink(
        store.clone(),
    ));
    let codes_store = store.clone();
    sip.record_codes_to(Arc::new(move |call_id: &str, code: u16| {
        let Ok(call_id) = call_id.parse::<crate::domain::CallId>() else {
            return;
        };
        let store = codes_store.clone();
        tokio::spawn(async move {
            if let Err(err) = store.set_carrier_code(call_id, code).await {
                tracing::warn!(call = %call_id, code, error = %err, "recording a SIP code failed");
            }
        });
    }));
    carriers.insert("sip".into(), Arc::clone(&sip) as Arc<dyn Carrier>);
    carriers.extend(extra);
    let tool_deps = ToolDeps {
        store: store.clone(),
        credentials,
        carriers: Arc::new(carriers.clone()),
        functions: Arc::new(FunctionCaller::new(settings.webhook_allow_hosts.clone())),
        http: reqwest::Client::new(),
        public_url: public_url.to_owned(),
    };
    // Reading, checking and loading the model takes a moment of blocking work; when it is
    // not installed this logs so once and calls time silence.
    let smart_turn = settings.smart_turn.clone();
    let end_of_turn =
        tokio::task::spawn_blocking(move || crate::providers::smart_turn::start(&smart_turn))
            .await
            .unwrap_or_else(|err| {
                tracing::warn!(error = %err, "loading the smart turn model failed; turn detection uses silence timing");
                None
            });
    let now_clock = clock.clone();
    let engine = CallEngine::start(EngineConfig {
        ledger: ledger.clone(),
        runner: Arc::new(
            CallRunner::new(
                store.clone(),
                settings.clone(),
                clock.clone(),
                Arc::clone(welcome_cache),
                breakers.clone(),
                tool_deps,
                recordings.clone(),
            )
            .with_end_of_turn(end_of_turn),
        ),
        carriers,
        tokens: tokens.clone(),
        media_base_url: format!("{ws_base}/media"),
        callback_base_url: format!("{public_url}/carrier"),
        media_wait: Duration::from_secs(15),
        now_ms: Arc::new(move || now_clock.now().timestamp_millis()),
    })
    .await?;
    sip_media.connect(engine.clone());
    Ok((engine, sip))
}

/// The SIP carrier: its user agent listening where the settings say, or a
/// carrier that refuses every call saying why, when SIP is off or the
/// listener cannot start (the rest of the service runs either way).
async fn start_sip_carrier(
    settings: &Settings,
    trunks: Arc<StoreCredentials>,
    media: Arc<crate::calls::sip_media::EngineHandoff>,
) -> Arc<crate::sip::carrier::SipCarrier> {
    let invites = crate::sip::inbound::InboundInvites::new();
    let hook = Arc::clone(&invites) as Arc<dyn crate::sip::user_agent::InviteHook>;
    let agent = match crate::sip::user_agent::SipUserAgent::start(&settings.sip, Some(hook)).await {
        Ok(agent) => agent,
        Err(err) => {
            tracing::warn!(error = %err, "the SIP carrier is unavailable");
            None
        }
    };
    let carrier = crate::sip::carrier::SipCarrier::new(
        agent,
        trunks,
        crate::sip::rtp_ports::RtpPorts::new(settings.sip.rtp_ports),
        media,
    );
    invites.serve(&carrier);
    carrier
}

/// Webhook deliveries sent through `http`, over the state's parts; recording
/// links in bodies point at the configured public URL, else the listen address.
fn delivery_jobs(state: &AppState, http: crate::egress::GuardedClient) -> DeliveryJobs {
    DeliveryJobs {
        store: state.store.clone(),
        clock: state.clock.clone(),
        node_id: state.node_id.clone(),
        public_base: state
            .settings
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", state.settings.listen)),
        secret: state.secret.clone(),
        http,
    }
}
