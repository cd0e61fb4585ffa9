//! `--tool-latency-ms`: a stand-in for a customer's function behind an in-call tool. A small
//! HTTP server on loopback answers every POST after a fixed delay; the load agent gets a
//! `function` tool pointing at it, and the caller script asks the question that makes the
//! sim LLM call it, so each call's turn waits on a real outbound request.

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::task::JoinHandle;
use voxline_actors::sim::callee::{ScriptStep, spoken_lines};

/// The load agent's function tool name.
pub const FUNCTION_NAME: &str = "order_status";

/// What the function does, for the model. The sim LLM calls a function when the caller's
/// words share two of its longer words ("status", "order").
const FUNCTION_DESCRIPTION: &str = "Look up the delivery status of an order";

/// The caller line that asks for the function.
const TOOL_LINE: &str = "What is the status of my order A-1234?";

/// The caller script when `--tool-latency-ms` is given without `--script`: the default
/// three-line script with the order question in the middle.
pub fn default_script() -> Value {
    json!([
        "Hello, yes, this is me speaking.",
        TOOL_LINE,
        "Okay, thank you very much. Goodbye!",
    ])
}

/// The agent's `tools` entry for the function served at `url`.
pub fn function_tool(url: &str) -> Value {
    json!({
        "type": "function",
        "name": FUNCTION_NAME,
        "description": FUNCTION_DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": { "orderId": { "type": "string" } },
            "required": ["orderId"],
        },
        "url": url,
        "timeoutSeconds": 5,
        "message": "One moment while I check.",
    })
}

/// The position, among the lines the callee speaks, of the first line that makes the sim LLM
/// call the function; `None` when the script has none (the function is then never called).
pub fn tool_line_index(steps: &[ScriptStep]) -> Option<usize> {
    spoken_lines(steps)
        .iter()
        .position(|line| asks_for_function(line))
}

/// Lowercase words of four or more letters.
fn long_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() >= 4)
        .map(str::to_lowercase)
        .collect()
}

/// The sim LLM's rule for this description: two shared words of four or more letters (none of
/// the description's words is one of its stop words). A goodbye line never calls a tool.
fn asks_for_function(line: &str) -> bool {
    let said = long_words(line);
    if line
        .split(|c: char| !c.is_alphanumeric())
        .any(|w| w.eq_ignore_ascii_case("bye") || w.eq_ignore_ascii_case("goodbye"))
    {
        return false;
    }
    long_words(FUNCTION_DESCRIPTION)
        .iter()
        .filter(|w| said.contains(w))
        .count()
        >= 2
}

/// The loopback function server of one load run.
pub struct ToolServer {
    url: String,
    requests: Arc<AtomicU64>,
    latency: Duration,
    task: JoinHandle<()>,
}

/// What the handler shares.
struct Served {
    requests: Arc<AtomicU64>,
    latency: Duration,
}

impl ToolServer {
    /// Starts the server on 127.0.0.1 (a free port) on `runtime`, answering after `latency`.
    /// It runs on the fleet runtime so its CPU is counted with the callees', not the server's:
    /// it stands for the customer's machine.
    pub async fn start(
        latency: Duration,
        runtime: &tokio::runtime::Handle,
    ) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let requests = Arc::new(AtomicU64::new(0));
        let app = axum::Router::new()
            .route("/", post(answer))
            .with_state(Arc::new(Served {
                requests: Arc::clone(&requests),
                latency,
            }));
        let task = runtime.spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!(%error, "the loadgen function server stopped");
            }
        });
        Ok(Self {
            url: format!("http://{address}/"),
            requests,
            latency,
            task,
        })
    }

    /// The function's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The delay before each answer.
    pub fn latency(&self) -> Duration {
        self.latency
    }

    /// POSTs received so far (each counted when it arrives).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Every POST: counted, then answered after the delay with the order's status.
async fn answer(State(served): State<Arc<Served>>) -> Json<Value> {
    let n = served.requests.fetch_add(1, Ordering::Relaxed) + 1;
    tokio::time::sleep(served.latency).await;
    Json(json!({ "message": format!("Your order A-{n} ships tomorrow") }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use voxline_actors::sim::callee::{default_sim_script, parse_sim_script};

    #[test]
    fn the_default_tool_script_asks_for_the_function_on_its_second_line() {
        let steps = parse_sim_script(&default_script()).unwrap();
        assert_eq!(tool_line_index(&steps), Some(1));
        assert_eq!(tool_line_index(&default_sim_script()), None);
        let goodbye = parse_sim_script(&json!(["Order status? Goodbye!"])).unwrap();
        assert_eq!(tool_line_index(&goodbye), None);
    }

    #[tokio::test]
    async fn the_server_counts_and_answers_after_the_delay() {
        let server = ToolServer::start(
            Duration::from_millis(30),
            &tokio::runtime::Handle::current(),
        )
        .await
        .unwrap();
        let started = std::time::Instant::now();
        let answer: Value = reqwest::Client::new()
            .post(server.url())
            .json(&json!({"arguments": {"orderId": "A-1"}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(answer["message"], "Your order A-1 ships tomorrow");
        assert_eq!(server.requests(), 1);
    }
}
