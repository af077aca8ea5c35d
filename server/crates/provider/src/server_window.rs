//! Asks a local model server how large its context window is (llama.cpp `/props`, LM Studio
//! `/api/v0/models`, Ollama `/api/show`, OpenAI-style `/models` metadata).
//!
//! Local servers often run with a few thousand tokens of context while hosted models have
//! 128k or more; sizing budgets for the wrong window wastes the small one. Every probe is
//! best effort: a server that answers none of them leaves the configured default in place.

use std::time::Duration;

use serde_json::Value;

/// How long all probes together may take.
const PROBE_TIME: Duration = Duration::from_secs(2);

/// What a server reported about its window, and which of its interfaces said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerWindow {
    pub tokens: u64,
    pub source: &'static str,
}

/// What a server reported about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerReport {
    pub window: Option<ServerWindow>,
    /// Requests the server serves at once (llama.cpp's `total_slots`), when it says.
    pub slots: Option<u64>,
    /// It is llama.cpp's server (its `/props` answered), which serves its one model whatever
    /// model name a request gives.
    pub any_model_name: bool,
}

/// The context window the server at `base_url` reports for `model`, if any of its interfaces
/// says. Runtime settings (the context the server was started with) win over a model's
/// trained maximum.
pub async fn probe(client: &reqwest::Client, base_url: &str, model: &str) -> Option<ServerWindow> {
    report(client, base_url, model).await.window
}

/// What the server at `base_url` reports: its window for `model` and its slots.
pub async fn report(client: &reqwest::Client, base_url: &str, model: &str) -> ServerReport {
    let base = base_url.trim_end_matches('/');
    let root = base.strip_suffix("/v1").unwrap_or(base);
    let get = |url: String| async move { fetch_json(client.get(url)).await };
    let show = fetch_json(
        client
            .post(format!("{root}/api/show"))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "model": model }).to_string()),
    );
    let all = async {
        tokio::join!(
            get(format!("{root}/props")),
            get(format!("{root}/api/v0/models/{model}")),
            show,
            get(format!("{base}/models")),
        )
    };
    let Ok((props, lm_studio, ollama, models)) = tokio::time::timeout(PROBE_TIME, all).await else {
        return ServerReport::default();
    };
    let found = [
        (
            props.as_ref().and_then(from_llama_props),
            "llama.cpp /props",
        ),
        (
            lm_studio.as_ref().and_then(from_lm_studio),
            "LM Studio /api/v0/models",
        ),
        (
            ollama.as_ref().and_then(from_ollama_show),
            "Ollama /api/show",
        ),
        (
            models.as_ref().and_then(|m| from_model_list(m, model)),
            "/models metadata",
        ),
    ];
    let window = found.into_iter().find_map(|(tokens, source)| {
        tokens
            .filter(|&t| t > 0)
            .map(|tokens| ServerWindow { tokens, source })
    });
    ServerReport {
        window,
        slots: props.as_ref().and_then(|p| p["total_slots"].as_u64()),
        any_model_name: props.as_ref().is_some_and(Value::is_object),
    }
}

async fn fetch_json(request: reqwest::RequestBuilder) -> Option<Value> {
    let response = request.timeout(PROBE_TIME).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    serde_json::from_slice(&response.bytes().await.ok()?).ok()
}

/// llama.cpp's `/props`: the context the server runs with.
pub fn from_llama_props(props: &Value) -> Option<u64> {
    props["default_generation_settings"]["n_ctx"]
        .as_u64()
        .or_else(|| props["n_ctx"].as_u64())
}

/// LM Studio's `/api/v0/models/{model}`: the loaded context, else the model's maximum.
pub fn from_lm_studio(model: &Value) -> Option<u64> {
    model["loaded_context_length"]
        .as_u64()
        .or_else(|| model["max_context_length"].as_u64())
}

/// Ollama's `/api/show`: `num_ctx` from the model's parameters, else its trained length.
pub fn from_ollama_show(show: &Value) -> Option<u64> {
    let parameters = show["parameters"].as_str().unwrap_or_default();
    let num_ctx = parameters.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("num_ctx"))
            .then(|| words.next()?.parse().ok())
            .flatten()
    });
    num_ctx.or_else(|| {
        show["model_info"]
            .as_object()?
            .iter()
            .find_map(|(key, value)| {
                key.ends_with(".context_length")
                    .then(|| value.as_u64())
                    .flatten()
            })
    })
}

/// An OpenAI-style model list: the entry for `model` with vLLM's `max_model_len`,
/// llama.cpp's `meta.n_ctx_train` or a `context_length` field.
pub fn from_model_list(list: &Value, model: &str) -> Option<u64> {
    let entries = list["data"].as_array()?;
    let entry = entries
        .iter()
        .find(|e| e["id"] == model)
        .or_else(|| (entries.len() == 1).then(|| &entries[0]))?;
    entry["max_model_len"]
        .as_u64()
        .or_else(|| entry["context_length"].as_u64())
        .or_else(|| entry["meta"]["n_ctx_train"].as_u64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn llama_cpp_props_give_the_running_context() {
        let old = json!({"default_generation_settings": {"n_ctx": 8192}});
        let new = json!({"n_ctx": 4096, "default_generation_settings": {"params": {}}});
        assert_eq!(from_llama_props(&old), Some(8192));
        assert_eq!(from_llama_props(&new), Some(4096));
        assert_eq!(from_llama_props(&json!({"error": "x"})), None);
    }

    #[test]
    fn lm_studio_prefers_the_loaded_context() {
        let model =
            json!({"id": "qwen", "max_context_length": 32768, "loaded_context_length": 4096});
        assert_eq!(from_lm_studio(&model), Some(4096));
        assert_eq!(
            from_lm_studio(&json!({"max_context_length": 32768})),
            Some(32768)
        );
    }

    #[test]
    fn ollama_prefers_num_ctx_over_the_trained_length() {
        let with_param = json!({
            "parameters": "stop \"<|im_end|>\"\nnum_ctx                        16384",
            "model_info": {"qwen2.context_length": 32768}
        });
        assert_eq!(from_ollama_show(&with_param), Some(16384));
        let trained =
            json!({"model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}});
        assert_eq!(from_ollama_show(&trained), Some(32768));
        assert_eq!(from_ollama_show(&json!({})), None);
    }

    #[test]
    fn model_lists_name_the_entry_for_the_model() {
        let vllm = json!({"data": [{"id": "a", "max_model_len": 2048}, {"id": "b", "max_model_len": 9000}]});
        assert_eq!(from_model_list(&vllm, "b"), Some(9000));
        let llama = json!({"data": [{"id": "whatever.gguf", "meta": {"n_ctx_train": 32768}}]});
        assert_eq!(
            from_model_list(&llama, "local"),
            Some(32768),
            "a lone entry is the model"
        );
        assert_eq!(
            from_model_list(&vllm, "c"),
            None,
            "no guessing among several"
        );
        assert_eq!(from_model_list(&json!({"data": [{"id": "b"}]}), "b"), None);
    }
}
