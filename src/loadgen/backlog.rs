//! `--analysis-backlog N`: before the run, N finished screening calls are seeded in the load
//! workspace (a 7-exchange transcript each and a pending analysis, for an agent whose plan
//! extracts five fields and judges success pass/fail); they are held until the step starts,
//! then released to the analysis worker at once, and the backlog is sampled every second so
//! the summary can say how fast it drained while the live calls ran.

use super::metrics::{AnalysisDrain, DrainSample};
use crate::domain::{AgentId, CallId, OrgId, Paise};
use crate::store::Store;
use crate::store::analysis_backlog::{
    BacklogCall, BacklogOwner, BacklogTurn, CALLS_PER_TRANSACTION,
};
use anyhow::Context;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::{Instant, MissedTickBehavior, interval};
use voxline_actors::providers::analysis::{AnalysisField, FieldType, question_for};

/// How long the seeded analyses are held before the step releases them (a marker far beyond
/// any run, so the worker cannot take one before).
const HOLD: Duration = Duration::from_secs(86_400);

/// How often the backlog is counted while the step runs.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The backlog agent's name.
const AGENT_NAME: &str = "Loadgen Screening (backlog)";

/// The backlog agent's caller ID.
const FROM_NUMBER: &str = "+918035740101";

/// The screening plan's fields; the seeded transcripts ask each one with the sim agent's own
/// question ([`question_for`]), so the sim analyzer reads the answers as it would in a call.
fn fields() -> Vec<AnalysisField> {
    let field = |name: &str, kind, description: &str| AnalysisField {
        name: name.to_owned(),
        kind,
        description: description.to_owned(),
        required: true,
        options: Vec::new(),
        minimum: None,
        maximum: None,
    };
    let mut notice = field(
        "noticePeriodDays",
        FieldType::Integer,
        "Your notice period in days",
    );
    notice.minimum = Some(0.0);
    notice.maximum = Some(180.0);
    let mut shift = field("preferredShift", FieldType::Enum, "Which shift you prefer");
    shift.options = vec!["morning".into(), "night".into(), "weekend".into()];
    vec![
        field("candidateName", FieldType::String, "Your full name"),
        field(
            "yearsOfExperience",
            FieldType::Integer,
            "How many years of support experience you have",
        ),
        notice,
        field(
            "willingToRelocate",
            FieldType::Boolean,
            "Whether you are willing to relocate to Bengaluru",
        ),
        shift,
    ]
}

/// The backlog agent: sim providers and the screening plan (five fields, a pass/fail rubric).
pub(super) fn agent_body() -> anyhow::Result<Value> {
    Ok(json!({
        "name": AGENT_NAME,
        "welcomeMessage": "Hello, this is Voxline calling about your application for the support engineer role. Do you have a minute?",
        "prompt": "You are a friendly recruiter screening candidates for a support engineer role. Ask the screening questions one at a time and end the call politely.",
        "maxDurationSeconds": 300,
        "analysis": {
            "summary": {"prompt": "Summarize the screening in two sentences: who was reached and how they answered."},
            "fields": serde_json::to_value(fields()).context("encoding the backlog plan")?,
            "success": {
                "rubric": "passFail",
                "prompt": "The candidate answered every screening question and is willing to relocate to Bengaluru."
            }
        }
    }))
}

const FIRST_NAMES: [&str; 12] = [
    "Asha", "Rohan", "Priya", "Vikram", "Meera", "Arjun", "Kavya", "Sanjay", "Divya", "Rahul",
    "Neha", "Karthik",
];
const LAST_NAMES: [&str; 10] = [
    "Verma", "Iyer", "Sharma", "Reddy", "Nair", "Gupta", "Menon", "Joshi", "Das", "Kulkarni",
];
const NOTICE_DAYS: [u32; 5] = [15, 30, 45, 60, 90];
const SHIFTS: [&str; 3] = ["morning", "night", "weekend"];

