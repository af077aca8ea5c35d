//! Which models a session can use: the primary (switchable per session) and the fallback
//! chain, each with its provider and credential pool; and the price table for costs.

use std::collections::HashMap;
use std::sync::Arc;

use talaria_provider::{ChatProvider, Usage};

use crate::credentials::CredentialPool;

/// The default time limit of a side task, seconds.
pub const DEFAULT_SIDE_TASK_TIMEOUT_SECS: u64 = 120;

/// How long waiting on a model may take, and the output cap it gets by default.
#[derive(Debug, Clone)]
pub struct CallLimits {
    /// The longest wait for the response to start.
    pub first_byte_timeout: std::time::Duration,
    /// A notice that the model is still working after this much silence.
    pub still_working_after: std::time::Duration,
    /// `max_tokens` when none is configured (servers that would otherwise run unbounded).
    pub default_max_tokens: Option<u32>,
    /// For a server on this machine without a configured cap: its measured speed, which sets
    /// the cap so one answer stays within a few minutes.
    pub pace: Option<Arc<crate::pace::Pace>>,
}

impl CallLimits {
    /// The output cap when none is configured: from the measured speed, else the default.
    pub fn default_cap(&self) -> Option<u32> {
        match &self.pace {
            Some(pace) => Some(pace.cap()),
            None => self.default_max_tokens,
        }
    }
}

impl Default for CallLimits {
    fn default() -> Self {
        Self {
            first_byte_timeout: std::time::Duration::from_secs(300),
            still_working_after: std::time::Duration::from_secs(10),
            default_max_tokens: None,
            pace: None,
        }
    }
}

/// One model to call: provider, model name, keys and limits.
#[derive(Clone)]
pub struct ModelTarget {
    pub provider: Arc<dyn ChatProvider>,
    pub model: String,
    pub pool: Arc<CredentialPool>,
    pub limits: CallLimits,
}

impl std::fmt::Debug for ModelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.provider.name(), self.model)
    }
}

impl ModelTarget {
    /// `provider:model`, for messages.
    pub fn label(&self) -> String {
        format!("{} ({})", self.model, self.provider.name())
    }
}

/// USD per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Deserialize)]
pub struct Price {
    #[serde(default)]
    pub input: f64,
    #[serde(default)]
    pub output: f64,
    #[serde(default)]
    pub cached_input: Option<f64>,
    #[serde(default)]
    pub cache_write: Option<f64>,
}

impl Price {
    /// The cost of one call's usage. Cached reads and cache writes are priced separately when
    /// the table says how; otherwise as plain input.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_input_tokens as f64;
        let written = usage.cache_write_tokens as f64;
        let plain = (usage.input_tokens as f64 - cached - written).max(0.0);
        let per = 1_000_000.0;
        plain * self.input / per
            + cached * self.cached_input.unwrap_or(self.input) / per
            + written * self.cache_write.unwrap_or(self.input) / per
            + usage.output_tokens as f64 * self.output / per
    }
}

/// The models of a session.
#[derive(Clone)]
pub struct ModelRouter {
    primary_provider: Arc<dyn ChatProvider>,
    primary_pool: Arc<CredentialPool>,
    primary_limits: CallLimits,
    fallbacks: Vec<ModelTarget>,
    /// Side-task models by task name, with their time limits.
    auxiliary: HashMap<String, (ModelTarget, std::time::Duration)>,
    prices: HashMap<String, Price>,
}

impl std::fmt::Debug for ModelRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRouter")
            .field("primary", &self.primary_provider.name())
            .field("fallbacks", &self.fallbacks)
            .finish_non_exhaustive()
    }
}

impl ModelRouter {
    pub fn new(
        primary_provider: Arc<dyn ChatProvider>,
        primary_pool: Arc<CredentialPool>,
        fallbacks: Vec<ModelTarget>,
        prices: HashMap<String, Price>,
    ) -> Self {
        Self {
            primary_provider,
            primary_pool,
            primary_limits: CallLimits::default(),
            fallbacks,
            auxiliary: HashMap::new(),
            prices,
        }
    }

    /// The primary model's limits.
    pub fn with_primary_limits(mut self, limits: CallLimits) -> Self {
        self.primary_limits = limits;
        self
    }

    /// Routes side tasks of kind `task` to `target` first, within `timeout`.
    pub fn with_auxiliary(
        mut self,
        task: &str,
        target: ModelTarget,
        timeout: std::time::Duration,
    ) -> Self {
        self.auxiliary.insert(task.to_string(), (target, timeout));
        self
    }

    /// The chain for a side task of kind `task`: its auxiliary model when one is configured,
    /// then the session's own chain; and its time limit.
    pub fn side_chain(
        &self,
        task: &str,
        session_model: &str,
    ) -> (Vec<ModelTarget>, std::time::Duration) {
        let mut chain = Vec::new();
        let mut timeout = std::time::Duration::from_secs(DEFAULT_SIDE_TASK_TIMEOUT_SECS);
        if let Some((target, limit)) = self.auxiliary.get(task) {
            chain.push(target.clone());
            timeout = *limit;
        }
        chain.extend(self.chain(session_model));
        (chain, timeout)
    }

    /// A router with one provider, one empty-key pool and no fallbacks (tests, simple set-ups).
    pub fn single(provider: Arc<dyn ChatProvider>) -> Self {
        let pool = Arc::new(CredentialPool::new(
            Vec::new(),
            crate::credentials::KeyStrategy::FillFirst,
            std::time::Duration::from_secs(60),
        ));
        Self::new(provider, pool, Vec::new(), HashMap::new())
    }

    /// The chain for one turn: the session's current model first, then the fallbacks.
    pub fn chain(&self, model: &str) -> Vec<ModelTarget> {
        let mut chain = vec![ModelTarget {
            provider: self.primary_provider.clone(),
            model: model.to_string(),
            pool: self.primary_pool.clone(),
            limits: self.primary_limits.clone(),
        }];
        chain.extend(self.fallbacks.iter().cloned());
        chain
    }

    /// The price of a model, if the table has it.
    pub fn price(&self, model: &str) -> Option<Price> {
        self.prices.get(model).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_price_cache_reads_and_writes() {
        let price = Price {
            input: 3.0,
            output: 15.0,
            cached_input: Some(0.3),
            cache_write: Some(3.75),
        };
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cached_input_tokens: 500_000,
            cache_write_tokens: 100_000,
            reasoning_tokens: 0,
        };
        let cost = price.cost(&usage);
        // 400k plain × 3 + 500k × 0.3 + 100k × 3.75 + 100k × 15, per million.
        assert!((cost - (1.2 + 0.15 + 0.375 + 1.5)).abs() < 1e-9, "{cost}");
    }
}
