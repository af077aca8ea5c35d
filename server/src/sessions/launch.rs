//! Session starts: the slow part (configuration, prompt, the local server's window, MCP
//! connects, `ready_session`) off the dispatch loop, then the assembly on it — router,
//! registry, settings, actor (`SessionRoom::assemble`); the wire room starts its forwarder
//! and shows its first notices.

use std::sync::Arc;

use super::cassettes;
use super::client_prompt::ClientPrompt;
use super::commands;
use super::error::SessionError;
use super::mcp;
use super::room::{SessionRoom, StartContext};
use super::server_window;
use super::skills;
use talaria_engine::{
    Config, Delegation, EngineEvent, ModelRouter, SessionHandle, SessionSettings,
};
use talaria_protocol::acp;
use tokio::sync::mpsc;

/// What starting a session needs.
pub struct Launch {
    pub id: String,
    pub cwd: std::path::PathBuf,
    /// The configuration, prompt, commands, MCP servers, roots and shell prepared for it.
    pub ready: Ready,
    /// The session's own model and mode (a stored session's), else the configuration's.
    pub model: Option<String>,
    pub mode: Option<talaria_engine::Mode>,
    pub start: talaria_engine::SessionStart,
    /// The session asked to be recorded into this directory (`_meta.talaria.record`).
    pub taps: SessionTaps,
}

pub use cassettes::SessionTaps;

/// What the client can do that a session's assembly needs to know.
#[derive(Debug, Clone, Copy)]
pub struct ClientAbilities {
    /// The client shows forms (`clarify`, an MCP prompt's missing arguments).
    pub forms: bool,
    /// What the engine hands to the client (files, terminals).
    pub delegation: Delegation,
    /// The client shows subagents as sessions of their own.
    pub subagents: bool,
}

/// A session assembled and running: what the wire room needs to serve it.
pub struct Assembled {
    pub handle: SessionHandle,
    /// The session's events, for its forwarder.
    pub events: mpsc::Receiver<EngineEvent>,
    /// The slash commands it starts with.
    pub commands: acp::SessionUpdate,
    /// Its slash commands as they are now (skills and MCP prompts change).
    pub commands_now: Arc<dyn Fn() -> acp::SessionUpdate + Send + Sync>,
    /// What it starts with to tell the user: configuration warnings (once per process), an
    /// unsaved store, unconfined commands, MCP servers that did not start.
    pub warnings: Vec<String>,
    /// Its MCP servers' sign-ins, to start once the client knows the session.
    pub sign_ins: SignIns,
    /// The models offered for switching.
    pub models: Vec<String>,
    pub images_allowed: bool,
    /// `enforced`, `off` or `unavailable`.
    pub sandbox: &'static str,
    /// How its commands start (sandbox, environment), and where.
    pub shell: Arc<talaria_tools::Shell>,
    pub cwd: std::path::PathBuf,
    /// Its folder's trust: what of the folder's own files it loaded.
    pub trust: talaria_engine::TrustAssessment,
}

/// A session's MCP sign-ins, started when the wire room has a way to show them.
pub struct SignIns(Arc<talaria_mcp::Hub>);

impl SignIns {
    /// Starts the sign-ins its servers need, shown through `prompt`.
    pub fn offer(self, prompt: Arc<dyn talaria_mcp::oauth::SignInPrompt>) {
        self.0.offer_sign_in(prompt);
    }
}

impl SessionRoom {
    /// A new session's row (written by the journal in the background) and its start: its id,
    /// claimed for this process before anyone can know it.
    pub fn create(
        &mut self,
        config: &Config,
        cwd: &std::path::Path,
        additional_directories: &[std::path::PathBuf],
    ) -> (String, talaria_engine::SessionStart) {
        let id = uuid::Uuid::new_v4().to_string();
        let journal = self.journal(config);
        journal.create(talaria_store::SessionMeta {
            id: id.clone(),
            cwd: cwd.display().to_string(),
            additional_directories: additional_directories
                .iter()
                .map(|d| d.display().to_string())
                .collect(),
            model: config.model.clone(),
            mode: config.mode.id().into(),
            created_at: talaria_store::now_ms(),
            updated_at: talaria_store::now_ms(),
            ..Default::default()
        });
        // Held (in order, after its create) before anyone can know its id.
        journal.claim(&id);
        let start = talaria_engine::SessionStart {
            history: None,
            journal: Some(talaria_engine::SessionJournal::new(journal, &id, 0)),
            title: None,
            commands: None,
            sizing: None,
            unsaved: None,
        };
        (id, start)
    }