/// The callee's answer to each field, varied by `i`; about one call in eight leaves a
/// question unanswered or turns relocation down, so the verdicts are not all passes.
fn answers(i: u64, first: &str, last: &str) -> [String; 5] {
    let years = 1 + i % 12;
    let notice = NOTICE_DAYS[(i % 5) as usize];
    let shift = SHIFTS[(i / 5 % 3) as usize];
    let name = match i % 3 {
        0 => format!("My name is {first} {last}."),
        1 => format!("It's {first} {last}."),
        _ => format!("{first} {last}, speaking."),
    };
    let experience = match i % 4 {
        0 => format!("About {years} years, mostly in customer support."),
        1 => format!("{years} years so far."),
        2 => format!("I have {years} years of experience."),
        _ => format!("Roughly {years} years, including my internship."),
    };
    let notice = if i % 17 == 5 {
        "I would rather not say right now.".to_owned()
    } else if i.is_multiple_of(2) {
        format!("It is {notice} days.")
    } else {
        format!("{notice} days, and I can start right after that.")
    };
    let relocate = match i % 8 {
        3 => "No, I need to stay in Pune for family reasons.".to_owned(),
        6 => "Yes, that works for me.".to_owned(),
        _ => "Yes, I can relocate.".to_owned(),
    };
    let shift = if i % 11 == 7 {
        "I am not sure yet, I will let you know.".to_owned()
    } else {
        format!("The {shift} shift, please.")
    };
    [name, experience, notice, relocate, shift]
}

/// The `i`-th of `n` seeded calls, `now_ms` being the time of seeding: calls placed four
/// seconds apart over the hours before, each a greeting, five questions, and a goodbye.
fn call(i: u64, n: u64, now_ms: i64, questions: &[String]) -> BacklogCall {
    let first = FIRST_NAMES[(i % 12) as usize];
    let last = LAST_NAMES[(i / 12 % 10) as usize];
    let back = i64::try_from(n - i).unwrap_or(i64::MAX / 8_000);
    let queued_at = now_ms - 600_000 - back * 4_000;
    let ringing_at = queued_at + 700;
    let answered_at = ringing_at + 2_000 + (i % 5) as i64 * 900;
    let mut lines: Vec<(&'static str, String)> = vec![
        (
            "assistant",
            format!(
                "Hello {first}, this is Voxline calling about your application for the support engineer role. Do you have a minute?"
            ),
        ),
        ("user", "Yes, I have a minute.".to_owned()),
    ];
    for (question, answer) in questions.iter().zip(answers(i, first, last)) {
        lines.push(("assistant", question.clone()));
        lines.push(("user", answer));
    }
    lines.push((
        "assistant",
        format!("Thank you, {first}. Our team will get back to you within two days. Goodbye!"),
    ));
    lines.push(("user", "Thank you, goodbye!".to_owned()));
    let mut at_ms = answered_at;
    let turns: Vec<BacklogTurn> = lines
        .into_iter()
        .enumerate()
        .map(|(k, (speaker, text))| {
            at_ms += 3_500 + ((i + k as u64) % 4) as i64 * 1_200;
            BacklogTurn {
                speaker,
                text,
                at_ms,
            }
        })
        .collect();
    let ended_at = at_ms + 1_200;
    let transcript_text = turns
        .iter()
        .map(|t| {
            let who = if t.speaker == "user" {
                "Candidate"
            } else {
                "Bot"
            };
            format!("{who}: {}", t.text)
        })
        .collect::<Vec<_>>()
        .join("\n");
    let user_turns = turns.iter().filter(|t| t.speaker == "user").count();
    let summary = format!(
        "{} agent and {user_turns} caller turn(s); ended by agent-hangup. Last thing the caller said: \"Thank you, goodbye!\".",
        turns.len() - user_turns
    );
    BacklogCall {
        id: call_id_at(queued_at),
        phone: format!("+9197{:08}", 10_000_000 + i % 89_999_999),
        target_name: format!("{first} {last}"),
        queued_at,
        ringing_at,
        answered_at,
        ended_at,
        ended_reason: "agent-hangup",
        summary,
        transcript_text,
        turns,
    }
}

