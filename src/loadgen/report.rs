//! The human-readable summary on stdout (`--json` prints the output as it is).

use super::LoadgenOutput;
use super::metrics::{self, StepSummary};

pub(super) fn print_human(output: &LoadgenOutput) {
    match output {
        LoadgenOutput::Step(step) => print_step(step),
        LoadgenOutput::Sweep(sweep) => {
            for step in &sweep.steps {
                print_step(&step.summary);
                if step.broken.is_empty() {
                    println!("  held");
                } else {
                    println!("  broke: {}", step.broken.join("; "));
                }
                println!();
            }
            match sweep.ceiling {
                Some(ceiling) => println!("ceiling: {ceiling} concurrent calls held"),
                None => println!("ceiling: no step held"),
            }
        }
    }
}

fn print_step(step: &StepSummary) {
    let latency = |name: &str, p: &Option<metrics::Percentiles>| match p {
        Some(p) => println!(
            "  {name:<24} p50 {:>8.1} ms  p95 {:>8.1} ms  p99 {:>8.1} ms  max {:>8.1} ms  (n={})",
            p.p50_ms, p.p95_ms, p.p99_ms, p.max_ms, p.count
        ),
        None => println!("  {name:<24} -"),
    };
    println!(
        "{} calls at concurrency {} ({}) in {:.1} s: placed {}, answered {}, ended {}, failed {}, live at the end {}",
        step.calls,
        step.concurrency,
        step.mode,
        step.elapsed_seconds,
        step.placed,
        step.answered,
        step.ended,
        step.failed,
        step.live_at_end
    );
    println!("  fleet: {}", step.fleet);
    if let Some(rest) = &step.twilio_rest {
        println!(
            "  twilio REST: {} dials, {} refused for their auth, {} hang-ups, {} redirects; callbacks {} accepted, {} refused",
            rest.dials,
            rest.unauthorized,
            rest.hangups,
            rest.redirects,
            rest.callbacks,
            rest.callbacks_refused
        );
    }
    for target in &step.targets {
        println!("  target {}: {} calls placed", target.target, target.placed);
    }
    for (reason, count) in &step.failures {
        println!("  failure: {count} × {reason}");
    }
    for (reason, count) in &step.greeting_missing {
        println!("  no greeting latency: {count} × {reason}");
    }
    latency("greeting latency", &step.greeting_latency);
    latency(
        "answer latency (inbound: webhook → first agent audio)",
        &step.answer_latency,
    );
    latency("turn latency", &step.turn_latency);
    latency("engine share (callee)", &step.engine_share);
    latency("engine overhead (server)", &step.server_engine_overhead);
    let stages = &step.server_stages;
    latency("turn total (server)", &stages.total);
    latency("  endpointing", &stages.endpointing);
    latency("  asr", &stages.asr);
    latency("  llm first token", &stages.llm_first_token);
    latency("  tts first audio", &stages.tts_first_audio);
    println!(
        "  frames {}: late >40 ms {}, jitter mean {:.2} ms, max {:.1} ms",
        step.frames.frames,
        step.frames.late_frames,
        step.frames.mean_jitter_ms,
        step.frames.max_jitter_ms
    );
    if let Some(rtp) = &step.rtp {
        println!(
            "  rtp (agent → {} SIP callees): {} packets, lost {} ({:.3} %), reordered {}; callees sent {}",
            rtp.calls, rtp.packets, rtp.lost, rtp.loss_percent, rtp.reordered, rtp.packets_sent
        );
        latency("rtp jitter (RFC 3550)", &rtp.jitter);
    }
    match &step.usage {
        Some(u) => println!(
            "  server: {:.3} % of a core and {:.0} KiB per concurrent call ({:.1} calls on the plateau, {:.2} cores, idle {:.3} cores, peak RSS {} KiB) [{}]",
            u.cpu_percent_of_core_per_call,
            u.rss_kib_per_call,
            u.plateau_active_calls,
            u.plateau_cpu_cores,
            u.idle_cpu_cores,
            u.peak_rss_kib,
            step.usage_source
        ),
        None => println!("  server usage: - [{}]", step.usage_source),
    }
    if let Some(turns) = &step.turns {
        let ends: Vec<String> = turns
            .ends
            .iter()
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect();
        println!(
            "  turns ended: {} ({:.1} % fell back to silence timing); end-of-turn model: {} evaluations, {} turned away",
            ends.join(", "),
            turns.fallback_percent(),
            turns.model_evaluations,
            turns.model_saturated
        );
    }
    if let Some(t) = &step.tools {
        println!(
            "  function tool (answers after {} ms): {} requests received, {} calls at its line",
            t.server_delay_ms, t.function_requests, t.calls_at_tool_line
        );
        if t.calls_read > 0 {
            println!(
                "  tool calls stored for {} calls: {}, errors {}",
                t.calls_read, t.tool_calls, t.tool_errors
            );
            latency("tool latency (server)", &t.latency);
        } else {
            println!("  tool calls stored: - (the --target server's store is not read)");
        }
    }
    if let Some(a) = &step.analysis {
        let drained = match a.seconds_to_drain {
            _ if a.held => "held from the worker (control run)".to_owned(),
            Some(seconds) => format!("drained in {seconds:.1} s"),
            None => format!("{} still pending at the end", a.backlog - a.drained),
        };
        println!(
            "  analysis backlog {}: {} analyzed ({} failed) at {:.1}/s, {drained}",
            a.backlog, a.drained, a.failed, a.per_second
        );
    }
}
