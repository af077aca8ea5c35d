//! `talaria doctor [--call]`: checks the configuration exactly as the server reads it, and
//! whether the model can be reached, printing one line per check and the fix for each problem
//! (with `--call`, the rate limits the test call's answer stated). Exits non-zero when
//! something needs fixing. Keys are never printed.

mod limits;

use std::io::Write;
use std::time::Duration;

use futures_util::StreamExt;
use talaria_engine::Config;
use talaria_provider::server_window::ServerReport;
use talaria_provider::{
    ChatRequest, ErrorClass, ProviderError, RateLimits, StreamEvent, Transcript, UserPart, classify,
};
use talaria_record::{EntryBody, InputBlock};

/// The checks' outcome, written as they run.
struct Report<'w> {
    out: &'w mut dyn Write,
    problems: usize,
}

impl Report<'_> {
    fn ok(&mut self, what: &str, detail: &str) {
        let _ = writeln!(self.out, "✓ {what:<14} {detail}");
    }

    fn warn(&mut self, what: &str, detail: &str) {
        let _ = writeln!(self.out, "! {what:<14} {detail}");
    }

    /// Lines that belong to the check above (indented under it).
    fn note(&mut self, text: &str) {
        for line in text.lines() {
            let _ = writeln!(self.out, "  {:<14} {line}", "");
        }
    }

    fn problem(&mut self, what: &str, detail: &str, fix: &str) {
        self.problems += 1;
        let mut lines = detail.lines();
        let _ = writeln!(
            self.out,
            "✗ {what:<14} {}",
            lines.next().unwrap_or_default()
        );
        for line in lines {
            let _ = writeln!(self.out, "  {:<14} {line}", "");
        }
        let _ = writeln!(self.out, "  {:<14} fix: {fix}", "");
    }
}

/// The README's configuration for a local model server: the first of the engine's known
/// local servers, the others' addresses beside it.
fn local_snippet() -> String {
    let [first, others @ ..] = &talaria_engine::LOCAL_SERVERS;
    let others: Vec<String> = others
        .iter()
        .map(|server| format!("{}: {}", server.name, server.base_url))
        .collect();
    format!(
        "  model = \"qwen2.5-coder\"\n  [{}]\n  base_url = \"{}\"   # {}\n  api_key = \"\"",
        first.service.table,
        first.base_url,
        others.join(", ")
    )
}

/// The declared variables set in this environment, each with the setting it overrides.
fn variables(report: &mut Report<'_>, env: &dyn Fn(&str) -> Option<String>) {
    let set = talaria_engine::configuration_variables_set(env);
    if set.is_empty() {
        report.ok("environment", "no variable overrides the file");
        return;
    }
    let named: Vec<String> = set
        .iter()
        .map(|(variable, key)| format!("{variable} (over {key})"))
        .collect();
    report.ok(
        "environment",
        &format!("{} set: {}", named.len(), named.join(", ")),
    );
}

/// What the endpoint's model list said.
enum Listing {
    Models(Vec<String>),
    Problem(String, String),
    /// Nothing can be reached there (refused, unknown host): a test call would say the same.
    Unreachable(String, String),
}

fn auth_fix(config: &Config) -> String {
    let table = config.provider.table();
    format!(
        "check {} or api_key under [{table}] in {}",
        config.provider.key_variable(),
        config.home.join("config.toml").display()
    )
}

/// The window sessions will assume, and where the figure comes from.
fn context_window(config: &Config, server: &ServerReport) -> (u64, String) {
    if config.context_window_set {
        return (config.context_window, "configured".into());
    }
    if let Some(found) = server.window {
        return (found.tokens, format!("reported by {}", found.source));
    }
    (
        config.context_window,
        "default; set context_window in config.toml if the model has less".into(),
    )
}

/// GET the endpoint's model list (OpenAI-style `/models`, Anthropic `/v1/models`).
async fn list_models(config: &Config) -> Listing {
    let endpoint = config.endpoint();
    let base = endpoint.base_url.trim_end_matches('/');
    let key = endpoint.api_keys.first().filter(|k| !k.is_empty());
    let client = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(15))
        .build()
    {
        Ok(client) => client,
        Err(e) => return Listing::Problem(e.to_string(), "report this as a bug".into()),
    };
    let request = (config.provider.spec().models_request)(&client, base, key.map(String::as_str));
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => return unreachable(config, base, &error),
    };
    let status = response.status().as_u16();
    if status == 401 || status == 403 {
        return Listing::Problem(
            format!("authentication failed (HTTP {status})"),
            auth_fix(config),
        );
    }
    if status == 404 {
        return wrong_path(&client, config, base).await;
    }
    let text = response.text().await.unwrap_or_default();
    let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    Listing::Models(model_ids(&body))
}