/// A time-ordered id for a call created at `at_ms`, as the server would have given it then.
fn call_id_at(at_ms: i64) -> CallId {
    let at = u64::try_from(at_ms).unwrap_or(0);
    CallId(uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        at / 1_000,
        u32::try_from(at % 1_000).unwrap_or(0) * 1_000_000,
    )))
}

/// A seeded backlog, held until [`Backlog::release`].
pub(super) struct Backlog {
    /// The connection the backlog is released and counted over.
    store: Store,
    org_id: OrgId,
    agent_id: AgentId,
    size: u64,
    held_until: i64,
    /// Never released: the control run.
    held: bool,
}

impl Backlog {
    /// Seeds `size` ended calls of `agent_id` with pending analyses through `store`, held
    /// until the step starts (for the whole run when `held`); `counter` releases and counts
    /// them.
    pub(super) async fn seed(
        store: &Store,
        counter: Store,
        org_id: OrgId,
        agent_id: AgentId,
        size: u64,
        held: bool,
    ) -> anyhow::Result<Self> {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let held_until = now_ms + i64::try_from(HOLD.as_millis()).unwrap_or(i64::MAX / 2);
        let owner = BacklogOwner {
            org_id,
            agent_id,
            agent_name: AGENT_NAME,
            from_number: FROM_NUMBER,
            provider: "sim",
            rate_paise: Paise(0),
            analysis_wait_ms: i64::from(crate::domain::analysis::DEFAULT_TIMEOUT_SECONDS) * 1_000,
            held_until,
        };
        let questions: Vec<String> = fields().iter().map(question_for).collect();
        let step = CALLS_PER_TRANSACTION as u64;
        let mut from = 0;
        while from < size {
            let calls: Vec<BacklogCall> = (from..(from + step).min(size))
                .map(|i| call(i, size, now_ms, &questions))
                .collect();
            store
                .seed_analysis_backlog(&owner, &calls)
                .await
                .context("seeding the analysis backlog")?;
            from += step;
        }
        Ok(Self {
            store: counter,
            org_id,
            agent_id,
            size,
            held_until,
            held,
        })
    }

