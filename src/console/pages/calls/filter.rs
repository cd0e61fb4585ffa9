//! The call list's filters as the console's URL carries them, parsed once
//! into a [`CallFilter`] (the store's) with a message per bad field, and
//! written back into links so paging keeps them.

use crate::domain::clock::IST;
use crate::domain::inbound::CallDirection;
use crate::domain::page::PageRequest;
use crate::domain::text::Line;
use crate::domain::{AgentId, BatchId};
use crate::store::CallFilter;
use chrono::{DateTime, NaiveDate, NaiveTime, TimeZone, Utc};
use voxline_actors::engine::CallStatus;

/// Deep search looks inside transcripts of calls this recent (as the API does).
pub const DEEP_SEARCH_DAYS: i64 = 90;
/// The shortest search term deep search accepts (as the API does).
pub const DEEP_SEARCH_MIN_CHARS: usize = 3;
/// Rows on one page of the list.
pub const PAGE_ROWS: u32 = 25;

/// What the list's form holds, as typed (so a bad value is shown back).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallsForm {
    /// Raw statuses ticked.
    pub statuses: Vec<String>,
    /// Agent id.
    pub agent: String,
    /// Batch id.
    pub batch: String,
    /// First IST day, `YYYY-MM-DD`.
    pub from: String,
    /// Last IST day, `YYYY-MM-DD`, inclusive.
    pub to: String,
    /// Search text.
    pub search: String,
    /// Whether the search also looks in transcripts.
    pub deep: bool,
    /// Telephony provider.
    pub provider: String,
    /// `pass` or `fail`.
    pub success: String,
    /// `pending`, `done`, `failed` or `skipped`.
    pub analysis: String,
    /// `outbound` or `inbound`.
    pub direction: String,
    /// 1-based page, as typed.
    pub page: String,
}

/// One field's complaint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The form field's name.
    pub field: &'static str,
    /// What is wrong, for a person.
    pub message: String,
}

/// A parsed list request: the store's filter and the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallsRequest {
    /// Which calls.
    pub filter: CallFilter,
    /// Which page of them.
    pub page: PageRequest,
}

impl CallsForm {
    /// The form from a raw query string; `status` may repeat or hold a comma list.
    pub fn from_query(query: &str) -> Self {
        let mut form = Self::default();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let value = value.trim().to_string();
            match key.as_ref() {
                "status" => form.statuses.extend(
                    value
                        .split(',')
                        .map(str::trim)
                        .filter(|v| !v.is_empty())
                        .map(str::to_string),
                ),
                "agent" => form.agent = value,
                "batch" => form.batch = value,
                "from" => form.from = value,
                "to" => form.to = value,
                "q" => form.search = value,
                "deep" => form.deep = matches!(value.as_str(), "1" | "on" | "true"),
                "provider" => form.provider = value,
                "success" => form.success = value,
                "analysis" => form.analysis = value,
                "direction" => form.direction = value,
                "page" => form.page = value,
                _ => {}
            }
        }
        form.statuses.dedup();
        form
    }

    /// Whether a status box is ticked.
    pub fn has_status(&self, raw: &str) -> bool {
        self.statuses.iter().any(|s| s == raw)
    }

    /// The query string of this form at `page` (no leading `?`), for links.
    pub fn query_at(&self, page: u32) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        for status in &self.statuses {
            out.append_pair("status", status);
        }
        for (key, value) in [
            ("agent", &self.agent),
            ("batch", &self.batch),
            ("from", &self.from),
            ("to", &self.to),
            ("q", &self.search),
            ("provider", &self.provider),
            ("success", &self.success),
            ("analysis", &self.analysis),
            ("direction", &self.direction),
        ] {
            if !value.is_empty() {
                out.append_pair(key, value);
            }
        }
        if self.deep {
            out.append_pair("deep", "1");
        }
        if page > 1 {
            out.append_pair("page", &page.to_string());
        }
        out.finish()
    }

    /// The store filter and page, or every field's complaint. Days are IST,
    /// `to` inclusive; deep search reaches back [`DEEP_SEARCH_DAYS`] from `now`.
    pub fn parse(&self, now: DateTime<Utc>) -> Result<CallsRequest, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut complain = |field: &'static str, message: String| {
            errors.push(FieldError { field, message });
        };
        let mut statuses = Vec::new();
        for raw in &self.statuses {
            match CallStatus::parse(raw) {
                Some(status) => statuses.push(status.as_str().to_string()),
                None => complain("status", format!("“{raw}” is not a call status")),
            }
        }
        let agent_id = match self.agent.as_str() {
            "" => None,
            raw => match raw.parse::<AgentId>() {
                Ok(id) => Some(id.to_string()),
                Err(_) => {
                    complain("agent", "Not an agent id".into());
                    None
                }
            },
        };
        let batch_id = match self.batch.as_str() {
            "" => None,
            raw => match raw.parse::<BatchId>() {
                Ok(id) => Some(id.to_string()),
                Err(_) => {
                    complain("batch", "Not a batch id".into());
                    None
                }
            },
        };
        let day = |raw: &str| NaiveDate::parse_from_str(raw, "%Y-%m-%d").ok();
        let from = match self.from.as_str() {
            "" => None,
            raw => day(raw).or_else(|| {
                complain("from", "Use a date such as 2026-11-26".into());
                None
            }),
        };
        let to = match self.to.as_str() {
            "" => None,
            raw => day(raw).or_else(|| {
                complain("to", "Use a date such as 2026-11-26".into());
                None
            }),
        };
        if let (Some(from), Some(to)) = (from, to)
            && to < from
        {
            complain("to", "The last day is before the first".into());
        }
        let search = match self.search.as_str() {
            "" => None,
            raw => match Line::<200>::parse(raw) {
                Ok(line) => Some(line.into_string()),
                Err(err) => {
                    complain("q", format!("Search {err}"));
                    None
                }
            },
        };
        if self.deep
            && search
                .as_deref()
                .is_none_or(|s| s.chars().count() < DEEP_SEARCH_MIN_CHARS)
        {
            complain(
                "q",
                format!("Transcript search needs at least {DEEP_SEARCH_MIN_CHARS} characters"),
            );
        }
        let success = match self.success.as_str() {
            "" => None,
            "pass" => Some(true),
            "fail" => Some(false),
            _ => {
                complain("success", "Choose pass or fail".into());
                None
            }
        };
        let analysis_status = match self.analysis.as_str() {
            "" => None,
            "pending" => Some("pending"),
            "done" => Some("done"),
            "failed" => Some("failed"),
            "skipped" => Some("skipped"),
            _ => {
                complain("analysis", "Choose an analysis state".into());
                None
            }
        };
        let direction = match self.direction.as_str() {
            "" => None,
            raw => raw.parse::<CallDirection>().ok().or_else(|| {
                complain("direction", "Choose outbound or inbound".into());
                None
            }),
        };
        let provider = match self.provider.as_str() {
            "" => None,
            raw if raw.len() <= 40
                && raw.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') =>
            {
                Some(raw.to_string())
            }
            _ => {
                complain("provider", "Not a provider name".into());
                None
            }
        };
        let page = match PageRequest::parse(
            Some(self.page.as_str()).filter(|p| !p.is_empty()),
            Some(&PAGE_ROWS.to_string()),
        ) {
            Ok(page) => page,
            Err(err) => {
                complain("page", err.0);
                PageRequest {
                    page: 1,
                    limit: PAGE_ROWS,
                }
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(CallsRequest {
            filter: CallFilter {
                statuses,
                transcript_since_ms: self
                    .deep
                    .then(|| now.timestamp_millis() - DEEP_SEARCH_DAYS * 86_400_000),
                search,
                provider,
                success,
                analysis_status,
                agent_id,
                batch_id,
                direction,
                created_from_ms: from.map(ist_midnight_ms),
                created_before_ms: to.and_then(|day| day.succ_opt()).map(ist_midnight_ms),
            },
            page,
        })
    }
}

