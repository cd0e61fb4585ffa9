//! The node's heartbeat: every few seconds it stamps its row with its load
//! (live calls, CPU use, above its threshold or not), and reads back what
//! operators and peers decided (drain, lost).

use super::service::ClusterService;
use crate::config::NodeSettings;
use crate::domain::CallId;
use crate::store::StoreError;
use crate::store::nodes::NodeLoad;
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use voxline_actors::ids::CallId as EngineCallId;

impl ClusterService {
    /// Beats every `settings.node.heartbeat` until `stop` is cancelled.
    pub async fn run_heartbeat(&self, stop: CancellationToken) {
        let mut cpu = CpuMeter::new();
        let mut ticker = tokio::time::interval(self.node.heartbeat);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    if let Err(err) = self.beat(cpu.permille()).await {
                        tracing::warn!(error = %err, "node heartbeat failed");
                    }
                }
                () = stop.cancelled() => break,
            }
        }
    }

    /// One heartbeat with `cpu_permille` measured since the last; applies the
    /// answer to the node's status (and, on one node, to the engine).
    pub async fn beat(&self, cpu_permille: i64) -> Result<(), StoreError> {
        let live_ids = self.engine.live_call_ids();
        let live_calls = i64::try_from(live_ids.len()).unwrap_or(i64::MAX);
        let overloaded = above_threshold(&self.node, live_calls, cpu_permille);
        self.node_status.set_load(cpu_permille, overloaded);
        let now = self.clock.now().timestamp_millis();
        self.stamp_live_calls(&live_ids, now).await;
        let load = NodeLoad {
            live_calls,
            cpu_permille,
            overloaded,
        };
        let orders = self.store.node_heartbeat(&self.node_id, load, now).await?;
        self.node_status.set_draining(orders.draining);
        if !self.store.is_shared() {
            // One node: calls go straight to the engine, not through a
            // dispatcher that reads the flag, so the engine itself holds them.
            if orders.draining {
                self.engine.pause_new_calls();
            } else if let Err(err) = self.engine.resume_new_calls() {
                tracing::error!(error = %err, "could not resume calls after an undrain");
            }
        }
        self.publish_gauges(live_calls, cpu_permille, overloaded);
        if orders.lost {
            // A stall longer than the lease: a peer ended this node's calls and
            // requeued its work. Come back as a fresh node; the calls still
            // running here find their ends already recorded.
            tracing::error!(node = %self.node_id, "peers took this node for lost; registering again");
            self.store
                .register_node(&self.node_id, &self.public_url, now)
                .await?;
        }
        Ok(())
    }

    /// Stamps the last sign of life of every call live on this node, which a
    /// restart after a crash bills an answered call up to.
    ///
    /// One batched write per beat for all of the node's calls, from the one task
    /// that also proves the node alive: a per-call timer meant a write per call
    /// every beat (500 a second at 1,000 calls, all queued on SQLite's one
    /// writer) and a stamp that depended on each call's task being scheduled.
    async fn stamp_live_calls(&self, live_ids: &[EngineCallId], now_ms: i64) {
        let ids: Vec<CallId> = live_ids.iter().map(|&id| CallId::from(id)).collect();
        if ids.is_empty() {
            return;
        }
        if let Err(err) = self.store.touch_live_calls(&ids, now_ms).await {
            tracing::warn!(error = %err, calls = ids.len(), "could not stamp the live calls' last sign of life");
        }
    }
}

/// Whether a node with this load takes no new calls: at or above its most
/// live calls, or above its CPU percent of one core.
pub fn above_threshold(settings: &NodeSettings, live_calls: i64, cpu_permille: i64) -> bool {
    let calls = settings
        .max_live_calls
        .is_some_and(|max| live_calls >= i64::from(max));
    let cpu = settings
        .max_cpu_percent
        .is_some_and(|max| cpu_permille > i64::from(max) * 10);
    calls || cpu
}

impl ClusterService {
    /// The node's load on `/metrics`, labelled with the node's id (several
    /// nodes may share one process in tests).
    fn publish_gauges(&self, live_calls: i64, cpu_permille: i64, overloaded: bool) {
        let node = self.node_id.to_string();
        let draining = self.node_status.is_draining() || self.engine.is_draining();
        metrics::gauge!("voxline_node_live_calls", "node" => node.clone()).set(live_calls as f64);
        metrics::gauge!("voxline_node_cpu_permille", "node" => node.clone())
            .set(cpu_permille as f64);
        metrics::gauge!("voxline_node_draining", "node" => node.clone()).set(if draining {
            1.0
        } else {
            0.0
        });
        metrics::gauge!("voxline_node_overloaded", "node" => node).set(if overloaded {
            1.0
        } else {
            0.0
        });
    }
}

