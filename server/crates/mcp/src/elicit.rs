//! An MCP server's own questions to the user (`elicitation/create`): forwarded to whoever
//! asks the user on behalf of the tool call in progress, declined when no call of the server
//! is running or the client cannot show forms. Its notifications of changed lists and
//! updated resources are noted for the hub.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability, Implementation,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData, RoleClient};
use talaria_tools::{FormAnswer, UserQuestions};
use tokio_util::sync::CancellationToken;

/// Who asks the user while a call runs, and the call's cancellation.
type Asker = (u64, Arc<dyn UserQuestions>, CancellationToken);

/// The askers of a server's calls in progress (the latest one answers).
#[derive(Default)]
pub struct Askers {
    next: AtomicU64,
    active: Mutex<Vec<Asker>>,
}

/// Removes its asker when the call ends.
pub struct AskerGuard<'a> {
    askers: &'a Askers,
    id: u64,
}

impl Drop for AskerGuard<'_> {
    fn drop(&mut self) {
        let mut active = talaria_util::lock(&self.askers.active);
        active.retain(|(id, _, _)| *id != self.id);
    }
}

impl Askers {
    /// Makes `questions` answer the server's questions until the guard drops.
    pub fn enter(
        &self,
        questions: Arc<dyn UserQuestions>,
        cancel: CancellationToken,
    ) -> AskerGuard<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        talaria_util::lock(&self.active).push((id, questions, cancel));
        AskerGuard { askers: self, id }
    }

    fn current(&self) -> Option<(Arc<dyn UserQuestions>, CancellationToken)> {
        talaria_util::lock(&self.active)
            .last()
            .map(|(_, questions, cancel)| (questions.clone(), cancel.clone()))
    }
}

/// The client side of one server connection.
#[derive(Clone)]
pub struct Handler {
    pub server: String,
    /// The client can show forms: elicitation is advertised and forwarded.
    pub forms: bool,
    pub askers: Arc<Askers>,
    /// What the server's notifications said (lists changed, resources updated).
    pub notices: Arc<crate::catalog::Notices>,
}

fn answer(action: ElicitationAction) -> ElicitResult {
    ElicitResult::new(action)
}

impl ClientHandler for Handler {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            tracing::info!(server = %self.server, "declined a URL elicitation (not supported)");
            return Ok(answer(ElicitationAction::Decline));
        };
        let Some((questions, cancel)) = self.askers.current().filter(|_| self.forms) else {
            tracing::info!(server = %self.server, "declined a question asked outside a tool call");
            return Ok(answer(ElicitationAction::Decline));
        };
        let schema = serde_json::to_value(&requested_schema)
            .map_err(|e| ErrorData::internal_error(format!("unreadable schema: {e}"), None))?;
        let message = format!("The MCP server {} asks: {message}", self.server);
        match questions.ask_form(&message, &schema, &cancel).await {
            Ok(FormAnswer::Accepted(content)) => {
                Ok(answer(ElicitationAction::Accept).with_content(content))
            }
            Ok(FormAnswer::Declined) => Ok(answer(ElicitationAction::Decline)),
            Ok(FormAnswer::Cancelled) => Ok(answer(ElicitationAction::Cancel)),
            Err(why) => {
                tracing::warn!(server = %self.server, "the question could not be asked: {why}");
                Ok(answer(ElicitationAction::Cancel))
            }
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.notices.resource_updated(&params.uri);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notices.list_changed();
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notices.tools_changed();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notices.list_changed();
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.forms {
            let mut elicitation = ElicitationCapability::new();
            elicitation.form = Some(FormElicitationCapability::new());
            capabilities.elicitation = Some(elicitation);
        }
        let mut config = ClientConfig::default();
        config.capabilities = capabilities;
        config.client_info = Implementation::new("talaria", env!("CARGO_PKG_VERSION"));
        config
    }
}
