//! `talaria-mock-llm`: runs the scripted mock LLM server for clients in other languages.
//!
//! Usage: `talaria-mock-llm [SCRIPT.json]`. Prints `{"port": N, "base_url": "..."}` on one line
//! of stdout once listening, then serves until stdin closes. Script more replies with
//! `POST /_mock/script`; read recorded requests with `GET /_mock/requests`.

use std::io::Write;

use talaria_harness::{MockLlm, MockReply};
use tokio::io::AsyncReadExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let script: Vec<MockReply> = match std::env::args().nth(1) {
        Some(path) => serde_json::from_str(&std::fs::read_to_string(&path)?)?,
        None => Vec::new(),
    };
    let mock = MockLlm::start(script).await?;
    let ready = serde_json::json!({"port": mock.addr().port(), "base_url": mock.base_url()});
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{ready}")?;
    stdout.flush()?;
    // Serve until our parent closes stdin (or dies).
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    Ok(())
}
