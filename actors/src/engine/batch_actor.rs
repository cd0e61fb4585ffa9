//! One actor per batch being fed: hands its org actor the batch's next call
//! when asked, and nothing more. The org actor asks only when a slot is free,
//! so a 50,000-item batch never sits in the workspace's queue; the actor
//! isolates the feed's failures from the org actor that supervises it.

use super::{BatchFeed, CallJob};
use crate::ids::BatchId;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::sync::Arc;

/// Messages of a batch actor.
pub(crate) enum BatchMsg {
    /// The next call to start, or None when the batch has nothing to dial now.
    Next(RpcReplyPort<Option<CallJob>>),
}

pub(crate) struct BatchActor;

pub(crate) struct BatchState {
    batch_id: BatchId,
    feed: Arc<dyn BatchFeed>,
}

#[ractor::async_trait]
impl Actor for BatchActor {
    type Msg = BatchMsg;
    type State = BatchState;
    type Arguments = (BatchId, Arc<dyn BatchFeed>);

    async fn pre_start(
        &self,
        _myself: ActorRef<BatchMsg>,
        (batch_id, feed): (BatchId, Arc<dyn BatchFeed>),
    ) -> Result<BatchState, ActorProcessingErr> {
        Ok(BatchState { batch_id, feed })
    }

