//! What a server offers besides tools: its resources, resource templates and prompts, listed
//! (every page) when it connects and again after it says a list changed; and the resources
//! it says were updated since they were read.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::RoleClient;
use rmcp::model::Prompt;
use rmcp::service::Peer;
use serde_json::Value;

/// What the server said it offers when it connected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offers {
    pub resources: bool,
    pub subscribe: bool,
    pub prompts: bool,
}

impl Offers {
    /// From the server's `initialize` answer.
    pub fn of(peer: &Peer<RoleClient>) -> Self {
        let Some(info) = peer.peer_info() else {
            return Self::default();
        };
        let resources = info.capabilities.resources.as_ref();
        Self {
            resources: resources.is_some(),
            subscribe: resources.and_then(|r| r.subscribe).unwrap_or(false),
            prompts: info.capabilities.prompts.is_some(),
        }
    }
}

/// A server's lists, as last fetched. Resources and templates are kept as the server sent
/// them (`uri`, `name`, `description`, `mimeType`, `size`; `uriTemplate` for templates).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub resources: Vec<Value>,
    pub templates: Vec<Value>,
    pub prompts: Vec<Prompt>,
}

impl Catalog {
    /// Every page of every list the server offers. A list that fails is left empty and
    /// logged: the server's tools still work.
    pub async fn fetch(server: &str, peer: &Peer<RoleClient>, offers: Offers) -> Self {
        let mut catalog = Self::default();
        if offers.resources {
            match peer.list_all_resources().await {
                Ok(list) => catalog.resources = values(&list),
                Err(e) => tracing::warn!(server, "listing its resources failed: {e}"),
            }
            // Templates are optional: a server without them answers with an error.
            if let Ok(list) = peer.list_all_resource_templates().await {
                catalog.templates = values(&list);
            }
        }
        if offers.prompts {
            match peer.list_all_prompts().await {
                Ok(list) => catalog.prompts = list,
                Err(e) => tracing::warn!(server, "listing its prompts failed: {e}"),
            }
        }
        catalog
    }

    /// Whether `uri` is one of the server's: a listed resource, or one its templates make.
    pub fn claims(&self, uri: &str) -> bool {
        self.resources.iter().any(|r| r["uri"] == uri)
            || self.templates.iter().any(|t| {
                t["uriTemplate"]
                    .as_str()
                    .is_some_and(|template| template_matches(template, uri))
            })
    }
}

fn values<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .filter_map(|item| serde_json::to_value(item).ok())
        .collect()
}

/// Whether `uri` could come from the RFC 6570 `template`: its literal parts appear in order,
/// the first at the start and the last at the end.
pub fn template_matches(template: &str, uri: &str) -> bool {
    let mut literals = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        literals.push(&rest[..open]);
        rest = rest[open..]
            .find('}')
            .map_or("", |close| &rest[open + close + 1..]);
    }
    literals.push(rest);
    let (first, last) = (literals[0], literals[literals.len() - 1]);
    if literals.len() == 1 {
        return uri == first;
    }
    let Some(mut remaining) = uri.strip_prefix(first) else {
        return false;
    };
    for literal in &literals[1..literals.len() - 1] {
        match remaining.find(literal) {
            Some(at) => remaining = &remaining[at + literal.len()..],
            None => return false,
        }
    }
    remaining.ends_with(last) && !remaining.is_empty()
}

/// What a server's notifications said, shared with its connection's handler.
#[derive(Default, Debug)]
pub struct Notices {
    /// A list changed: the catalog is fetched again before it is next used.
    pub lists_changed: AtomicBool,
    /// The tool list changed: it is fetched again, and the session's tools with it.
    pub tools_changed: AtomicBool,
    /// Resources read and subscribed to.
    subscribed: Mutex<BTreeSet<String>>,
    /// Subscribed resources the server says changed since the last look.
    updated: Mutex<BTreeSet<String>>,
}

impl Notices {
    pub fn list_changed(&self) {
        self.lists_changed.store(true, Ordering::SeqCst);
    }

    /// Whether the lists must be fetched again (and from now on, not).
    pub fn take_list_changed(&self) -> bool {
        self.lists_changed.swap(false, Ordering::SeqCst)
    }

    pub fn tools_changed(&self) {
        self.tools_changed.store(true, Ordering::SeqCst);
    }

    /// Whether the tools must be fetched again (and from now on, not).
    pub fn take_tools_changed(&self) -> bool {
        self.tools_changed.swap(false, Ordering::SeqCst)
    }

    /// Notes a subscription; `false` when there already was one.
    pub fn subscribed(&self, uri: &str) -> bool {
        talaria_util::lock(&self.subscribed).insert(uri.to_string())
    }

    /// A `notifications/resources/updated` (kept only for resources subscribed to).
    pub fn resource_updated(&self, uri: &str) {
        if talaria_util::lock(&self.subscribed).contains(uri) {
            talaria_util::lock(&self.updated).insert(uri.to_string());
        }
    }

    /// The updated resources since the last call.
    pub fn take_updated(&self) -> Vec<String> {
        std::mem::take(&mut *talaria_util::lock(&self.updated))
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_the_uris_they_make_and_no_others() {
        let template = "demo://resource/dynamic/text/{resourceId}";
        assert!(template_matches(template, "demo://resource/dynamic/text/7"));
        assert!(!template_matches(template, "demo://resource/dynamic/text/"));
        assert!(!template_matches(
            template,
            "demo://resource/dynamic/blob/7"
        ));
        assert!(template_matches(
            "db://{table}/rows/{id}.json",
            "db://users/rows/3.json"
        ));
        assert!(!template_matches(
            "db://{table}/rows/{id}.json",
            "db://users/cols/3.json"
        ));
        assert!(template_matches("file:///fixed.txt", "file:///fixed.txt"));
        assert!(!template_matches(
            "file:///fixed.txt",
            "file:///fixed.txt.bak"
        ));
    }

    #[test]
    fn only_subscribed_updates_are_kept_and_each_is_told_once() {
        let notices = Notices::default();
        notices.resource_updated("a://x");
        assert!(notices.take_updated().is_empty());
        assert!(notices.subscribed("a://x"));
        assert!(!notices.subscribed("a://x"));
        notices.resource_updated("a://x");
        notices.resource_updated("a://x");
        assert_eq!(notices.take_updated(), ["a://x"]);
        assert!(notices.take_updated().is_empty());
    }
}
