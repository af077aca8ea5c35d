//! End-to-end tests: the real `talaria` binary over stdio against the scripted mock LLM.
//! One test binary (faster to build); one module per behaviour.

// A test crate through and through: its helpers panic on a failed set-up step (that is a
// failed test), like the tests themselves (`expect_used` is for production code).
#![allow(clippy::expect_used)]
// Each test reads top to bottom as the scenario it plays (`too_many_lines` is for
// production code, where a long function hides steps).
#![allow(clippy::too_many_lines)]

mod support;

mod approvals;
mod auth;
mod bad_setups;
mod batch;
mod batch_queue;
mod bounded_queues;
mod cancel;
mod cassettes;
mod claim_races;
mod client_providers;
mod compaction;
mod dead_ends;
mod delegation;
mod deleted_sessions;
mod demo;
mod doctor;
mod durability;
mod errors;
mod external_agents;
mod faults;
mod file_tool_doors;
mod fork_kills;
mod framing;
mod fresh_home;
mod full_disk_spool;
mod hooks;
mod interception;
mod learning;
mod lifecycle;
mod local_servers;
mod mcp;
mod mcp_oauth;
mod mcp_offers;
mod message_ids;
mod piped_input;
mod plan_mode;
mod plans;
mod private_files;
mod prompt_size;
mod providers;
mod questions;
mod quotas;
mod record;
mod red_five;
mod red_four;
mod red_takeover;
mod red_takeover_two;
mod red_three;
mod red_trust;
mod red_two;
mod replayed;
mod replayed_turns;
mod rewind;
mod rewind_links;
mod rewind_unsaved;
mod safety;
mod salvage_crashes;
mod sandbox;
mod sandbox_aliases;
mod sandbox_datagrams;
mod sandbox_doors;
mod sandbox_endpoints;
mod sandbox_helper;
mod sandbox_homes;
mod sandbox_let_out;
mod sandbox_overlays;
mod sandbox_races;
mod sandbox_replaced;
mod sandbox_sockets;
mod sandbox_ssh;
mod sandbox_threads;
mod sandbox_views;
mod serve;
mod serve_attach;
mod serve_chat_attach;
mod serve_editor_files;
mod serve_laggards;
mod serve_offline;
mod serve_resume;
mod serve_start;
mod serve_support;
mod serve_takeover;
mod sessions;
mod setup;
mod shared_sessions;
mod shutdown;
mod slash_commands;
mod small_windows;
mod spool;
mod spool_adoption;
mod spool_siblings;
mod steering;
mod steering_kills;
mod store_stalls;
mod streaming;
mod stumbles;
mod subagents;
mod system_prompt;
mod terminal_answers;
mod terminal_client;
mod terminal_pty;
mod thought_level;
mod tools;
mod waiting_turns;
mod workspace_reads;
mod workspace_trust;