    async fn handle(
        &self,
        _myself: ActorRef<BatchMsg>,
        msg: BatchMsg,
        state: &mut BatchState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            BatchMsg::Next(reply) => {
                let next = match state.feed.next_call(state.batch_id).await {
                    Ok(next) => next,
                    Err(err) => {
                        // The items stay pending in storage; the service feeds the batch again.
                        tracing::error!(batch = %state.batch_id, error = %err, "batch feed failed");
                        None
                    }
                };
                let _ = reply.send(next);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::carrier::{Carrier, CarrierError, CarrierStatus, DialRequest, StatusSink};
    use crate::ended_reason::EndedReason;
    use crate::engine::{
        BatchFeed, CallEnd, CallJob, CallLedger, ConversationRunner, Engine, EngineConfig,
        LedgerError, MachineVerdicts,
    };
    use crate::ids::{BatchId, CallId, OrgId};
    use crate::media_token::MediaTokens;
    use async_trait::async_trait;
    use std::collections::{HashMap, VecDeque};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;
    use uuid::Uuid;

    /// An id that spells a short test name in its bytes, so dials read as names.
    fn named(name: &str) -> Uuid {
        let mut bytes = [0u8; 16];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Uuid::from_bytes(bytes)
    }

    /// The name a [`named`] id spells.
    fn name_of(id: &str) -> String {
        let id: Uuid = id.parse().expect("a uuid");
        let bytes: Vec<u8> = id
            .as_bytes()
            .iter()
            .copied()
            .take_while(|&b| b != 0)
            .collect();
        String::from_utf8(bytes).expect("a name")
    }

    fn call(name: &str) -> CallId {
        CallId(named(name))
    }

    fn batch(name: &str) -> BatchId {
        BatchId(named(name))
    }

    fn org() -> OrgId {
        OrgId(named("org"))
    }

    /// Reports every dial and never progresses the call by itself.
    struct RecordingCarrier(mpsc::UnboundedSender<String>);

    #[async_trait]
    impl Carrier for RecordingCarrier {
        async fn place(&self, req: DialRequest, _: StatusSink) -> Result<String, CarrierError> {
            let _ = self.0.send(name_of(&req.call_id));
            Ok(format!("carrier-{}", req.call_id))
        }
        async fn hangup(&self, _: &str) -> Result<(), CarrierError> {
            Ok(())
        }
    }

    struct NullLedger;

    #[async_trait]
    impl CallLedger for NullLedger {
        async fn transition(
            &self,
            _: CallId,
            _: crate::engine::CallStatus,
            _: i64,
        ) -> Result<(), LedgerError> {
            Ok(())
        }
        async fn carrier_call_id(&self, _: CallId, _: &str) -> Result<(), LedgerError> {
            Ok(())
        }
        async fn finish(&self, _: CallEnd) -> Result<(), LedgerError> {
            Ok(())
        }
        async fn release_queued(&self, _: OrgId) -> Result<(), LedgerError> {
            Ok(())
        }
    }

    struct NoConversation;

    #[async_trait]
    impl ConversationRunner for NoConversation {
        type Media = ();

        async fn run(
            &self,
            _: CallJob,
            _: (),
            _: i64,
            _: MachineVerdicts,
            _: CancellationToken,
        ) -> EndedReason {
            EndedReason::AgentHangup
        }
    }

    /// A batch of `count` calls named `{batch}-{n}`, counting how often it was asked.
    struct ListFeed {
        jobs: Mutex<HashMap<BatchId, VecDeque<CallJob>>>,
        asked: Mutex<usize>,
    }

    #[async_trait]
    impl BatchFeed for ListFeed {
        async fn next_call(&self, batch_id: BatchId) -> Result<Option<CallJob>, LedgerError> {
            *self.asked.lock().unwrap() += 1;
            Ok(self
                .jobs
                .lock()
                .unwrap()
                .get_mut(&batch_id)
                .and_then(VecDeque::pop_front))
        }
    }

    fn job(call_id: &str, concurrency: u32) -> CallJob {
        CallJob {
            call_id: call(call_id),
            org_id: org(),
            org_concurrency: concurrency,
            to: "+919845012310".into(),
            from: "+918035740111".into(),
            provider: "fake".into(),
            bypass_slots: false,
            ring_timeout_seconds: 3_600,
            max_duration_seconds: 600,
            sim_script: None,
            sim_fault: None,
            detect_machine: false,
            inbound: None,
        }
    }

    fn feed(batches: &[(&str, usize)], concurrency: u32) -> Arc<ListFeed> {
        let jobs = batches
            .iter()
            .map(|(name, count)| {
                let list = (0..*count)
                    .map(|n| job(&format!("{name}-{n}"), concurrency))
                    .collect();
                (batch(name), list)
            })
            .collect();
        Arc::new(ListFeed {
            jobs: Mutex::new(jobs),
            asked: Mutex::new(0),
        })
    }

    async fn engine() -> (Engine<()>, mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut carriers: HashMap<String, Arc<dyn Carrier>> = HashMap::new();
        carriers.insert("fake".into(), Arc::new(RecordingCarrier(tx)));
        let engine = Engine::start(EngineConfig {
            ledger: Arc::new(NullLedger),
            runner: Arc::new(NoConversation),
            carriers,
            tokens: MediaTokens::new(b"test"),
            media_base_url: "ws://127.0.0.1:1/media".into(),
            callback_base_url: "http://127.0.0.1:1/carrier".into(),
            media_wait: Duration::from_secs(15),
            now_ms: Arc::new(|| 0),
        })
        .await
        .unwrap();
        (engine, rx)
    }

    async fn dialed(rx: &mut mpsc::UnboundedReceiver<String>) -> String {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a dial")
            .expect("carrier alive")
    }

    /// Lets the actors run until nothing more happens (time is paused).
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn batches_share_slots_round_robin_and_never_flood_the_queue() {
        let (engine, mut rx) = engine().await;
        let feed = feed(&[("a", 10), ("b", 10)], 2);
        engine
            .feed_batch(org(), batch("a"), 2, feed.clone() as Arc<dyn BatchFeed>)
            .unwrap();
        engine
            .feed_batch(org(), batch("b"), 2, feed.clone() as Arc<dyn BatchFeed>)
            .unwrap();
        // Feeding the same batch again while it is fed changes nothing.
        engine
            .feed_batch(org(), batch("a"), 2, feed.clone() as Arc<dyn BatchFeed>)
            .unwrap();
        let mut order = vec![dialed(&mut rx).await, dialed(&mut rx).await];
        settle().await;
        assert!(rx.try_recv().is_err(), "only two slots: {order:?}");
        let snapshot = engine.org_snapshot(org()).await.unwrap();
        assert_eq!(snapshot.active, 2);
        assert_eq!(
            snapshot.queued, 0,
            "batch items never wait in the org queue"
        );
        assert_eq!(*feed.asked.lock().unwrap(), 2, "pulled only for free slots");

        // Each ended call frees one slot, which goes to the other batch's turn.
        for _ in 0..6 {
            let ended = order[order.len() - 2].clone();
            engine
                .carrier_status(call(&ended), CarrierStatus::Busy)
                .unwrap();
            order.push(dialed(&mut rx).await);
        }
        let batch_of = |id: &String| id.split('-').next().unwrap().to_string();
        let batches: Vec<String> = order.iter().map(batch_of).collect();
        // `a` filled both slots before `b` was fed; from then on they alternate.
        assert_eq!(batches, ["a", "a", "b", "a", "b", "a", "b", "a"]);
        assert_eq!(
            engine.fed_batches(org()).await.unwrap(),
            [batch("b"), batch("a")],
            "b's turn is next"
        );
        engine.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_call_takes_the_next_free_slot_ahead_of_batches() {
        let (engine, mut rx) = engine().await;
        let feed = feed(&[("big", 50_000)], 2);
        engine
            .feed_batch(org(), batch("big"), 2, feed.clone() as Arc<dyn BatchFeed>)
            .unwrap();
        let first = dialed(&mut rx).await;
        let _second = dialed(&mut rx).await;
        engine.enqueue(job("test-call", 2)).unwrap();
        settle().await;
        assert!(rx.try_recv().is_err(), "the test call waits for a slot");
        assert_eq!(engine.org_snapshot(org()).await.unwrap().queued, 1);
        engine
            .carrier_status(call(&first), CarrierStatus::NoAnswer)
            .unwrap();
        assert_eq!(dialed(&mut rx).await, "test-call", "one slot turnover");
        engine.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_engine_starts_nothing_new_until_resumed() {
        let (engine, mut rx) = engine().await;
        let feed = feed(&[("a", 3)], 2);
        engine.enqueue(job("live", 2)).unwrap();
        assert_eq!(dialed(&mut rx).await, "live");
        engine.pause_new_calls();
        assert!(engine.is_paused());
        engine.enqueue(job("waiting", 2)).unwrap();
        engine
            .feed_batch(org(), batch("a"), 2, feed.clone() as Arc<dyn BatchFeed>)
            .unwrap();
        settle().await;
        assert!(rx.try_recv().is_err(), "nothing starts while paused");
        assert_eq!(*feed.asked.lock().unwrap(), 0, "no batch item pulled");
        let snapshot = engine.org_snapshot(org()).await.unwrap();
        assert_eq!(
            (snapshot.active, snapshot.queued),
            (1, 1),
            "the live call goes on"
        );
        // A slot freed while paused stays free.
        engine
            .carrier_status(call("live"), CarrierStatus::Busy)
            .unwrap();
        settle().await;
        assert!(
            rx.try_recv().is_err(),
            "a freed slot is not filled while paused"
        );
        assert_eq!(engine.live_calls(), 0);

        engine.resume_new_calls().unwrap();
        assert!(!engine.is_paused());
        // The queued call first, then the batch fills the other slot.
        assert_eq!(dialed(&mut rx).await, "waiting");
        assert_eq!(dialed(&mut rx).await, "a-0");
        settle().await;
        assert!(rx.try_recv().is_err(), "two slots");
        engine.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_drained_batch_leaves_the_rotation_and_can_be_fed_again() {
        let (engine, mut rx) = engine().await;
        let feed = feed(&[("a", 1)], 3);
        engine
            .feed_batch(org(), batch("a"), 3, feed.clone() as Arc<dyn BatchFeed>)
            .unwrap();
        assert_eq!(dialed(&mut rx).await, "a-0");
        settle().await;
        assert!(engine.fed_batches(org()).await.unwrap().is_empty());
        feed.jobs
            .lock()
            .unwrap()
            .insert(batch("a"), VecDeque::from([job("a-retry", 3)]));
        engine
            .feed_batch(org(), batch("a"), 3, feed.clone() as Arc<dyn BatchFeed>)
            .unwrap();
        assert_eq!(dialed(&mut rx).await, "a-retry");
        engine.shutdown().await;
    }
}