    /// Assembles a session — its router, tools, commands, settings — and starts its actor.
    pub fn assemble(
        &mut self,
        launch: Launch,
        client: ClientAbilities,
    ) -> Result<Assembled, SessionError> {
        let Launch {
            id,
            cwd,
            ready,
            model,
            mode,
            start,
            taps,
        } = launch;
        let (router, tape, trajectory) = self.session_router(&ready, &id, &taps)?;
        let config = &ready.config;
        let model = model.unwrap_or_else(|| config.model.clone());
        let mode = mode.unwrap_or(config.mode);
        let models = offered_models(config, &model);
        let stores = skills::context(config, &cwd, &id, ready.shell.places(), &ready.trust);
        let mut tools = self.session_tools(client.forms);
        tools.tape = tape;
        let registry = tools.registry(config, &stores, &ready.mcp.0);
        let shape_tools = tools.shaper(config);
        let Ready {
            config,
            system_prompt,
            commands,
            mcp: (hub, mcp_warnings),
            client_mcp,
            roots,
            shell,
            checkpoints,
            window,
            trust,
            hooks,
        } = ready;
        let commands = skills::with_prompts(commands, &hub.prompt_commands());
        let (prompt, start) = system_prompt.assemble_for(&config, start);
        let sizing = window
            .map(|window| size_when_known(window, &config, system_prompt, tools, &stores, &hub));
        let start = talaria_engine::SessionStart {
            commands: Some(Arc::new(commands::SessionCommands {
                skills: stores.clone(),
                mcp: hub.clone(),
                images_allowed: config.settings.supports_images(),
                forms: client.forms,
                shape_tools,
            })),
            sizing,
            ..start
        };
        let own = SessionOwn {
            id: &id,
            cwd: &cwd,
            roots,
            model: &model,
            mode,
            prompt,
            hooks,
            client_mcp: &client_mcp,
            trajectory,
        };
        let settings = session_settings(&config, own, &stores, &shell, checkpoints, client);
        let (events_tx, events) = mpsc::channel(256);
        let handle =
            talaria_engine::spawn_session_with(settings, router, registry, events_tx, start);
        tracing::info!(session = %id, cwd = %cwd.display(), model = %model, "session started");
        let warnings = self.first_warnings(&config, &shell, mcp_warnings);
        Ok(Assembled {
            handle,
            events,
            commands,
            commands_now: commands_now(stores, hub.clone(), !config.agents.is_empty()),
            warnings,
            sign_ins: SignIns(hub),
            models,
            images_allowed: config.settings.supports_images(),
            sandbox: talaria_engine::sandbox_state(&shell),
            shell,
            cwd,
            trust,
        })
    }

    /// A session's router: the shared one, or, when it is recorded, replayed or its
    /// trajectory kept, one of its own (with its tools' tape when taped).
    fn session_router(
        &mut self,
        ready: &Ready,
        session: &str,
        taps: &SessionTaps,
    ) -> Result<SessionRouter, SessionError> {
        let trajectory = taps
            .trajectory
            .clone()
            .map(talaria_provider::trajectory::TrajectoryLog::writing_to);
        let config = &ready.config;
        let place = cassettes::Place {
            session,
            roots: &ready.roots,
            tmp: ready.shell.private_tmp(),
        };
        // `[record] dir` is read with the session's own configuration, not at start-up; the
        // command line's `--record`/`--replay` wins over it.
        let from_command_line = self.cassettes.active();
        let configured_dir = config.settings.record().dir();
        let configured = configured_dir.as_deref().filter(|_| !from_command_line);
        let record = taps.record.as_deref().or(configured);
        let taped = from_command_line || record.is_some() || taps.replay.is_some();
        if !taped && trajectory.is_none() {
            return Ok((self.router_for(config)?, None, None));
        }
        let (mut through, tools): (cassettes::Through, _) = if taped {
            let normaliser = cassettes::normaliser(config, &place);
            let session = self
                .cassettes
                .session(normaliser, record, taps.replay.as_deref())?;
            (session.through, Some(session.tools))
        } else {
            (Box::new(|provider| provider), None)
        };
        if let Some(log) = trajectory.clone() {
            let inner = through;
            through = Box::new(move |provider| {
                Arc::new(talaria_provider::trajectory::TrajectoryTap::new(
                    inner(provider),
                    log.clone(),
                ))
            });
        }
        let router = talaria_engine::build_router_through(config, &through)
            .map(Arc::new)
            .map_err(|e| SessionError::Internal(e.to_string()))?;
        Ok((router, tools, trajectory))
    }