/// The first instant of an IST day, Unix ms.
pub fn ist_midnight_ms(day: NaiveDate) -> i64 {
    IST.from_local_datetime(&day.and_time(NaiveTime::MIN))
        .single()
        .map(|at| at.with_timezone(&Utc).timestamp_millis())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-11-26T06:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_full_query_parses_into_the_store_filter() {
        let agent = AgentId::new();
        let batch = BatchId::new();
        let form = CallsForm::from_query(&format!(
            "status=completed&status=no-answer,busy&agent={agent}&batch={batch}&from=2026-11-01&to=2026-11-02&q=asha&deep=1&success=pass&analysis=done&provider=sim&direction=inbound&page=3"
        ));
        let parsed = form.parse(now()).unwrap();
        assert_eq!(parsed.filter.statuses, ["completed", "no-answer", "busy"]);
        assert_eq!(parsed.filter.agent_id, Some(agent.to_string()));
        assert_eq!(parsed.filter.batch_id, Some(batch.to_string()));
        // IST midnight of Nov 1 is 18:30 UTC on Oct 31; `to` is inclusive.
        assert_eq!(
            parsed.filter.created_from_ms,
            Some(
                "2026-10-31T18:30:00Z"
                    .parse::<DateTime<Utc>>()
                    .unwrap()
                    .timestamp_millis()
            )
        );
        assert_eq!(
            parsed.filter.created_before_ms,
            Some(
                "2026-11-02T18:30:00Z"
                    .parse::<DateTime<Utc>>()
                    .unwrap()
                    .timestamp_millis()
            )
        );
        assert_eq!(parsed.filter.search.as_deref(), Some("asha"));
        assert!(parsed.filter.transcript_since_ms.is_some());
        assert_eq!(parsed.filter.success, Some(true));
        assert_eq!(parsed.filter.analysis_status, Some("done"));
        assert_eq!(parsed.filter.direction, Some(CallDirection::Inbound));
        assert_eq!(parsed.page.page, 3);
        assert_eq!(parsed.page.limit, PAGE_ROWS);
        // Links keep every filter and move only the page.
        let again = CallsForm::from_query(&form.query_at(4));
        assert_eq!(again.parse(now()).unwrap().filter, parsed.filter);
        assert_eq!(again.page, "4");
    }

    #[test]
    fn bad_fields_are_named() {
        let form = CallsForm::from_query(
            "status=ringing,nope&agent=x&batch=y&from=yesterday&to=2026-13-01&q=ab&deep=on&success=maybe&analysis=x&direction=sideways&page=0",
        );
        let errors = form.parse(now()).unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "status",
                "agent",
                "batch",
                "from",
                "to",
                "q",
                "success",
                "analysis",
                "direction",
                "page"
            ]
        );
        let reversed = CallsForm::from_query("from=2026-11-05&to=2026-11-01");
        assert_eq!(reversed.parse(now()).unwrap_err()[0].field, "to");
    }

    #[test]
    fn an_empty_query_is_every_call_page_one() {
        let parsed = CallsForm::from_query("").parse(now()).unwrap();
        assert_eq!(parsed.filter, CallFilter::default());
        assert_eq!(parsed.page.page, 1);
    }
}
