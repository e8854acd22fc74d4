//! weft-builtins: the tools every weft has without configuration.
//!
//! Pure tools (`noop`, `echo`, `log`, …), the engine-backed ones (`timer.*`, `context.*`,
//! `plan.run`) and the I/O tools (`http.request`, `send_email`, `process.run`) with their
//! locked-down defaults ([`ToolsConfig`]). They implement the interface of `weft-tools`; the
//! engine depends on that interface only, and the assembly point (`weft-node`) registers
//! these in the registry it builds.

pub mod builtin;
pub mod config;
pub mod context;
pub mod email;
pub mod http;
mod http_guard;
pub mod plan_run;
pub mod process;
pub mod profile;
mod support;
pub mod timer;

pub(crate) use weft_tools::{
    BoxFuture, ChildPlan, InlineArgs, InlineContext, Registry, TimerRequest, Tool, ToolContext,
    ToolError, ToolSpec,
};

pub use builtin::{default_registry, register_all, register_pure};
pub use config::{EmailConfig, HttpConfig, ProcessConfig, SmtpConfig, SmtpSecurity, ToolsConfig};
pub use profile::needs;
pub use weft_tools::http_guard::host_allowed;