    /// What every session's tools are made from; `clarify` when the client shows forms.
    fn session_tools(&self, clarify: bool) -> SessionTools {
        SessionTools {
            built_in: self.registry.clone(),
            clarify,
            store: self.store.clone(),
            tape: None,
        }
    }

    /// What a session starts with to tell the user: configuration warnings (once per
    /// process), an unsaved store, unconfined commands, MCP servers that did not start.
    fn first_warnings(
        &mut self,
        config: &Config,
        shell: &talaria_tools::Shell,
        mcp_warnings: Vec<String>,
    ) -> Vec<String> {
        let mut warnings = Vec::new();
        if !self.config_warned {
            self.config_warned = true;
            warnings.extend(config.warnings.iter().cloned());
        }
        if let Some(journal) = &self.store {
            warnings.extend(journal.take_notes());
        }
        warnings.extend(talaria_engine::sandbox_notice(shell));
        warnings.extend(mcp_warnings);
        warnings
    }
}

/// The session's commands as they are now (skills and MCP prompts change; `/agent` listed
/// when `agents` are configured).
fn commands_now(
    stores: Arc<talaria_skills::SkillsContext>,
    hub: Arc<talaria_mcp::Hub>,
    agents: bool,
) -> Arc<dyn Fn() -> acp::SessionUpdate + Send + Sync> {
    Arc::new(move || {
        skills::with_prompts(
            skills::commands(&stores.catalog(), agents),
            &hub.prompt_commands(),
        )
    })
}

/// A session's router, its tools' tape when taped, its trajectory when one is kept.
type SessionRouter = (
    Arc<ModelRouter>,
    Option<cassettes::ToolTape>,
    Option<talaria_provider::trajectory::TrajectoryLog>,
);

/// A session's settings: what is its own, the rest from the configuration.
fn session_settings(
    config: &Config,
    own: SessionOwn<'_>,
    stores: &Arc<talaria_skills::SkillsContext>,
    shell: &Arc<talaria_tools::Shell>,
    checkpoints: Option<Arc<talaria_engine::Checkpoints>>,
    client: ClientAbilities,
) -> SessionSettings {
    let SessionOwn {
        id,
        cwd,
        roots,
        model,
        mode,
        prompt,
        hooks,
        client_mcp,
        trajectory,
    } = own;
    SessionSettings {
        id: id.to_string(),
        cwd: cwd.to_path_buf(),
        model: model.to_string(),
        system_prompt: prompt.instructions,
        environment: prompt.environment,
        context_window: config.context_window,
        retry: config.retry,
        max_turn_requests: config.max_turn_requests,
        max_output_tokens: config.settings.max_output_tokens(),
        home: config.home.clone(),
        roots,
        mode,
        secrets: talaria_engine::SecretReads::for_home(
            &config.home,
            config.settings.ask_for_credential_reads(),
        ),
        delegation: Delegation {
            interception: talaria_engine::Interception {
                timeout: std::time::Duration::from_secs(
                    config.settings.tool_interception_timeout_secs().max(1),
                ),
                ..client.delegation.interception
            },
            ..client.delegation
        },
        titles: config.model_titles(),
        single_slot: config.single_slot(),
        nudges: config.settings.nudges(),
        verify_after_edits: config.verify_after_edits(),
        compression: config.compression,
        tokenizers: Arc::new(config.tokenizers.clone()),
        learning: config.learning,
        review: config
            .reviews()
            .then(|| skills::review_factory(stores.clone(), config.learning.stage_reviews)),
        subagents: subagent_slots(config),
        announce_subagents: client.subagents,
        images: config.settings.supports_images(),
        shell: shell.clone(),
        checkpoints,
        agents: crate::agents::ConfiguredAgents::of(&config.agents, client_mcp, trajectory),
        hooks,
    }
}

