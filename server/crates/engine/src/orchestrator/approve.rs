//! Deciding a call: the repeated-failure guardrail, a whitelist's refusal, the policy's
//! verdict, the user's answer (an "always" remembered through the session's actor), and
//! whether a call the sandbox refused may run once outside it.

use super::{
    CANCELLED_RESULT, CallFacts, ClientAnswer, ClientAsk, CommandWall, MAX_IDENTICAL_FAILURES,
    Mode, Orchestrator, PermissionAnswer, PermissionChoice, PermissionRequest, Prepared,
    REPEATED_FAILURE, Sandboxing, Scope, ToolOutcome, Verdict, approval, failure_key,
};
use std::path::PathBuf;

fn declined(name: &str) -> String {
    format!(
        "The user declined this {name} call. Do not retry the same call; continue without it or ask the user how to proceed."
    )
}

impl Orchestrator<'_> {
    /// Asks the client's permission question; it follows the call's card in the one event
    /// stream, so it cannot overtake it.
    async fn ask_permission(&self, request: PermissionRequest) -> Option<ClientAnswer> {
        let scope = crate::hooks::HookScope {
            hooks: self.hooks.hooks,
            session_id: self.hooks.session_id,
            cwd: &self.ctx.cwd,
            shell: &self.ctx.shell,
        };
        let message = format!("Talaria needs your permission: {}", request.title);
        scope
            .run(
                crate::hooks::HookEvent::Notification,
                serde_json::json!({"message": message}),
                self.events,
            )
            .await;
        crate::client_access::ask(
            self.events,
            ClientAsk::Permission(request),
            self.cancel.clone(),
            None,
        )
        .await
    }

    /// The same call (tool and arguments) already failed too often in this turn.
    pub(super) fn is_repeated(&self, call: &Prepared) -> bool {
        self.failures
            .get(&failure_key(&call.name, &call.raw_input))
            .is_some_and(|n| *n >= MAX_IDENTICAL_FAILURES)
    }

    /// Decides a call, with what its hooks decided (an allow spares a question an "always"
    /// could spare, an ask asks where the policy would not; neither changes a refusal); `Err`
    /// carries the result of a call that must not run.
    pub(super) async fn approve(
        &self,
        call: &Prepared,
        stance: super::hooked::HookStance,
    ) -> Result<(), ToolOutcome> {
        if self.is_repeated(call) {
            return Err(ToolOutcome::failed(REPEATED_FAILURE));
        }
        // Refused before anyone is asked: a whitelist is not the user's call to make.
        if let Some(why) = self.registry.refusal(&call.name) {
            return Err(ToolOutcome::failed(why));
        }
        let Ok(_) = &call.args else { return Ok(()) };
        if self.registry.definition(&call.name).is_none() {
            return Ok(());
        }
        let facts = self.facts(call).await;
        let mode = self.approval.mode();
        let wall = self.wall();
        let verdict = self.approval.with_rules(|rules| {
            approval::decide(mode, &facts, rules, self.roots, self.secrets, wall)
        });
        match verdict {
            Verdict::Allow if stance.ask => {
                let reason = Some("a hook asks for your answer".to_string());
                self.ask(call, &facts, reason, false).await
            }
            Verdict::Allow => Ok(()),
            Verdict::Deny(why) => Err(ToolOutcome::failed(why)),
            Verdict::Ask {
                reason,
                always_possible,
            } => {
                // Nobody is asked about a call that cannot succeed (an edit whose old text
                // is not in the file): it fails at once, saying why. Checked now, after the
                // batch's earlier groups ran, so a file made by one of them counts.
                if let Some(failed) = self.registry.check(&call.name, &call.args, &self.ctx).await {
                    return Err(failed);
                }
                // Nor about an edit that changes nothing (the content the file holds), where
                // reading the file tells the model nothing it may not read unasked.
                // A hook's allow counts as a remembered "always": what asks in every mode
                // (credentials, a command that cannot be analysed) still asks.
                if self.changes_nothing(call, &facts).await || (stance.allow && always_possible) {
                    return Ok(());
                }
                self.ask(call, &facts, reason, always_possible).await
            }
        }
    }

    /// Whether an edit would leave its files as they are, judged only where the file may be
    /// read without asking (inside the workspace, no secret, one name): a write elsewhere is
    /// asked about whatever it holds, so the answer is no oracle of a secret's content.
    async fn changes_nothing(&self, call: &Prepared, facts: &CallFacts) -> bool {
        let readable_unasked = !facts.writes.is_empty()
            && facts.linked.is_empty()
            && facts.writes.iter().all(|path| {
                approval::paths::inside_any(path, self.roots)
                    && self.secrets.paths.classify(path) == talaria_tools::PathSecrecy::Normal
            });
        readable_unasked
            && self
                .registry
                .changes_nothing(&call.name, &call.args, &self.ctx)
                .await
    }

    /// Asks the user about a call, and carries out the answer (an "always" is remembered
    /// through the session's actor before the next decision).
    pub(super) async fn ask(
        &self,
        call: &Prepared,
        facts: &CallFacts,
        reason: Option<String>,
        always_possible: bool,
    ) -> Result<(), ToolOutcome> {
        let mut choices = vec![PermissionChoice::AllowOnce];
        if always_possible {
            choices.push(PermissionChoice::AllowAlways);
            if facts.server.is_some() {
                choices.push(PermissionChoice::AllowAlwaysServer);
            }
        }
        choices.push(PermissionChoice::RejectOnce);
        if always_possible {
            choices.push(PermissionChoice::RejectAlways);
        }
        let request = PermissionRequest {
            tool_call_id: call.id.clone(),
            title: call.description.title.clone(),
            reason,
            choices,
            server: facts.server.clone(),
        };
        let asked = self.ask_permission(request).await;
        let answer = match asked {
            Some(ClientAnswer::Permission(answer)) => answer,
            Some(_) => PermissionAnswer::Failed("the client gave an unrelated answer".into()),
            None => PermissionAnswer::Failed("the client did not answer".into()),
        };
        match answer {
            PermissionAnswer::Chosen(
                PermissionChoice::AllowOnce | PermissionChoice::RunUnsandboxedOnce,
            ) => Ok(()),
            PermissionAnswer::Chosen(PermissionChoice::AllowAlways) => {
                self.approval
                    .remember(approval::scopes_of(facts), true)
                    .await;
                Ok(())
            }
            PermissionAnswer::Chosen(PermissionChoice::AllowAlwaysServer) => {
                let Some(server) = facts.server.clone() else {
                    return Ok(());
                };
                self.approval
                    .remember(vec![Scope::Server(server)], true)
                    .await;
                Ok(())
            }
            // A plan's choices were not offered for a call: whatever they are, not a yes.
            PermissionAnswer::Chosen(
                PermissionChoice::RejectOnce
                | PermissionChoice::ImplementAsking
                | PermissionChoice::ImplementAcceptingEdits
                | PermissionChoice::KeepPlanning,
            ) => Err(ToolOutcome::failed(declined(&call.name))),
            PermissionAnswer::Chosen(PermissionChoice::RejectAlways) => {
                self.approval
                    .remember(approval::scopes_of(facts), false)
                    .await;
                Err(ToolOutcome::failed(declined(&call.name)))
            }
            PermissionAnswer::Cancelled => {
                self.cancel.cancel();
                Err(ToolOutcome::failed(CANCELLED_RESULT))
            }
            PermissionAnswer::Failed(why) => Err(ToolOutcome::failed(format!(
                "Permission could not be asked ({why}); the call did not run."
            ))),
        }
    }

    /// What stands between this session's commands and the machine.
    pub(super) fn wall(&self) -> CommandWall {
        match self.ctx.shell.sandboxing() {
            Sandboxing::Enforced(_) => CommandWall::Sandbox,
            Sandboxing::Off => CommandWall::Off,
            Sandboxing::Unavailable(_) => CommandWall::Missing,
        }
    }

    /// Whether an edit of `writes` touches a credential or Talaria's own files (as named or
    /// behind a link): its current text is never previewed.
    pub(super) async fn touches_protected(&self, writes: &[PathBuf]) -> bool {
        let grounded = crate::grounding::ground(writes.to_vec()).await;
        grounded.paths.iter().any(|path| {
            self.secrets.paths.classify(path) == talaria_tools::PathSecrecy::Credential
                || self.secrets.paths.in_agent_home(path)
        })
    }

    /// What the policy needs to know about a call: the command classified where it starts;
    /// its named paths as reads; every path as named and as the real file behind it.
    pub(super) async fn facts(&self, call: &Prepared) -> CallFacts {
        let command = call.description.command.as_deref().map(|text| {
            talaria_tools::classify_in(
                text,
                &talaria_tools::ShellEnv::from_process()
                    .starting(call.description.command_start.clone()),
            )
        });
        let mut reads = call.description.reads.clone();
        if let Some(class) = &command {
            let workdir = call
                .description
                .locations
                .first()
                .map_or(self.ctx.cwd.as_path(), |l| l.path.as_path());
            reads.extend(
                class
                    .paths
                    .iter()
                    .map(|p| talaria_tools::resolve_in(workdir, p)),
            );
        }
        let reads = crate::grounding::ground(reads).await;
        let writes = crate::grounding::ground(call.description.writes.clone()).await;
        let mut linked = reads.linked;
        linked.extend(writes.linked);
        CallFacts {
            tool: call.name.clone(),
            need: call.need,
            writes: writes.paths,
            reads: reads.paths,
            command,
            read_only: call.description.read_only,
            may_change: call.effects.may_change_anything(),
            server: self
                .registry
                .definition(&call.name)
                .and_then(|d| d.toolset.strip_prefix(talaria_tools::MCP_TOOLSET_PREFIX))
                .map(str::to_string),
            linked,
            own_store: call.description.own_store,
        }
    }

    /// Whether the session's mode lets the user take a command out of the sandbox.
    pub(super) fn may_escalate(&self) -> bool {
        !self.cancel.is_cancelled() && matches!(self.approval.mode(), Mode::Ask | Mode::AcceptEdits)
    }

    /// Asks, on the call's own card, whether to run it once outside the sandbox.
    pub(super) async fn escalation_agreed(&self, call: &Prepared, what: &str) -> bool {
        let request = PermissionRequest {
            tool_call_id: call.id.clone(),
            title: call.description.title.clone(),
            reason: Some(format!(
                "the OS sandbox refused {what}. Run this one command again outside the \
                 sandbox's walls (writes anywhere you may write, the network on; your keys, \
                 credentials and Talaria's settings stay hidden)?"
            )),
            choices: vec![
                PermissionChoice::RunUnsandboxedOnce,
                PermissionChoice::RejectOnce,
            ],
            server: None,
        };
        let asked = self.ask_permission(request).await;
        match asked {
            Some(ClientAnswer::Permission(PermissionAnswer::Chosen(
                PermissionChoice::RunUnsandboxedOnce,
            ))) => true,
            Some(ClientAnswer::Permission(PermissionAnswer::Cancelled)) => {
                self.cancel.cancel();
                false
            }
            _ => false,
        }
    }
}
