//! The sim analyst's tests: what it reads from transcripts, and that its answers fit the
//! contract's schema (the request helpers are the contract's, `providers::analysis::tests`).

use super::choices::*;
use super::dates::*;
use super::free_text::*;
use super::numbers::*;
use super::words::*;
use super::*;
use crate::providers::analysis::tests::{field, screening, turns};
use crate::providers::analysis::*;
use crate::providers::scorecard::ScorecardTurn;

#[test]
fn the_sim_analyzer_reads_each_value_the_callee_said() {
    let reply = sim_analysis(&screening());
    let data = &reply.structured_data;
    assert_eq!(data["yearsOfExperience"], json!(5));
    assert_eq!(data["willingToRelocate"], json!(true));
    assert_eq!(data["preferredShift"], json!("night"));
    assert_eq!(data["startDate"], json!("2027-03-03"));
    assert_eq!(data["notes"], json!("I prefer remote work on Fridays"));
    assert!(data["expectedSalary"].as_f64().is_some(), "{data:?}");
    assert_eq!(
        reply.success.as_ref().map(|s| &s["value"]),
        Some(&json!(true))
    );
    let summary = reply.summary.unwrap_or_default();
    assert!(summary.contains("years of experience 5"), "{summary}");
    assert!(summary.contains("preferred shift \"night\""), "{summary}");
    assert!(summary.contains("agent-hangup"), "{summary}");
    // Deterministic.
    assert_eq!(sim_analysis(&screening()), sim_analysis(&screening()));
}