/// The session's window decisions, taken when its server answers (the session has started).
fn size_when_known(
    window: server_window::PendingWindow,
    config: &Config,
    prompt: PromptParts,
    tools: SessionTools,
    stores: &Arc<talaria_skills::SkillsContext>,
    hub: &Arc<talaria_mcp::Hub>,
) -> talaria_engine::PendingSizing {
    let (mut config, stores, hub) = (config.clone(), stores.clone(), hub.clone());
    talaria_engine::PendingSizing::new(async move {
        window.apply(&mut config).await;
        talaria_engine::WindowSizing {
            context_window: config.context_window,
            single_slot: config.single_slot(),
            subagents: subagent_slots(&config),
            system_prompt: prompt.assemble(&config).instructions,
            registry: tools.registry(&config, &stores, &hub),
        }
    })
}

/// Subagents through `delegate_task`, which is in the `delegation` toolset like any tool a
/// configuration can leave out.
fn subagent_slots(config: &Config) -> Option<usize> {
    (config.max_subagents > 0
        && config
            .toolsets
            .as_ref()
            .is_none_or(|sets| sets.iter().any(|s| s == "delegation")))
    .then_some(config.max_subagents)
}

/// What a session's tools are made from: the built-in ones, `clarify` when the client can
/// show questions, `session_search` when the store is open.
struct SessionTools {
    built_in: talaria_tools::Registry,
    clarify: bool,
    store: Option<talaria_engine::Journal>,
    /// A recorded or replayed session's tools go through its tape.
    tape: Option<cassettes::ToolTape>,
}

impl SessionTools {
    /// The session's tools: the built-in ones, skills and memory, its MCP servers', `clarify`
    /// and `session_search` when offered; narrowed to the configured toolsets.
    fn registry(
        &self,
        config: &Config,
        stores: &Arc<talaria_skills::SkillsContext>,
        hub: &Arc<talaria_mcp::Hub>,
    ) -> talaria_tools::Registry {
        let mut registry = self.built_in.clone();
        for tool in talaria_skills::tools::tools(stores.clone()) {
            registry.register(tool);
        }
        for server in &hub.servers {
            for tool in talaria_mcp::McpTool::of(server) {
                registry.register(tool);
            }
        }
        for tool in talaria_mcp::resources::tools(hub) {
            registry.register(tool);
        }
        if self.clarify {
            registry.register(Arc::new(talaria_tools::Clarify));
        }
        if let Some(journal) = &self.store {
            registry.register(Arc::new(talaria_engine::SessionSearch::new(
                journal.clone(),
            )));
        }
        (self.shaper(config))(registry)
    }

    /// What is done to the session's tools before they are offered: narrowed to the
    /// configured toolsets, and put through the tape of a recorded or replayed session.
    fn shaper(&self, config: &Config) -> commands::ToolShaper {
        let toolsets = config.toolsets.clone();
        let tape = self.tape.clone();
        Arc::new(move |registry: talaria_tools::Registry| {
            let registry = match &toolsets {
                Some(toolsets) => {
                    let names: Vec<&str> = toolsets.iter().map(String::as_str).collect();
                    registry.with_toolsets(&names)
                }
                None => registry,
            };
            match &tape {
                Some(tape) => tape.wrap(&registry),
                None => registry,
            }
        })
    }
}

/// The models a session offers: the configured ones, with its own first when it is not one.
fn offered_models(config: &Config, model: &str) -> Vec<String> {
    let mut models = config.models.clone();
    if !models.iter().any(|m| m == model) {
        models.insert(0, model.to_string());
    }
    models
}

