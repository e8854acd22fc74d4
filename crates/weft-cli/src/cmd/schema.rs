//! `weft schema`: the plan format's JSON Schema, generated from the Rust types. This is what
//! an LLM planner is given, so it is printed exactly as `weft_core::Plan::json_schema()` makes it.

use std::io::Write;

use super::{Ctx, Status};
use crate::output;

/// Arguments of `weft schema` (none yet).
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `weft schema`.
pub fn run(_args: &Args, _ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    output::json(out, &weft_core::Plan::json_schema())?;
    Ok(Status::Clean)
}
