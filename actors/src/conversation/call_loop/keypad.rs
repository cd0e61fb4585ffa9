//! Keys: a press debounced across its out-of-band event and in-band tone,
//! then either the keypad engine's menu (read, wait, retry, choose) or, on a
//! pipeline call, the digits kept for the extracted fields.

use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use super::CallLoop;
use super::turn::{Speech, TurnKind};
use crate::conversation::ConversationEngine;
use crate::conversation::transport::MediaTransport;
use crate::ended_reason::EndedReason;

/// A key reported twice within this window (out-of-band event and in-band tone) is one press.
const DTMF_DEBOUNCE: Duration = Duration::from_millis(600);
/// Said before the menu again after a key that is not an option.
const KEYPAD_INVALID: &str = "Sorry, that is not one of the options.";
/// Said after the opt-out key, before the call ends `opt-out`.
const KEYPAD_OPT_OUT: &str = "Understood, we will not call you again. Goodbye.";

/// Where the keypad menu is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeypadPhase {
    /// Before the menu (welcome playing).
    Idle,
    /// The menu is being read.
    Prompting,
    /// Waiting for a key until the deadline.
    Waiting { deadline: Instant },
    /// An option was chosen, or the attempts ran out.
    Done,
}

impl<T: MediaTransport> CallLoop<T> {
    pub(super) async fn on_digit(&mut self, digit: char) {
        let now = Instant::now();
        if let Some((last, at)) = self.last_digit
            && last == digit
            && now.saturating_duration_since(at) < DTMF_DEBOUNCE
        {
            return;
        }
        self.last_digit = Some((digit, now));
        debug!(call_id = %self.call_id, %digit, "caller pressed a key");
        match self.engine {
            ConversationEngine::Keypad => self.on_keypad_digit(digit).await,
            ConversationEngine::Pipeline => {
                let entry = self
                    .extracted
                    .entry("dtmf")
                    .or_insert_with(|| serde_json::Value::String(String::new()));
                if let serde_json::Value::String(digits) = entry {
                    digits.push(digit);
                }
            }
            ConversationEngine::Announcement => {}
        }
    }

    async fn on_keypad_digit(&mut self, digit: char) {
        if self.keypad == KeypadPhase::Done {
            return;
        }
        if self
            .keypad_menu
            .as_ref()
            .is_some_and(|menu| menu.opt_out_digit == Some(digit))
        {
            // The opt-out stands however the call ends from here (see `end`).
            self.interrupt(true).await;
            self.keypad = KeypadPhase::Done;
            self.opted_out = true;
            self.extracted.insert("keypad".to_owned(), "opt-out".into());
            self.extracted
                .insert("digit".to_owned(), digit.to_string().into());
            self.start_speaking(
                TurnKind::KeypadChoice,
                Speech::Text(KEYPAD_OPT_OUT.to_owned()),
                None,
            )
            .await;
            return;
        }
        let Some(option) = self
            .keypad_menu
            .as_ref()
            .and_then(|menu| menu.options.iter().find(|option| option.digit == digit))
            .cloned()
        else {
            self.interrupt(true).await;
            self.keypad_retry(true).await;
            return;
        };
        self.interrupt(true).await;
        self.keypad = KeypadPhase::Done;
        self.extracted.insert("keypad".to_owned(), option.value);
        self.extracted
            .insert("digit".to_owned(), digit.to_string().into());
        if option.say.trim().is_empty() {
            self.end(EndedReason::AgentHangup, None);
        } else {
            self.start_speaking(TurnKind::KeypadChoice, Speech::Text(option.say), None)
                .await;
        }
    }

    /// Offers the menu again after a wrong key or a timeout, or gives up.
    pub(super) async fn keypad_retry(&mut self, wrong_key: bool) {
        let attempts = self.keypad_menu.as_ref().map_or(1, |menu| menu.attempts);
        if self.prompts_played >= attempts {
            self.keypad = KeypadPhase::Done;
            self.extracted
                .insert("keypad".to_owned(), serde_json::Value::Null);
            self.end(EndedReason::AgentHangup, None);
            return;
        }
        self.keypad_prompt(wrong_key).await;
    }

    /// Reads the menu.
    pub(super) async fn keypad_prompt(&mut self, after_wrong_key: bool) {
        let Some(menu) = self.keypad_menu.as_ref() else {
            return;
        };
        let text = if after_wrong_key {
            format!("{KEYPAD_INVALID} {}", menu.prompt)
        } else {
            menu.prompt.clone()
        };
        self.prompts_played += 1;
        self.keypad = KeypadPhase::Prompting;
        self.start_speaking(TurnKind::KeypadPrompt, Speech::Text(text), None)
            .await;
    }
}