/// Checks `session/new`-style paths: an absolute cwd and absolute additional directories;
/// returns the workspace roots.
fn check_roots(
    cwd: &std::path::Path,
    additional: &[std::path::PathBuf],
) -> Result<Vec<std::path::PathBuf>, SessionError> {
    if !cwd.is_absolute() {
        return Err(SessionError::Invalid(format!(
            "cwd must be an absolute path, got {:?}",
            cwd.display().to_string()
        )));
    }
    let mut roots = vec![cwd.to_path_buf()];
    for directory in additional {
        if !directory.is_absolute() {
            return Err(SessionError::Invalid(format!(
                "additionalDirectories must be absolute paths, got {:?}",
                directory.display().to_string()
            )));
        }
        roots.push(directory.clone());
    }
    Ok(roots)
}

/// Reads the configuration on the blocking pool (the runtime thread never waits on disk).
pub async fn load_config() -> Result<Config, talaria_engine::ConfigError> {
    tokio::task::spawn_blocking(Config::load)
        .await
        .unwrap_or_else(|e| {
            Err(talaria_engine::ConfigError::Invalid(format!(
                "reading the configuration failed: {e}"
            )))
        })
}

/// Where a session works and which MCP servers it brings (as its request said).
pub struct Place<'a> {
    pub cwd: &'a std::path::Path,
    pub additional_directories: &'a [std::path::PathBuf],
    pub mcp_servers: &'a [acp::McpServer],
}

/// What every session start needs, in order: the configuration and the prompt's parts
/// (off the runtime thread), credentials checked before anything is started, the local
/// server's window (which may narrow the toolsets), the prompt for those toolsets, then the
/// session's MCP servers. Runs off the dispatch loop: a slow server delays only its session.
pub async fn ready_session(context: StartContext, place: Place<'_>) -> Result<Ready, SessionError> {
    if context.logged_out {
        return Err(SessionError::LoggedOut);
    }
    let Place {
        cwd,
        additional_directories,
        mcp_servers,
    } = place;
    let roots = check_roots(cwd, additional_directories)?;
    let placed = place_session(cwd, &roots).await?;
    let trust = match &context.trust {
        Some(asked) => asked.settle(&placed.config.home, placed.trust).await,
        None => placed.trust,
    };
    let placed = Placed { trust, ..placed };
    let Prepared {
        mut config,
        system_prompt,
        commands,
        shell,
        checkpoints,
        trust,
        hooks,
    } = prepare_session(placed, cwd, &roots, &chrono_today()).await?;
    context.providers.apply(&mut config);
    if let Some(missing) = config.missing_credentials() {
        return Err(SessionError::NoCredentials {
            provider: config.provider.as_str().to_string(),
            missing,
        });
    }
    // The server's window, when it has answered; else the session is sized when it does.
    let window = context.windows.apply_if_known(&mut config);
    let mut mcp = mcp::connect(mcp_servers, &config, context.forms).await;
    // Told with the session's first notices: what its folder's trust left out.
    let (hooks, hooks_problem) = hooks;
    mcp.1.extend(
        super::trust::notice(&trust)
            .into_iter()
            .chain(hooks_problem),
    );
    Ok(Ready {
        client_mcp: mcp_servers.to_vec(),
        config,
        system_prompt,
        commands,
        mcp,
        roots,
        shell,
        checkpoints,
        window,
        trust,
        hooks,
    })
}

/// The disk work of `session/new` in one trip to the blocking pool: the cwd is a directory,
/// the configuration, and the system prompt (which reads the project's instruction files).
/// What starting a session needs, read off the runtime thread: the configuration, the system
/// prompt (with the skill index and the memory snapshot, frozen now) and the slash commands.
struct Prepared {
    config: Config,
    system_prompt: PromptParts,
    commands: acp::SessionUpdate,
    shell: Arc<talaria_tools::Shell>,
    checkpoints: Option<Arc<talaria_engine::Checkpoints>>,
    trust: talaria_engine::TrustAssessment,
    /// The user's hooks, and a trusted project's; what could not be read of the project's.
    hooks: (Arc<talaria_engine::Hooks>, Option<String>),
}