/// The model ids in a model listing: OpenAI's `data[].id` or Ollama's `models[].name`.
pub(crate) fn model_ids(body: &serde_json::Value) -> Vec<String> {
    body["data"]
        .as_array()
        .or_else(|| body["models"].as_array())
        .map(|models| {
            models
                .iter()
                .filter_map(|m| m["id"].as_str().or_else(|| m["name"].as_str()))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Why the endpoint cannot be reached, and the fix naming the provider's own settings.
fn unreachable(config: &Config, base: &str, error: &reqwest::Error) -> Listing {
    let (table, variable) = (config.provider.table(), config.provider.url_variable());
    if talaria_provider::http::is_connection_refused(error) {
        Listing::Unreachable(
            format!("cannot connect to {base} (connection refused)"),
            format!("start the server, or set the right base_url under [{table}] / {variable}"),
        )
    } else if talaria_provider::http::is_unknown_host(error) {
        if is_default_host(config, base) {
            // The provider's own host does not resolve: this machine is offline, or its DNS
            // is broken; the address is right.
            return Listing::Unreachable(
                format!(
                    "cannot look up the host of {base}, the provider's own address: this \
                     machine seems offline, or its DNS does not answer"
                ),
                "check the network connection and the DNS settings (/etc/resolv.conf); the \
                 address itself is right"
                    .into(),
            );
        }
        Listing::Unreachable(
            format!("cannot find the host of {base} (the name does not resolve)"),
            format!("correct the host name in base_url under [{table}] / {variable}"),
        )
    } else {
        Listing::Problem(
            format!("cannot reach {base}: {error}"),
            "check the address and the network".into(),
        )
    }
}

/// Whether `base` is on the host of the provider's default address (`api.openai.com`…).
fn is_default_host(config: &Config, base: &str) -> bool {
    let host = |url: &str| {
        reqwest::Url::parse(url)
            .ok()?
            .host_str()
            .map(str::to_string)
    };
    host(base).is_some_and(|h| Some(h) == host(config.provider.service().default_url))
}

/// The addresses worth trying when `base`'s `/models` is not found: `base` with `/v1` added
/// (most OpenAI-compatible servers answer under it), and the server's own `/v1` (an address
/// whose path is wrong: `/v2`, `/api`).
fn candidate_bases(base: &str) -> Vec<String> {
    let mut candidates = Vec::new();
    if !base.ends_with("/v1") {
        candidates.push(format!("{base}/v1"));
    }
    if let Ok(mut url) = reqwest::Url::parse(base) {
        url.set_path("/v1");
        let origin_v1 = url.as_str().trim_end_matches('/').to_string();
        if origin_v1 != base && !candidates.contains(&origin_v1) {
            candidates.push(origin_v1);
        }
    }
    candidates
}

/// `/models` is not found: a server that does not list its models, or an address whose path
/// is wrong — said, with the path that answered, when another path of the server answers.
async fn wrong_path(client: &reqwest::Client, config: &Config, base: &str) -> Listing {
    let openai_style = std::ptr::eq(config.provider.service(), &talaria_engine::OPENAI_SERVICE);
    if !openai_style {
        return Listing::Models(Vec::new());
    }
    for candidate in candidate_bases(base) {
        let answers = client
            .get(format!("{candidate}/models"))
            .send()
            .await
            .is_ok_and(|response| response.status().is_success());
        if answers {
            return Listing::Unreachable(
                format!(
                    "nothing answers at {base}/models (HTTP 404), but {candidate}/models does: \
                     the address's path is wrong"
                ),
                format!(
                    "set base_url under [{}] / {} to {candidate}",
                    config.provider.table(),
                    config.provider.url_variable()
                ),
            );
        }
    }
    Listing::Models(Vec::new())
}

/// A one-token call through the configured provider.
pub(crate) async fn test_call(config: &Config) -> Result<(), (String, String)> {
    test_call_limits(config).await.map(|_| ())
}

/// A one-token call through the configured provider; the rate limits its answer stated.
async fn test_call_limits(config: &Config) -> Result<Option<RateLimits>, (String, String)> {
    let router = talaria_engine::build_router(config)
        .map_err(|e| (e.to_string(), "fix the provider settings".to_string()))?;
    let target = router
        .chain(&config.model)
        .into_iter()
        .next()
        .ok_or_else(|| ("no model to call".to_string(), "set model".to_string()))?;
    let mut transcript = Transcript::with_system("Answer with one word.");
    transcript.push(EntryBody::User {
        input: vec![InputBlock::Text {
            text: "Say ok.".into(),
        }],
        model_view: vec![UserPart::text("Say ok.")],
    });
    let request = ChatRequest {
        model: &config.model,
        transcript: &transcript,
        tools: &[],
        max_tokens: Some(1),
        credential: None,
        effort: None,
    };
    let explain = |error: ProviderError| {
        let fix = match classify(&error).class {
            ErrorClass::Auth | ErrorClass::Billing => auth_fix(config),
            ErrorClass::ModelNotFound => {
                "set model (or TALARIA_MODEL) to a model the endpoint serves".into()
            }
            ErrorClass::Unreachable => match &error {
                ProviderError::UnknownHost { .. } => format!(
                    "correct the host name in base_url under [{}] / {}",
                    config.provider.table(),
                    config.provider.url_variable()
                ),
                _ => format!(
                    "start the server, or set the right base_url under [{}] / {}",
                    config.provider.table(),
                    config.provider.url_variable()
                ),
            },
            ErrorClass::Timeout => {
                "check the address and the network, or raise connect_timeout_secs".into()
            }
            ErrorClass::RateLimit | ErrorClass::Overloaded | ErrorClass::ServerError => {
                "try again later, or use another model or endpoint".into()
            }
            _ => "correct what the message names".into(),
        };
        let mut what = error.to_string();
        if let Some(limits) = error.limits() {
            for line in limits::lines(limits, std::time::SystemTime::now()) {
                what.push_str(&format!("\nrate limit {line}"));
            }
        }
        (what, fix)
    };
    let mut stream =
        tokio::time::timeout(Duration::from_secs(120), target.provider.stream(&request))
            .await
            .map_err(|_| {
                (
                    "no answer within 120 s".to_string(),
                    "check the server".to_string(),
                )
            })?
            .map_err(explain)?;
    let mut stated = None;
    while let Some(event) = stream.next().await {
        match event {
            Ok(StreamEvent::Finished { .. }) => return Ok(stated),
            Ok(StreamEvent::RateLimits(limits)) => stated = Some(limits),
            Ok(_) => {}
            Err(error) => return Err(explain(error)),
        }
    }
    Ok(stated)
}

/// The rate limits the test call's answer stated (a warning when one is nearly used up).
fn rate_limits(report: &mut Report<'_>, stated: Option<&RateLimits>) {
    let Some(limits) = stated else {
        report.ok("rate limits", "none stated by the endpoint");
        return;
    };
    let lines = limits::lines(limits, std::time::SystemTime::now());
    let Some((first, rest)) = lines.split_first() else {
        report.ok("rate limits", "none stated by the endpoint");
        return;
    };
    if limits::nearly_used(limits) {
        report.warn("rate limits", first);
    } else {
        report.ok("rate limits", first);
    }
    report.note(&rest.join("\n"));
}

/// Whether commands will run in the OS sandbox, proven by running one.
async fn sandbox(report: &mut Report<'_>, config: &Config) {
    if !config.sandbox.enabled {
        report.warn(
            "sandbox",
            "OFF ([sandbox] mode = \"off\" or TALARIA_SANDBOX=off): commands run with your rights",
        );
        return;
    }
    let availability = tokio::task::spawn_blocking(talaria_sandbox::availability)
        .await
        .ok();
    match availability {
        Some(talaria_sandbox::Availability::Enforced { .. }) => {}
        Some(talaria_sandbox::Availability::Unavailable(why)) => {
            report.warn(
                "sandbox",
                &format!(
                    "unavailable ({why}): commands run with your rights, and yolo asks for \
                     every command not proven read-only"
                ),
            );
            return;
        }
        None => {
            report.problem("sandbox", "the check failed", "report this as a bug");
            return;
        }
    }
    let Some(helper) = talaria_engine::SandboxHelper::this_binary() else {
        report.problem(
            "sandbox",
            "cannot find this program's own path",
            "report this as a bug",
        );
        return;
    };
    let layers_config = config.clone();
    let checked = tokio::task::spawn_blocking(move || {
        let layers = talaria_engine::sandbox_layers(&layers_config, Some(&helper));
        talaria_engine::sandbox_self_test(&helper, &layers_config, layers.namespaces.is_ok())
            .map(|()| layers)
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|tested| tested.map_err(|e| e.to_string()));
    let network = if config.sandbox.network {
        "network on"
    } else {
        "network off"
    };
    match checked {
        Ok(layers) => {
            report.ok(
                "sandbox",
                &format!(
                    "active: {}; commands write only in the workspace, {} extra place(s) and a \
                     private temporary directory; {network}; at most {} processes per command; \
                     {} UNIX socket(s) reachable outside the workspace",
                    layers.describe(),
                    config.sandbox.writable.len(),
                    config.sandbox.max_processes,
                    config.sandbox.unix_sockets.len(),
                ),
            );
            if let Some(gaps) = layers.gaps() {
                report.warn("sandbox layers", &format!("not covered here: {gaps}"));
            }
            process_limit(report, config.sandbox.max_processes);
        }
        Err(why) => report.problem(
            "sandbox",
            &format!("available but not working: {why}"),
            "report this as a bug; meanwhile [sandbox] mode = \"off\" runs commands unconfined",
        ),
    }
}

/// Warns when the user's hard process limit is below `[sandbox] max_processes`: commands
/// then get the hard limit (counting every process of the user), not the setting.
fn process_limit(report: &mut Report<'_>, max_processes: u32) {
    let Ok((_, hard)) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NPROC)
    else {
        return;
    };
    if max_processes > 0 && hard < u64::from(max_processes) {
        report.warn(
            "process limit",
            &format!(
                "your hard process limit ({hard}, `ulimit -Hu`) is below [sandbox] \
                 max_processes ({max_processes}): commands are held to {hard} processes, \
                 counting every process you run"
            ),
        );
    }
}

/// Whether `TALARIA_HOME` or the store in it is open to other users (the agent tightens
/// them when it starts; this names what it could not).
fn home_privacy(report: &mut Report<'_>, home: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let open: Vec<String> = [home.to_path_buf(), home.join("state.db")]
        .iter()
        .filter_map(|path| {
            let mode = std::fs::metadata(path).ok()?.permissions().mode();
            talaria_util::private::open_to_others(mode)
                .then(|| format!("{} (mode {:o})", path.display(), mode & 0o777))
        })
        .collect();
    if !open.is_empty() {
        report.problem(
            "privacy",
            &format!(
                "{} can be read by other users of this machine: it holds every session's \
                 transcript",
                open.join(" and ")
            ),
            &format!(
                "chmod 700 {} (talaria does so when it starts, if it may)",
                home.display()
            ),
        );
    }
}

/// Whether files can be made in `TALARIA_HOME` (or, while it does not exist, in the folder
/// the server would create it in), as this user, on a file system that is not read-only.
fn home_writable(home: &std::path::Path) -> Result<(), nix::Error> {
    use nix::unistd::{AccessFlags, access};
    let existing = home.ancestors().find(|dir| dir.exists()).unwrap_or(home);
    access(existing, AccessFlags::W_OK | AccessFlags::X_OK)
}

/// The session store: where, how big, which schema, writable, and a quick integrity check.
async fn store(report: &mut Report<'_>, config: &Config) {
    if let Some(url) = &config.store.url {
        shared_store(report, config, url).await;
        return;
    }
    let home = config.home.clone();
    let writable =
        tokio::task::spawn_blocking(move || home_writable(&home).map_err(|e| e.desc().to_string()))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
    home_privacy(report, &config.home);
    if let Err(why) = writable {
        report.problem(
            "session store",
            &format!(
                "{} cannot be written ({why}): sessions, skills and memory would not be saved",
                config.home.display()
            ),
            "make it writable, or set TALARIA_HOME to a folder you can write",
        );
        return;
    }
    let path = config.home.join("state.db");
    if !path.exists() {
        report.ok(
            "session store",
            &format!("{} (created with the first session)", path.display()),
        );
        return;
    }
    let checked = tokio::task::spawn_blocking(move || {
        talaria_store::SqliteStore::open(&path).and_then(|store| store.report())
    })
    .await;
    match checked {
        Ok(Ok(state)) => {
            let detail = format!(
                "{} ({:.1} MB, {} sessions, schema {}, {})",
                state.path.display(),
                state.bytes as f64 / 1_048_576.0,
                state.sessions,
                state.schema_version,
                if state.writable {
                    "writable"
                } else {
                    "READ-ONLY"
                },
            );
            if state.check != "ok" {
                report.problem(
                    "session store",
                    &format!("{detail}: damaged ({})", state.check),
                    "restore it from a backup (talaria store backup), or move it away to start afresh",
                );
            } else if !state.writable {
                report.problem(
                    "session store",
                    &detail,
                    "make the folder and file writable: sessions are not saved",
                );
            } else {
                report.ok("session store", &format!("{detail}, integrity ok"));
            }
        }
        Ok(Err(error)) => report.problem(
            "session store",
            &error.to_string(),
            "move the file away to start afresh, or restore a backup",
        ),
        Err(error) => report.problem("session store", &error.to_string(), "report this as a bug"),
    }
}

/// A PostgreSQL store: reached (encrypted or not), its schema against this build's, and
/// the privileges the store needs. Nothing is created or migrated.
#[cfg(feature = "postgres")]
async fn shared_store(report: &mut Report<'_>, config: &Config, url: &str) {
    let shown = talaria_engine::without_password(url);
    let (url, passfile) = (url.to_string(), config.store.passfile.clone());
    let inspected = tokio::task::spawn_blocking(move || {
        let options = talaria_store::PgOptions::parse(&url, passfile.as_deref(), &|key| {
            std::env::var(key).ok()
        })?;
        talaria_store::inspect_postgres(&options)
    })
    .await;
    let state = match inspected {
        Ok(Ok(state)) => state,
        Ok(Err(error)) => {
            return report.problem(
                "session store",
                &format!("{shown}: {error}"),
                "check the server is running and the URL, user and password (PGPASSWORD or a \
                 passfile); sessions are not saved meanwhile",
            );
        }
        Err(error) => {
            return report.problem("session store", &error.to_string(), "report this as a bug");
        }
    };
    let detail = format!(
        "PostgreSQL {} at {} ({}), schema {} of {}, {} sessions",
        state.server_version,
        state.label,
        if state.encrypted {
            "TLS"
        } else {
            "not encrypted"
        },
        state.schema_version,
        state.known,
        state.sessions
    );
    if state.schema_version > state.known {
        report.problem(
            "session store",
            &detail,
            "the database was migrated by a newer Talaria: upgrade this one",
        );
    } else if !state.missing_privileges.is_empty() {
        report.problem(
            "session store",
            &format!("{detail}; missing: {}", state.missing_privileges.join(", ")),
            "grant the user these privileges (or use the database's owner)",
        );
    } else if state.schema_version < state.known {
        report.ok(
            "session store",
            &format!("{detail}; migrated when the first session opens"),
        );
    } else {
        report.ok("session store", &detail);
    }
}

#[cfg(not(feature = "postgres"))]
async fn shared_store(report: &mut Report<'_>, _config: &Config, url: &str) {
    report.problem(
        "session store",
        &talaria_engine::without_password(url),
        "this build has no PostgreSQL support: build with the `postgres` feature",
    );
}

/// Runs the checks; returns the number of problems.
pub async fn run(out: &mut dyn Write, call: bool) -> usize {
    let mut report = Report { out, problems: 0 };
    let env = |key: &str| std::env::var(key).ok();
    let path = talaria_engine::default_home(&env).join("config.toml");
    let config = match Config::load() {
        Ok(config) => {
            if path.exists() {
                report.ok("config file", &format!("{} (found, valid)", path.display()));
            } else {
                report.warn(
                    "config file",
                    &format!(
                        "none at {}: defaults and the environment are used (`talaria setup` \
                         writes one)",
                        path.display()
                    ),
                );
            }
            config
        }
        Err(error) => {
            report.problem("config file", &error.to_string(), &error.fix());
            return report.problems;
        }
    };
    variables(&mut report, &env);
    for warning in &config.warnings {
        if config.typos.contains(warning) {
            report.problem("config key", warning, "rename the key as suggested");
        } else {
            report.warn("config key", warning);
        }
    }
    report.ok("provider", config.provider.as_str());
    report.ok("model", &config.model);
    let server = crate::sessions::local_server_report(&config, "doctor").await;
    let reachable = if config.provider.is_built_in() {
        report.warn(
            "endpoint",
            "the built-in demo model: scripted answers, no server, no key (`talaria setup` \
             sets up a real model)",
        );
        true
    } else {
        report.ok("base URL", &config.endpoint().base_url);
        credentials(&mut report, &config, &path);
        endpoint(&mut report, &config, &server).await
    };
    let (window, source) = context_window(&config, &server);
    report.ok("context window", &format!("{window} tokens ({source})"));
    sandbox(&mut report, &config).await;
    store(&mut report, &config).await;
    if call && !reachable {
        report.warn(
            "test call",
            "not made: the endpoint cannot be reached (see above)",
        );
    } else if call {
        match test_call_limits(&config).await {
            Ok(stated) => {
                report.ok("test call", "the model answered");
                rate_limits(&mut report, stated.as_ref());
            }
            Err((what, fix)) => report.problem("test call", &what, &fix),
        }
    }
    report.problems
}

/// Whether the endpoint has its keys (a local server needs none: the snippet says how).
fn credentials(report: &mut Report<'_>, config: &Config, path: &std::path::Path) {
    match config.missing_credentials() {
        None => {
            let keys = config.endpoint().api_keys.len();
            let detail = if config.endpoint().api_keys.iter().all(String::is_empty) {
                "none needed (empty key)".to_string()
            } else {
                format!("{keys} key(s) set (not shown)")
            };
            report.ok("credentials", &detail);
        }
        Some(missing) => {
            report.problem("credentials", "missing", &missing);
            if !path.exists() {
                report.note(&format!(
                    "for a model server on this machine (llama.cpp, Ollama, LM Studio) no key is needed; write {}:\n{}",
                    path.display(),
                    local_snippet()
                ));
            }
        }
    }
}

/// Whether the endpoint answers and serves the model; `false` when it cannot be reached.
async fn endpoint(report: &mut Report<'_>, config: &Config, server: &ServerReport) -> bool {
    match list_models(config).await {
        Listing::Models(ids) if ids.is_empty() => {
            report.ok("endpoint", "reachable (it does not list its models)");
        }
        Listing::Models(ids) if ids.contains(&config.model) => {
            report.ok("endpoint", &format!("reachable; serves {}", config.model));
        }
        // llama.cpp serves its one model whatever name a request gives.
        Listing::Models(ids) if ids.len() == 1 && server.any_model_name => {
            report.warn(
                "endpoint",
                &format!(
                    "reachable; it serves one model ({}) and answers to any model name, so {} is fine (llama-server --alias {} makes the names agree)",
                    ids[0], config.model, config.model
                ),
            );
        }
        Listing::Models(ids) => {
            let shown: Vec<&str> = ids.iter().take(8).map(String::as_str).collect();
            report.problem(
                "endpoint",
                &format!(
                    "reachable, but {} is not among its models ({})",
                    config.model,
                    shown.join(", ")
                ),
                "set model (or TALARIA_MODEL) to one of those",
            );
        }
        Listing::Problem(what, fix) => report.problem("endpoint", &what, &fix),
        Listing::Unreachable(what, fix) => {
            report.problem("endpoint", &what, &fix);
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_snippet_is_a_configuration_the_engine_reads() {
        let snippet = local_snippet();
        let text: String = snippet.lines().map(|l| format!("{}\n", l.trim())).collect();
        let parsed: toml::Table = toml::from_str(&text).expect("valid TOML");
        assert_eq!(
            parsed["openai"]["base_url"].as_str(),
            Some(talaria_engine::LOCAL_SERVERS[0].base_url)
        );
        assert!(
            snippet.contains("Ollama: http://127.0.0.1:11434/v1"),
            "{snippet}"
        );
    }

    #[test]
    fn a_wrong_path_is_tried_with_v1_added_and_at_the_servers_own_v1() {
        assert_eq!(
            candidate_bases("http://h:1/v2"),
            ["http://h:1/v2/v1", "http://h:1/v1"]
        );
        assert_eq!(candidate_bases("http://h:1/v1"), Vec::<String>::new());
        assert_eq!(candidate_bases("http://h:1"), ["http://h:1/v1"]);
    }
}