    /// Hands the backlog to the analysis worker (unless held) and counts it every second
    /// until `stop` is notified or it is drained, keeping the latest count in `pending`. The
    /// samples are timed from the release.
    pub(super) async fn drain(
        self: Arc<Self>,
        stop: Arc<Notify>,
        pending: Arc<AtomicU64>,
    ) -> (Instant, Vec<DrainSample>) {
        let released = Instant::now();
        if !self.held
            && let Err(error) = self
                .store
                .release_analysis_backlog(self.org_id, self.agent_id, self.held_until)
                .await
        {
            tracing::warn!(%error, "releasing the analysis backlog failed");
        }
        let mut samples = Vec::new();
        let mut tick = interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                // The step ended: its last count is taken by [`Backlog::summary`].
                () = stop.notified() => break,
            }
            match self
                .store
                .agent_analysis_progress(self.org_id, self.agent_id)
                .await
            {
                Ok(progress) => {
                    let left = u64::try_from(progress.pending).unwrap_or(0);
                    pending.store(left, Ordering::Relaxed);
                    samples.push(DrainSample {
                        at_seconds: released.elapsed().as_secs_f64(),
                        pending: left,
                    });
                    if left == 0 {
                        break;
                    }
                }
                Err(error) => tracing::warn!(%error, "counting the analysis backlog failed"),
            }
        }
        (released, samples)
    }

    /// Closes the counting connection.
    pub(super) async fn close(&self) {
        self.store.close().await;
    }

    /// The drain over the step: the samples and a last count taken now.
    pub(super) async fn summary(
        &self,
        released: Instant,
        samples: &[DrainSample],
    ) -> AnalysisDrain {
        let at_seconds = released.elapsed().as_secs_f64();
        let last = match self
            .store
            .agent_analysis_progress(self.org_id, self.agent_id)
            .await
        {
            Ok(progress) => Some(progress),
            Err(error) => {
                tracing::warn!(%error, "counting the analysis backlog failed");
                None
            }
        };
        let (pending, failed) = match last {
            Some(p) => (
                u64::try_from(p.pending).unwrap_or(0),
                u64::try_from(p.failed).unwrap_or(0),
            ),
            None => (samples.last().map_or(self.size, |s| s.pending), 0),
        };
        let mut all = samples.to_vec();
        all.push(DrainSample {
            at_seconds,
            pending,
        });
        AnalysisDrain {
            held: self.held,
            ..AnalysisDrain::new(self.size, &all, failed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voxline_actors::providers::analysis::{AnalysisRequest, Rubric, SuccessPlan};
    use voxline_actors::providers::scorecard::{CALLEE, ScorecardTurn};
    use voxline_actors::sim::analyst::sim_analysis;

    fn analyzed(i: u64) -> voxline_actors::providers::analysis::AnalysisReply {
        let questions: Vec<String> = fields().iter().map(question_for).collect();
        let call = call(i, 100, 1_800_000_000_000, &questions);
        sim_analysis(&AnalysisRequest {
            summary_prompt: Some("Summarize.".into()),
            fields: fields(),
            schema: None,
            success: Some(SuccessPlan {
                rubric: Rubric::PassFail,
                prompt: "Answered everything.".into(),
                criteria: Vec::new(),
            }),
            transcript: call
                .turns
                .iter()
                .map(|t| ScorecardTurn {
                    speaker: if t.speaker == "user" { CALLEE } else { "agent" }.into(),
                    text: t.text.clone(),
                })
                .collect(),
            ended_reason: call.ended_reason.into(),
        })
    }

    #[test]
    fn the_sim_analyzer_reads_the_seeded_answers() {
        // i = 0: Asha Verma, 1 year, 15 days, relocates, morning shift.
        let reply = analyzed(0);
        let data = &reply.structured_data;
        assert_eq!(data["yearsOfExperience"], json!(1), "{data:?}");
        assert_eq!(data["noticePeriodDays"], json!(15), "{data:?}");
        assert_eq!(data["willingToRelocate"], json!(true), "{data:?}");
        assert_eq!(data["preferredShift"], json!("morning"), "{data:?}");
        assert!(
            data["candidateName"]
                .as_str()
                .is_some_and(|n| n.contains("Asha")),
            "{data:?}"
        );
        assert_eq!(reply.success.unwrap()["value"], json!(true));
        // i = 3 turns relocation down.
        assert_eq!(
            analyzed(3).structured_data["willingToRelocate"],
            json!(false)
        );
    }

    #[test]
    fn seeded_calls_have_seven_exchanges_in_time_order() {
        let questions: Vec<String> = fields().iter().map(question_for).collect();
        let now = 1_800_000_000_000;
        let calls: Vec<BacklogCall> = (0..50).map(|i| call(i, 50, now, &questions)).collect();
        for c in &calls {
            assert_eq!(c.turns.len(), 14);
            assert!(c.queued_at < c.ringing_at && c.ringing_at < c.answered_at);
            assert!(c.turns.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
            assert!(c.ended_at > c.turns[13].at_ms && c.ended_at < now);
            assert!(
                crate::domain::PhoneNumber::parse(&c.phone).is_ok(),
                "{}",
                c.phone
            );
        }
        let ids: std::collections::HashSet<_> = calls.iter().map(|c| c.id).collect();
        assert_eq!(ids.len(), calls.len());
    }

    #[test]
    fn the_plan_is_accepted_by_the_agent_api() {
        let body = agent_body().unwrap();
        let plan: crate::domain::analysis::AnalysisPlan =
            serde_json::from_value(body["analysis"].clone()).unwrap();
        assert_eq!(plan.fields.len(), 5);
        assert!(plan.success.is_some());
    }
}