/// A session's place, read first (the trust question needs it): the configuration, how its
/// commands start, and its folder's trust.
struct Placed {
    config: Config,
    shell: Arc<talaria_tools::Shell>,
    trust: talaria_engine::TrustAssessment,
}

/// A session ready to launch.
pub struct Ready {
    pub config: Config,
    system_prompt: PromptParts,
    commands: acp::SessionUpdate,
    mcp: (Arc<talaria_mcp::Hub>, Vec<String>),
    /// The MCP servers the client gave the session (handed on to other agents' sessions).
    client_mcp: Vec<acp::McpServer>,
    /// The workspace roots: the cwd and the additional directories.
    roots: Vec<std::path::PathBuf>,
    /// How its commands start (the OS sandbox, the clean environment).
    shell: Arc<talaria_tools::Shell>,
    /// What its calls keep of the files they change.
    checkpoints: Option<Arc<talaria_engine::Checkpoints>>,
    /// The local server's window, when it had not answered yet.
    window: Option<server_window::PendingWindow>,
    /// Its folder's trust: what of the folder's own files it loaded.
    trust: talaria_engine::TrustAssessment,
    /// Its hooks: the user's, and a trusted project's.
    hooks: Arc<talaria_engine::Hooks>,
}

impl Ready {
    /// What the session's calls keep of the files they change.
    pub fn checkpoints(&self) -> Option<Arc<talaria_engine::Checkpoints>> {
        self.checkpoints.clone()
    }

    /// The session's instructions take the client's system prompt.
    pub fn with_client_prompt(mut self, client: Option<ClientPrompt>) -> Self {
        self.system_prompt.client = client;
        self
    }
}

/// The system prompt's parts, assembled once the session's toolsets are known.
struct PromptParts {
    base: talaria_engine::SessionPrompt,
    /// The skill index: only when the skills toolset is offered.
    skill_index: String,
    /// The frozen memory snapshot.
    memory: String,
    /// The client's own system prompt (`systemPrompt`), checked.
    client: Option<ClientPrompt>,
}

/// A session's prompt, assembled: the instructions, most stable first (what every session
/// shares, then what every session of this project shares), and the environment.
/// What a session has of its own (the rest of its settings comes from the configuration).
struct SessionOwn<'a> {
    id: &'a str,
    cwd: &'a std::path::Path,
    roots: Vec<std::path::PathBuf>,
    model: &'a str,
    mode: talaria_engine::Mode,
    prompt: AssembledPrompt,
    hooks: Arc<talaria_engine::Hooks>,
    /// The MCP servers its client gave it.
    client_mcp: &'a [acp::McpServer],
    /// Its trajectory, when one is kept (a batch task's).
    trajectory: Option<talaria_provider::trajectory::TrajectoryLog>,
}

struct AssembledPrompt {
    instructions: String,
    environment: String,
}

impl PromptParts {
    /// The prompt for `config`, and `start` with it: a stored record (a load, a resume, a
    /// fork) takes the client's prompt now; without one it keeps its own.
    fn assemble_for(
        &self,
        config: &Config,
        mut start: talaria_engine::SessionStart,
    ) -> (AssembledPrompt, talaria_engine::SessionStart) {
        let prompt = self.assemble(config);
        if self.client.is_some()
            && let Some(history) = start.history.as_mut()
        {
            history.set_system_prompt(prompt.instructions.clone());
        }
        (prompt, start)
    }

    fn assemble(&self, config: &Config) -> AssembledPrompt {
        let skills_offered = config
            .toolsets
            .as_ref()
            .is_none_or(|sets| sets.iter().any(|s| s == "skills"));
        let mut instructions = self.base.identity.clone();
        if skills_offered {
            instructions.push_str(&self.skill_index);
        }
        instructions.push_str(&self.memory);
        match &self.client {
            Some(client) => instructions = client.apply(&instructions, &self.base.project),
            None => instructions.push_str(&self.base.project),
        }
        AssembledPrompt {
            instructions,
            environment: self.base.environment.clone(),
        }
    }
}

