//! `talaria-batch`: batch runs for harnesses. A JSONL dataset of tasks ([`task`]) runs as
//! sessions of one ACP agent ([`agent::AgentLink`]: the runner is a client, not a second
//! engine), `--parallel N` at a time, each in a workspace of its own ([`workspace`]) with
//! its `setup` and `check` run in the session's sandbox (`_talaria/run_command`); out come
//! `results.jsonl`, trajectories and `summary.md` ([`outputs`]), resumable after a kill;
//! paced before the provider's rate limits ([`pacing`]).
//! With the `postgres` feature, [`queue`] spreads a dataset over workers on many machines.
//!
//! `talaria batch` runs it against the agent in its own process; a Rust harness links this
//! crate and hands it any agent's streams (`talaria_harness::batch` starts `talaria acp`).

pub mod agent;
pub mod choice;
pub mod outputs;
pub mod pacing;
pub mod progress;
#[cfg(feature = "postgres")]
pub mod queue;
pub mod run;
pub mod sharegpt;
pub mod task;
pub mod workspace;

pub use agent::{AgentError, AgentLink, Approve};
pub use outputs::{OutputDir, TaskResult, TrajectoryFormat, Verdict};
pub use run::{
    RunError, RunOptions, TaskOutcome, TaskPlaces, run_dataset, run_task, run_task_paced,
};
pub use task::{Dataset, Problem, PromptInput, Task, TaskAt};