/// This process's CPU use between two readings, per mille of one core.
#[derive(Debug)]
pub struct CpuMeter {
    last: Option<(f64, Instant)>,
}

impl CpuMeter {
    /// A meter with no reading yet: its first answer is 0.
    pub fn new() -> Self {
        Self { last: None }
    }

    /// CPU use since the last call (0 on the first, and where `/proc` is
    /// not there to read: off Linux).
    pub fn permille(&mut self) -> i64 {
        let Some(cpu_seconds) = process_cpu_seconds() else {
            return 0;
        };
        let now = Instant::now();
        let used = self.last.map_or(0, |(before, at)| {
            permille_between(before, at, cpu_seconds, now)
        });
        self.last = Some((cpu_seconds, now));
        used
    }
}

impl Default for CpuMeter {
    fn default() -> Self {
        Self::new()
    }
}

/// CPU seconds between two readings over the wall time between them, per
/// mille of one core.
fn permille_between(before: f64, at: Instant, cpu_seconds: f64, now: Instant) -> i64 {
    let wall = now.duration_since(at).as_secs_f64();
    if wall <= 0.0 {
        return 0;
    }
    ((cpu_seconds - before).max(0.0) / wall * 1000.0).round() as i64
}

#[cfg(target_os = "linux")]
fn process_cpu_seconds() -> Option<f64> {
    match crate::cluster::procstat::ProcessProbe::this_process().sample() {
        Ok(usage) => Some(usage.cpu_seconds),
        Err(err) => {
            tracing::debug!(error = %err, "reading this process's CPU time failed");
            None
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn process_cpu_seconds() -> Option<f64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits(calls: Option<u32>, cpu: Option<u32>) -> NodeSettings {
        NodeSettings {
            max_live_calls: calls,
            max_cpu_percent: cpu,
            ..NodeSettings::default()
        }
    }

    #[test]
    fn no_limit_is_never_above() {
        assert!(!above_threshold(&limits(None, None), 1_000_000, 64_000));
    }

    #[test]
    fn live_calls_count_at_the_maximum() {
        let settings = limits(Some(50), None);
        assert!(!above_threshold(&settings, 49, 0));
        assert!(above_threshold(&settings, 50, 0));
        assert!(above_threshold(&settings, 51, 0));
    }

    #[test]
    fn cpu_counts_only_above_the_maximum() {
        // 80 % of one core is 800 per mille.
        let settings = limits(None, Some(80));
        assert!(!above_threshold(&settings, 0, 800));
        assert!(above_threshold(&settings, 0, 801));
        // Several cores: above 100 % is possible.
        assert!(above_threshold(&limits(None, Some(150)), 0, 1_600));
    }

    #[test]
    fn either_limit_is_enough() {
        let settings = limits(Some(10), Some(50));
        assert!(above_threshold(&settings, 10, 0));
        assert!(above_threshold(&settings, 0, 600));
        assert!(!above_threshold(&settings, 9, 500));
    }

    #[test]
    fn cpu_is_per_mille_of_the_wall_time() {
        let at = Instant::now();
        let later = at + Duration::from_secs(2);
        assert_eq!(permille_between(10.0, at, 11.0, later), 500);
        assert_eq!(permille_between(10.0, at, 14.0, later), 2_000);
        assert_eq!(permille_between(10.0, at, 9.0, later), 0, "never negative");
        assert_eq!(permille_between(10.0, at, 11.0, at), 0, "no time passed");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_meter_sees_this_process_burn_cpu() {
        let mut meter = CpuMeter::new();
        assert_eq!(
            meter.permille(),
            0,
            "the first reading has nothing to compare"
        );
        let until = Instant::now() + Duration::from_millis(300);
        let mut spin = 0u64;
        while Instant::now() < until {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        // Ticks are 10 ms: a 300 ms spin on one thread reads well above a tenth of a core.
        assert!(meter.permille() > 100);
    }
}