/// The first trip to the blocking pool: the cwd is a directory, the configuration, the
/// sandboxed shell, and the folder's trust (which reads its instruction files as the
/// session's sandbox lets them be read).
async fn place_session(
    cwd: &std::path::Path,
    roots: &[std::path::PathBuf],
) -> Result<Placed, SessionError> {
    let (cwd, roots) = (cwd.to_path_buf(), roots.to_vec());
    let placed = tokio::task::spawn_blocking(move || {
        if !cwd.is_dir() {
            return Err(SessionError::Invalid(format!(
                "cwd {} is not an existing directory",
                cwd.display()
            )));
        }
        let config = Config::load()?;
        let shell = Arc::new(talaria_engine::sandboxed_shell(
            &config,
            &roots,
            talaria_engine::SandboxHelper::this_binary(),
        ));
        let trust = talaria_engine::assess_trust(&config.home, &cwd, shell.places());
        Ok(Placed {
            config,
            shell,
            trust,
        })
    })
    .await;
    placed.unwrap_or_else(|e| {
        Err(SessionError::Internal(format!(
            "preparing the session failed: {e}"
        )))
    })
}

/// The second trip: the prompt (with the instruction files the folder's trust lets in, the
/// skill index and the memory snapshot, frozen now), the slash commands and checkpoints.
async fn prepare_session(
    placed: Placed,
    cwd: &std::path::Path,
    roots: &[std::path::PathBuf],
    today: &str,
) -> Result<Prepared, SessionError> {
    let (cwd, roots, today) = (cwd.to_path_buf(), roots.to_vec(), today.to_string());
    let prepared = tokio::task::spawn_blocking(move || {
        let Placed {
            config,
            shell,
            mut trust,
        } = placed;
        let base = talaria_engine::session_prompt(
            &cwd,
            &config.model,
            &today,
            shell.places(),
            &trust.gate(),
        );
        // A file that changed between the question and the read is left out too.
        for name in &base.left_out {
            if let Some(file) = trust.instructions.iter().find(|f| f.name == name)
                && !trust.changed.contains(&file.name)
            {
                trust.changed.push(file.name);
            }
        }
        let stores = skills::context(&config, &cwd, "", shell.places(), &trust);
        // One scan of the skill folders serves the prompt's index and the slash commands.
        let catalog = stores.catalog();
        let (skill_index, memory) = skills::prompt_additions(&stores, &catalog);
        let system_prompt = PromptParts {
            base,
            skill_index,
            memory,
            client: None,
        };
        let commands = skills::commands(&catalog, !config.agents.is_empty());
        let checkpoints = Some(talaria_engine::checkpoints_for(
            &config.home,
            &roots,
            shell.places(),
        ));
        let hooks = session_hooks(&config, &trust);
        Ok(Prepared {
            config,
            system_prompt,
            commands,
            shell,
            checkpoints,
            trust,
            hooks,
        })
    })
    .await;
    prepared.unwrap_or_else(|e| {
        Err(SessionError::Internal(format!(
            "preparing the session failed: {e}"
        )))
    })
}

/// The user's hooks, then a trusted project's (`.talaria/config.toml` as its trust accepted
/// it, never read again); a project file that cannot be parsed adds none and is told.
fn session_hooks(
    config: &Config,
    trust: &talaria_engine::TrustAssessment,
) -> (Arc<talaria_engine::Hooks>, Option<String>) {
    if !trust.loads_project() {
        // What the user's hooks run may be the folder's own code: inside the sandbox.
        return (Arc::new((*config.hooks).clone().confined()), None);
    }
    let Some(file) = trust.project_config() else {
        return (config.hooks.clone(), None);
    };
    match talaria_engine::project_hooks_of(&file.text, &file.path) {
        Ok(project) if project.is_empty() => (config.hooks.clone(), None),
        Ok(project) => (Arc::new((*config.hooks).clone().and(project)), None),
        Err(e) => (
            config.hooks.clone(),
            Some(format!("The project's hooks were not loaded: {e}")),
        ),
    }
}

fn chrono_today() -> String {
    chrono::Local::now().format("%Y-%m-%d (%A)").to_string()
}
