//! `weft tools`: the tool catalog a plan is validated against, with each tool's effect class
//! and idempotency (what recovery may safely re-run).

use std::io::Write;
use std::path::PathBuf;

use weft_core::Effect;

use super::{Ctx, Status};
use crate::input;
use crate::output::{self, Palette};

/// Arguments of `weft tools`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Also list the tools of a static tool description file (`{"tools": [...]}`).
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,
    /// Print the catalog as a tool description file (JSON) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also list the tools this tenant declared through the API (`PUT /v1/tools/{name}`),
    /// read from the configured store.
    #[arg(long, value_name = "TENANT")]
    pub tenant: Option<String>,
}

/// Runs `weft tools`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let mut catalog = input::catalog(ctx, args.tools.as_deref())?;
    let api = match &args.tenant {
        Some(tenant) => api_tools(ctx, tenant)?,
        None => Vec::new(),
    };
    for (def, _) in &api {
        if weft_core::catalog::ToolCatalog::spec(&catalog, &def.name).is_none() {
            catalog.insert(def.spec());
        }
    }
    if args.json {
        output::json(out, &catalog.to_json())?;
        return Ok(Status::Clean);
    }
    let p = &ctx.palette;
    let builtin = weft_core::StaticCatalog::builtin();
    let source = |name: &str| -> String {
        let declared = &ctx.config.config.tools.declared;
        let mcp = &ctx.config.config.tools.mcp;
        if let Some((d, version)) = api.iter().find(|(d, _)| d.name == name) {
            format!("api ({}) v{version}", d.source.kind())
        } else if let Some(d) = declared.iter().find(|d| d.name == name) {
            format!("declared ({})", d.source.kind())
        } else if let Some(m) = mcp.iter().find(|m| {
            name.strip_prefix(m.name.as_str())
                .is_some_and(|r| r.starts_with('.'))
        }) {
            format!("mcp ({})", m.name)
        } else if builtin.iter().any(|t| t.name == name) {
            "builtin".into()
        } else {
            "--tools file".into()
        }
    };
    let width = catalog
        .iter()
        .map(|t| t.name.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        out,
        "{}",
        p.paint(
            &format!(
                "{:width$}  {:6}  {:10}  {:16}  DESCRIPTION",
                "TOOL", "EFFECT", "IDEMPOTENT", "SOURCE"
            ),
            Palette::bold()
        )
    )?;
    for t in catalog.iter() {
        let effect = match t.effect {
            Effect::Pure => "pure",
            Effect::Read => "read",
            Effect::Write => "write",
        };
        let idem = if t.idempotent { "yes" } else { "no" };
        writeln!(
            out,
            "{:width$}  {effect:6}  {idem:10}  {:16}  {}",
            t.name,
            source(&t.name),
            t.description
        )?;
    }
    Ok(Status::Clean)
}

/// The tools `tenant` declared through the API, with their versions, from the store.
fn api_tools(ctx: &Ctx, tenant: &str) -> anyhow::Result<Vec<(weft_sources::ToolDef, u32)>> {
    if !ctx.store_configured() {
        anyhow::bail!(
            "--tenant reads the tools a tenant declared from the store, and no store is \
             configured: set store.url (weft.toml, WEFT_STORE_URL)"
        );
    }
    let records = super::history::runtime()?.block_on(async {
        let store = ctx.open_store().await?;
        anyhow::Ok(store.list_tools(Some(tenant)).await?)
    })?;
    weft_node::tenant_tools::live(records)
        .into_iter()
        .map(|r| {
            let def = weft_node::tenant_tools::definition(&r).map_err(anyhow::Error::msg)?;
            Ok((def, r.version))
        })
        .collect()
}