#[test]
fn unanswered_fields_are_null_and_fail_the_call() {
    let mut request = screening();
    request.transcript = turns(&[
        ("agent", "Hello Asha, do you have a minute?"),
        ("callee", "No, I am busy."),
        ("agent", "Goodbye!"),
    ]);
    request.ended_reason = "caller-hangup".into();
    let reply = sim_analysis(&request);
    assert_eq!(reply.structured_data["yearsOfExperience"], Value::Null);
    assert_eq!(reply.structured_data["startDate"], Value::Null);
    let success = reply.success.unwrap_or_default();
    assert_eq!(success["value"], json!(false));
    assert!(
        success["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("yearsOfExperience")
    );
}

#[test]
fn every_rubric_gives_a_value_its_schema_allows() {
    for rubric in [
        Rubric::PassFail,
        Rubric::NumericScale,
        Rubric::DescriptiveScale,
        Rubric::Percentage,
        Rubric::Checklist,
    ] {
        let mut request = screening();
        request.success = Some(SuccessPlan {
            rubric,
            prompt: String::new(),
            criteria: vec![
                Criterion {
                    name: "Relocation".into(),
                    description: "Asked about relocating".into(),
                },
                Criterion {
                    name: "Visa".into(),
                    description: "Asked about visa sponsorship".into(),
                },
            ],
        });
        let verdict = sim_analysis(&request).success.unwrap_or_default();
        let value = &verdict["value"];
        match rubric {
            Rubric::PassFail => assert_eq!(value, &json!(true)),
            Rubric::NumericScale => assert_eq!(value, &json!(10)),
            Rubric::DescriptiveScale => assert_eq!(value, &json!("excellent")),
            Rubric::Percentage => assert_eq!(value, &json!(100.0)),
            Rubric::Checklist => assert_eq!(
                value,
                &json!([{"name": "Relocation", "pass": true}, {"name": "Visa", "pass": false}])
            ),
        }
        assert_eq!(
            verdict_passes(rubric, value),
            Some(rubric != Rubric::Checklist)
        );
    }
}

#[test]
fn a_users_schema_names_the_fields() {
    let mut request = screening();
    request.schema = Some(json!({
        "type": "object",
        "required": ["age"],
        "properties": {
            "age": {"type": "integer", "description": "The candidate's age"},
            "city": {"type": "string", "enum": ["Pune", "Delhi"]},
        },
    }));
    request.transcript = turns(&[
        ("agent", "What is your age?"),
        ("callee", "I am thirty two."),
        ("agent", "Which city, Pune or Delhi?"),
        ("callee", "Delhi."),
    ]);
    let reply = sim_analysis(&request);
    assert_eq!(reply.structured_data["age"], json!(32));
    assert_eq!(reply.structured_data["city"], json!("Delhi"));
    assert_eq!(
        request.answer_schema()["properties"]["structuredData"],
        request.schema.clone().unwrap_or_default()
    );
}

fn first_number(text: &str) -> Option<f64> {
    numbers_in(&words(&text.replace(',', "")))
        .first()
        .map(|(_, n)| *n)
}

const TODAY: Ymd = Ymd {
    year: 2026,
    month: 6,
    day: 10,
};

#[test]
fn numbers_dates_and_questions_read_like_people_say_them() {
    assert_eq!(first_number("twenty five years"), Some(25.0));
    assert_eq!(first_number("about 45k"), Some(45_000.0));
    assert_eq!(first_number("3 lakh"), Some(300_000.0));
    assert_eq!(first_number("two thousand and five hundred"), Some(2_500.0));
    assert_eq!(first_number("Around 1,20,000 rupees"), Some(120_000.0));
    assert_eq!(first_number("the 5th, then 7"), Some(7.0));
    assert_eq!(first_number("none at all, nan"), None);
    assert_eq!(
        first_date("March 5th, 2027 works", TODAY),
        Some("2027-03-05".into())
    );
    assert_eq!(
        first_date("from 2027-11-30", TODAY),
        Some("2027-11-30".into())
    );
    assert_eq!(
        first_date("I can join on 15 March 2027.", TODAY),
        Some("2027-03-15".into())
    );
    assert_eq!(
        first_date("the 15th of March, 2027", TODAY),
        Some("2027-03-15".into())
    );
    assert_eq!(
        first_date("on 15/03/2027", TODAY),
        Some("2027-03-15".into())
    );
    assert_eq!(first_date("on 03/04/2027", TODAY), None);
    assert_eq!(
        first_date("Sept the twenty-first 2027", TODAY),
        Some("2027-09-21".into())
    );
    assert_eq!(first_date("the 31st of February 2027", TODAY), None);
    // Without a year: the next such day on or after today.
    assert_eq!(first_date("March 15", TODAY), Some("2027-03-15".into()));
    assert_eq!(
        first_date("from the 10th of June", TODAY),
        Some("2026-06-10".into())
    );
    assert_eq!(first_date("July 1st", TODAY), Some("2026-07-01".into()));
    assert_eq!(first_date("29 February", TODAY), Some("2028-02-29".into()));
    assert_eq!(first_date("I may join in March", TODAY), None);
    assert_eq!(
        civil_from_days(0),
        Ymd {
            year: 1970,
            month: 1,
            day: 1
        }
    );
    assert_eq!(
        civil_from_days(20_527),
        Ymd {
            year: 2026,
            month: 3,
            day: 15
        }
    );
    assert_eq!(
        civil_from_days(11_016),
        Ymd {
            year: 2000,
            month: 2,
            day: 29
        }
    );
    assert_eq!(yes_no("Nope, sorry"), Some(false));
    assert_eq!(yes_no("Yes, I can relocate."), Some(true));
    assert_eq!(yes_no("I can relocate."), Some(true));
    assert_eq!(yes_no("No problem at all."), Some(true));
    assert_eq!(yes_no("I can't, my family is here."), Some(false));
    assert_eq!(yes_no("I'd rather not."), Some(false));
    assert_eq!(yes_no("I'm not sure yet."), None);
    assert_eq!(yes_no("Let me think about it."), None);
    let shifts: Vec<String> = ["morning", "evening", "night"].map(String::from).into();
    assert_eq!(
        named_option(&shifts, "Evening works best."),
        Some("evening".into())
    );
    assert_eq!(
        named_option(&shifts, "Not mornings, evenings."),
        Some("evening".into())
    );
    assert_eq!(
        named_option(&shifts, "Night, not the morning one."),
        Some("night".into())
    );
    assert_eq!(named_option(&shifts, "Any is fine."), None);
    let kinds: Vec<String> = ["Full-time", "Part-time"].map(String::from).into();
    assert_eq!(
        named_option(&kinds, "part time, please"),
        Some("Part-time".into())
    );
    let name = field_topic(&field("candidateName", FieldType::String, "Your full name"));
    assert_eq!(
        string_value("My name is Asha Rao.", &name, false),
        Some("Asha Rao".into())
    );
    assert_eq!(
        string_value("Sure, it's Asha Rao, thanks!", &name, false),
        Some("Asha Rao".into())
    );
    assert_eq!(string_value("I'm Asha.", &name, false), Some("Asha".into()));
    assert_eq!(string_value("Yes.", &name, false), None);
    assert_eq!(string_value("I'd rather not say.", &name, false), None);
    assert_eq!(string_value("Asha Rao", &name, true), None);
    assert_eq!(
        string_value("Well, my full name is Asha Rao", &name, true),
        Some("Asha Rao".into())
    );
    assert_eq!(
        string_value(
            "My name is Dr. Asha Rao. I applied last week.",
            &name,
            false
        ),
        Some("Dr. Asha Rao".into())
    );
    assert_eq!(
        string_value("My name's Asha; Rao is my surname", &name, false),
        Some("Asha".into())
    );
    let notes = field_topic(&field("notes", FieldType::String, "Anything else"));
    assert_eq!(
        string_value(
            "I prefer remote work, and Fridays off. Thanks.",
            &notes,
            false
        ),
        Some("I prefer remote work, and Fridays off".into())
    );
    let f = field(
        "willingToRelocate",
        FieldType::Boolean,
        "Whether willing to relocate",
    );
    assert_eq!(
        question_for(&f),
        "Could you tell me whether willing to relocate?"
    );
    let f = field("noticePeriodDays", FieldType::Integer, "");
    assert_eq!(question_for(&f), "Could you tell me notice period days?");
}

/// Checks `value` against `schema` for the JSON Schema keywords the answer schemas use
/// (`type`, `enum`, `pattern` for dates, `minimum`, `maximum`, `required`, `properties`,
/// `additionalProperties: false`, `items`), as a strict validator would.
fn check(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let fail = |why: &str| Err(format!("{path}: {why} ({value})"));
    if let Some(kind) = schema.get("type") {
        let kinds: Vec<&str> = match kind {
            Value::String(k) => vec![k.as_str()],
            Value::Array(ks) => ks.iter().filter_map(Value::as_str).collect(),
            _ => return fail("unreadable type"),
        };
        let is = |k: &str| match k {
            "null" => value.is_null(),
            "boolean" => value.is_boolean(),
            "string" => value.is_string(),
            "number" => value.is_number(),
            "integer" => value.is_i64() || value.is_u64(),
            "object" => value.is_object(),
            "array" => value.is_array(),
            _ => false,
        };
        if !kinds.iter().any(|k| is(k)) {
            return fail(&format!("not of type {kinds:?}"));
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        return fail("not one of the enum");
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && let Some(text) = value.as_str()
    {
        assert_eq!(
            pattern, r"^\d{4}-\d{2}-\d{2}$",
            "only the date pattern is checked"
        );
        let shape: String = text
            .chars()
            .map(|c| if c.is_ascii_digit() { 'd' } else { c })
            .collect();
        if shape != "dddd-dd-dd" {
            return fail("does not match the date pattern");
        }
    }
    if let Some(n) = value.as_f64() {
        if schema
            .get("minimum")
            .and_then(Value::as_f64)
            .is_some_and(|min| n < min)
        {
            return fail("below the minimum");
        }
        if schema
            .get("maximum")
            .and_then(Value::as_f64)
            .is_some_and(|max| n > max)
        {
            return fail("above the maximum");
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for key in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !object.contains_key(key) {
                return fail(&format!("missing {key}"));
            }
        }
        for (key, item) in object {
            match properties.and_then(|p| p.get(key)) {
                Some(sub) => check(sub, item, &format!("{path}.{key}"))?,
                None if schema.get("additionalProperties") == Some(&json!(false)) => {
                    return fail(&format!("unexpected {key}"));
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (at, item) in array.iter().enumerate() {
            check(items, item, &format!("{path}[{at}]"))?;
        }
    }
    Ok(())
}

fn assert_valid(request: &AnalysisRequest, reply: &AnalysisReply) {
    let value = serde_json::to_value(reply).unwrap();
    if let Err(error) = check(&request.answer_schema(), &value, "$") {
        panic!("{error}\nschema: {}", request.answer_schema());
    }
}

#[test]
fn the_schema_check_catches_wrong_answers() {
    let request = screening();
    let schema = request.answer_schema();
    let mut good = serde_json::to_value(sim_analysis(&request)).unwrap();
    assert_eq!(check(&schema, &good, "$"), Ok(()));
    for (pointer, wrong) in [
        ("/structuredData/yearsOfExperience", json!(2.5)),
        ("/structuredData/preferredShift", json!("evening")),
        ("/structuredData/startDate", json!("3 March 2027")),
        ("/success/value", json!("yes")),
    ] {
        let mut bad = good.clone();
        *bad.pointer_mut(pointer).unwrap() = wrong;
        assert!(check(&schema, &bad, "$").is_err(), "{pointer}");
    }
    good["structuredData"]["extra"] = json!(1);
    assert!(check(&schema, &good, "$").is_err());
}

/// One field of each type, the questions the sim agent asks for them, and a rubric.
fn interview(rubric: Rubric) -> AnalysisRequest {
    let mut notice = field(
        "noticePeriodDays",
        FieldType::Number,
        "Your notice period in days",
    );
    notice.minimum = Some(0.0);
    notice.maximum = Some(180.0);
    let mut years = field(
        "yearsOfExperience",
        FieldType::Integer,
        "Years of experience",
    );
    years.minimum = Some(0.0);
    years.maximum = Some(50.0);
    years.required = false;
    let mut shift = field("preferredShift", FieldType::Enum, "Preferred shift");
    shift.options = vec!["morning".into(), "evening".into(), "night".into()];
    AnalysisRequest {
        summary_prompt: Some("Summarize the call.".into()),
        fields: vec![
            field("candidateName", FieldType::String, "Your full name"),
            notice,
            years,
            field(
                "willingToRelocate",
                FieldType::Boolean,
                "Whether you can relocate to Pune",
            ),
            shift,
            field("joiningDate", FieldType::Date, "The date you can join"),
        ],
        schema: None,
        success: Some(SuccessPlan {
            rubric,
            prompt: "The candidate answered the screening.".into(),
            criteria: vec![
                Criterion {
                    name: "Relocation".into(),
                    description: "Asked whether they can relocate".into(),
                },
                Criterion {
                    name: "Joining date".into(),
                    description: "Confirmed when they can join".into(),
                },
            ],
        }),
        transcript: Vec::new(),
        ended_reason: "agent-hangup".into(),
    }
}

/// The transcript of a sim call: the welcome, then each scripted line followed by the
/// sim LLM's reply (asking the plan's questions), until it hangs up.
fn sim_call(request: &AnalysisRequest, script: &[&str]) -> (Vec<ScorecardTurn>, bool) {
    use crate::providers::{ChatMessage, ChatRole, LlmRequest};
    use crate::sim::providers::SimLlm;
    let welcome = "Hello, this is Meera from Acme Hiring. Do you have a minute?";
    let mut llm = LlmRequest {
        history: vec![ChatMessage::new(ChatRole::Assistant, welcome)],
        sim_script: script.iter().map(|s| (*s).to_owned()).collect(),
        sim_questions: request
            .effective_fields()
            .iter()
            .map(question_for)
            .collect(),
        ..LlmRequest::default()
    };
    let mut transcript = turns(&[("agent", welcome)]);
    for line in script {
        llm.history.push(ChatMessage::new(ChatRole::User, *line));
        transcript.extend(turns(&[("callee", line)]));
        let (reply, end) = SimLlm::reply_for(&llm);
        llm.history
            .push(ChatMessage::new(ChatRole::Assistant, reply.clone()));
        transcript.extend(turns(&[("agent", &reply)]));
        if end {
            return (transcript, true);
        }
    }
    (transcript, false)
}

const ANSWERS: [&str; 7] = [
    "Yes, I have a minute.",
    "My name is Asha Rao.",
    "About 30 days.",
    "5 years.",
    "Yes, I can relocate.",
    "Evening works best.",
    "I can join on 15 March 2027.",
];

#[test]
fn a_sim_call_asks_every_question_and_the_analyzer_reads_every_answer() {
    for rubric in [
        Rubric::PassFail,
        Rubric::NumericScale,
        Rubric::DescriptiveScale,
        Rubric::Percentage,
        Rubric::Checklist,
    ] {
        let mut request = interview(rubric);
        let (transcript, hung_up) = sim_call(&request, &ANSWERS);
        assert!(hung_up);
        let agent: Vec<&str> = transcript
            .iter()
            .filter(|t| t.speaker != CALLEE)
            .map(|t| t.text.as_str())
            .collect();
        assert_eq!(
            agent[1..],
            [
                "Thank you. Could you tell me your full name?",
                "Got it, thanks. Could you tell me your notice period in days?",
                "Understood. Could you tell me years of experience?",
                "Okay, noted. Could you tell me whether you can relocate to Pune?",
                "Thank you. Could you tell me preferred shift: morning, evening, night?",
                "Got it, thanks. Could you tell me the date you can join?",
                "Thank you, that is everything I needed. Have a great day. Goodbye!",
            ]
        );
        request.transcript = transcript;
        let reply = analyze(&request, TODAY);
        assert_eq!(
            Value::Object(reply.structured_data.clone()),
            json!({
                "candidateName": "Asha Rao",
                "noticePeriodDays": 30,
                "yearsOfExperience": 5,
                "willingToRelocate": true,
                "preferredShift": "evening",
                "joiningDate": "2027-03-15",
            })
        );
        let verdict = reply.success.clone().unwrap_or_default();
        let expected = match rubric {
            Rubric::PassFail => json!(true),
            Rubric::NumericScale => json!(10),
            Rubric::DescriptiveScale => json!("excellent"),
            Rubric::Percentage => json!(100.0),
            Rubric::Checklist => json!([
                {"name": "Relocation", "pass": true},
                {"name": "Joining date", "pass": true},
            ]),
        };
        assert_eq!(verdict["value"], expected, "{rubric:?}");
        assert_eq!(verdict_passes(rubric, &verdict["value"]), Some(true));
        assert_eq!(
            verdict["reason"],
            json!(match rubric {
                Rubric::Checklist =>
                    "The call yielded every field (6 of 6); 2 of 2 criteria met; it ended by agent-hangup.",
                _ => "The call yielded every field (6 of 6); it ended by agent-hangup.",
            })
        );
        assert_eq!(
            reply.summary.as_deref(),
            Some(
                "The agent asked about candidate name, notice period days, years of \
                 experience, willing to relocate, preferred shift, joining date. The callee \
                 gave candidate name \"Asha Rao\", notice period days 30, years of \
                 experience 5, willing to relocate yes, preferred shift \"evening\", joining \
                 date \"2027-03-15\". The call ended by agent-hangup (the agent closed the \
                 call)."
            )
        );
        assert_valid(&request, &reply);
        // The sim LLM answers the same through its JSON mode.
        assert_eq!(
            serde_json::from_str::<AnalysisReply>(&crate::sim::providers::SimLlm::json_reply_for(
                &crate::providers::LlmRequest {
                    history: vec![crate::providers::ChatMessage::new(
                        crate::providers::ChatRole::User,
                        serde_json::to_string(&request).unwrap(),
                    )],
                    ..crate::providers::LlmRequest::default()
                }
            ))
            .unwrap()
            .structured_data,
            reply.structured_data
        );
    }
}

#[test]
fn a_sim_call_cut_short_leaves_the_rest_null_and_fails() {
    for rubric in [
        Rubric::PassFail,
        Rubric::NumericScale,
        Rubric::DescriptiveScale,
        Rubric::Percentage,
        Rubric::Checklist,
    ] {
        let mut request = interview(rubric);
        let (transcript, hung_up) = sim_call(
            &request,
            &[
                "Yes, I have a minute.",
                "My name is Asha Rao.",
                "About 30 days.",
                "Sorry, I have to go. Bye.",
            ],
        );
        assert!(hung_up);
        request.transcript = transcript;
        request.ended_reason = "agent-hangup".into();
        let reply = analyze(&request, TODAY);
        assert_eq!(
            Value::Object(reply.structured_data.clone()),
            json!({
                "candidateName": "Asha Rao",
                "noticePeriodDays": 30,
                "yearsOfExperience": null,
                "willingToRelocate": null,
                "preferredShift": null,
                "joiningDate": null,
            })
        );
        let verdict = reply.success.clone().unwrap_or_default();
        let expected = match rubric {
            Rubric::PassFail => json!(false),
            // 6 of 16 weighted points is 38 %, held under 45 % anyway.
            Rubric::NumericScale => json!(3),
            Rubric::DescriptiveScale => json!("fair"),
            Rubric::Percentage => json!(38.0),
            Rubric::Checklist => json!([
                {"name": "Relocation", "pass": false},
                {"name": "Joining date", "pass": false},
            ]),
        };
        assert_eq!(verdict["value"], expected, "{rubric:?}");
        assert_eq!(verdict_passes(rubric, &verdict["value"]), Some(false));
        let reason = verdict["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(
                "yielded 2 of 6 fields; missing required willingToRelocate, preferredShift, \
                 joiningDate; missing yearsOfExperience"
            ),
            "{reason}"
        );
        let summary = reply.summary.clone().unwrap_or_default();
        assert!(
            summary.contains(
                "The callee did not give years of experience, willing to relocate, \
                 preferred shift, joining date. The callee said goodbye."
            ),
            "{summary}"
        );
        assert_valid(&request, &reply);
    }
}

#[test]
fn answers_out_of_bounds_refusals_and_other_fields_answers_stay_null() {
    let mut request = interview(Rubric::Percentage);
    let (transcript, _) = sim_call(
        &request,
        &[
            "Sure.",
            "I'd rather not say.",
            "About 200 days, I have 5 years of experience by the way.",
            "Hmm.",
            "I'm not sure.",
            "Whichever.",
            "Soon.",
        ],
    );
    request.transcript = transcript;
    let reply = analyze(&request, TODAY);
    assert_eq!(
        Value::Object(reply.structured_data.clone()),
        json!({
            "candidateName": null,
            // 200 days is past the 180-day maximum, and the 5 beside it is years.
            "noticePeriodDays": null,
            // Named only in the answer to the notice-period question, which is not its own.
            "yearsOfExperience": null,
            "willingToRelocate": null,
            "preferredShift": null,
            "joiningDate": null,
        })
    );
    assert_valid(&request, &reply);
}

#[test]
fn a_turn_that_names_a_field_fills_it_when_its_question_got_no_value() {
    let mut request = interview(Rubric::PassFail);
    request.transcript = turns(&[
        ("agent", "Hello, is this Asha?"),
        (
            "callee",
            "Yes. My full name is Asha Rao, and I have 7 years of experience.",
        ),
        ("agent", "Could you tell me your notice period in days?"),
        ("callee", "Two months, so about 60 days."),
        ("agent", "Could you tell me years of experience?"),
        ("callee", "As I said."),
        ("agent", "Thanks, bye."),
    ]);
    let reply = analyze(&request, TODAY);
    let data = &reply.structured_data;
    assert_eq!(data["candidateName"], json!("Asha Rao"));
    // The first number is the two months; the one beside "days" is 60.
    assert_eq!(data["noticePeriodDays"], json!(60));
    assert_eq!(data["yearsOfExperience"], json!(7));
    assert_valid(&request, &reply);
}

/// Issue 28.3: the callee gives the work mode as the answer to the question about
/// interest (already answered at the welcome), and only "thanks, bye" to the work-mode
/// question. The answer that held nothing for its own field is read for the others.
#[test]
fn a_value_given_out_of_order_is_read_from_the_answer_that_held_none_for_its_question() {
    let mut mode = field("workMode", FieldType::Enum, "Preferred work mode");
    mode.options = vec!["remote".into(), "hybrid".into(), "office".into()];
    for described in [true, false] {
        let mut fields = vec![
            field(
                "yearsOfExperience",
                FieldType::Integer,
                "Years of Rust experience",
            ),
            field(
                "noticePeriodDays",
                FieldType::Integer,
                "Notice period in days",
            ),
            field(
                "interested",
                FieldType::Boolean,
                "Whether interested in the role",
            ),
            mode.clone(),
        ];
        if !described {
            fields.iter_mut().for_each(|f| f.description.clear());
        }
        let mut request = AnalysisRequest {
            summary_prompt: None,
            fields,
            schema: None,
            success: None,
            transcript: Vec::new(),
            ended_reason: "agent-hangup".into(),
        };
        let (transcript, _) = sim_call(
            &request,
            &[
                "Yes, I am interested in the role",
                "I have 5 years of Rust experience",
                "My notice period is 30 days",
                "I prefer hybrid work",
                "Thanks, bye",
            ],
        );
        request.transcript = transcript;
        let reply = analyze(&request, TODAY);
        assert_eq!(
            Value::Object(reply.structured_data.clone()),
            json!({
                "yearsOfExperience": 5,
                "noticePeriodDays": 30,
                "interested": true,
                "workMode": "hybrid",
            }),
            "described: {described}; transcript {:?}",
            request.transcript
        );
        assert_valid(&request, &reply);
    }
}

/// Reading the whole call means the callee's part of it: an option the agent names, or
/// one in an answer that gave its own question a value, fills nothing.
#[test]
fn an_unanswered_field_takes_no_value_from_the_agent_or_from_another_fields_answer() {
    let mut mode = field("workMode", FieldType::Enum, "Preferred work mode");
    mode.options = vec!["remote".into(), "hybrid".into(), "office".into()];
    let request = AnalysisRequest {
        summary_prompt: None,
        fields: vec![
            field("notes", FieldType::String, "Anything else about work"),
            mode,
        ],
        schema: None,
        success: None,
        transcript: turns(&[
            (
                "agent",
                "We work hybrid here. Could you tell me anything else about work?",
            ),
            ("callee", "I liked the remote work in my last job."),
            (
                "agent",
                "Could you tell me preferred work mode: remote, hybrid, office?",
            ),
            ("callee", "Thanks, bye."),
            ("agent", "Most of us are in the office. Goodbye!"),
        ]),
        ended_reason: "agent-hangup".into(),
    };
    let reply = analyze(&request, TODAY);
    assert_eq!(
        Value::Object(reply.structured_data.clone()),
        json!({"notes": "I liked the remote work in my last job", "workMode": null})
    );
}

#[test]
fn a_users_schema_that_forbids_null_gets_no_key_for_a_missing_optional_value() {
    let mut request = screening();
    request.schema = Some(json!({
        "type": "object",
        "required": ["age"],
        "properties": {
            "age": {"type": "integer"},
            "city": {"type": "string", "enum": ["Pune", "Delhi"]},
            "pets": {"type": ["boolean", "null"]},
        },
    }));
    request.transcript = turns(&[("agent", "What is your age?"), ("callee", "Thirty.")]);
    let reply = analyze(&request, TODAY);
    assert_eq!(
        Value::Object(reply.structured_data.clone()),
        json!({"age": 30, "pets": null})
    );
    assert_valid(&request, &reply);
}

#[test]
fn a_call_without_fields_is_summarized_from_what_the_callee_said() {
    let mut request = screening();
    request.fields.clear();
    request.transcript = turns(&[
        ("agent", "Hello, this is the school."),
        ("callee", "Hi, is the fee due this week?"),
        (
            "agent",
            "Let me note that down for the team. Is there anything else I can help you with?",
        ),
        ("callee", "No, bye."),
    ]);
    request.ended_reason = "caller-hangup".into();
    let reply = analyze(&request, TODAY);
    assert_eq!(
        reply.summary.as_deref(),
        Some(
            "The callee spoke 2 time(s), saying \"Hi, is the fee due this week?\", then \
             \"No, bye.\". The callee said goodbye. The call ended by caller-hangup (the \
             callee hung up)."
        )
    );
    assert_eq!(
        reply.success.as_ref().map(|s| &s["value"]),
        Some(&json!(true))
    );
    assert_valid(&request, &reply);
    request.transcript = turns(&[("agent", "Hello?")]);
    request.ended_reason = "silence-timeout".into();
    let reply = analyze(&request, TODAY);
    assert_eq!(
        reply.summary.as_deref(),
        Some(
            "The agent spoke 1 time(s) but the callee never answered. The call ended by \
             silence-timeout (the callee went silent)."
        )
    );
    assert_eq!(
        reply.success.as_ref().map(|s| &s["value"]),
        Some(&json!(false))
    );
}
