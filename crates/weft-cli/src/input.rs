//! Reading what the user points at: plan files (or `-` for stdin) with the size limit applied
//! while reading, and static tool description files merged into the built-in catalog.
//!
//! A file that cannot be read is an I/O failure (exit 2); a file that reads but is too big,
//! not UTF-8 or not a plan is a load error (exit 1), reported like any other plan problem.

use std::io::Read;
use std::path::Path;

use anyhow::Context as _;

use crate::cmd::Ctx;
use weft_core::{Limits, LoadError, Plan, StaticCatalog, parse_plan};

/// Largest tool description file read (tool files are small; this only bounds memory).
const MAX_TOOLS_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A document read from a path or stdin.
#[derive(Debug)]
pub struct Source {
    /// What to call it in messages (the path as given, or `<stdin>`).
    pub name: String,
    /// The bytes, at most the byte limit plus one.
    pub bytes: Vec<u8>,
}

impl Source {
    /// Does this look like a PNML document rather than a JSON plan? By extension, else by
    /// content starting with `<` (after whitespace and a byte-order mark).
    pub fn looks_like_pnml(&self, path: &Path) -> bool {
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("pnml") || e.eq_ignore_ascii_case("xml"))
        {
            return true;
        }
        let body = self
            .bytes
            .strip_prefix(b"\xEF\xBB\xBF")
            .unwrap_or(&self.bytes);
        body.iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b'<')
    }
}

/// Reads `path` (`-` = stdin). Documents over `limits.max_bytes` are a [`LoadError::TooLarge`]
/// and are never read whole.
pub fn read_source(path: &Path, limits: &Limits) -> anyhow::Result<Result<Source, LoadError>> {
    let cap = u64::try_from(limits.max_bytes).unwrap_or(u64::MAX);
    let (name, mut reader): (String, Box<dyn Read>) = if path.as_os_str() == "-" {
        ("<stdin>".to_string(), Box::new(std::io::stdin().lock()))
    } else {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).with_context(|| format!("cannot open `{name}`"))?;
        let meta = file
            .metadata()
            .with_context(|| format!("cannot read `{name}`"))?;
        if meta.is_dir() {
            anyhow::bail!("cannot read `{name}`: it is a directory");
        }
        if meta.is_file() && meta.len() > cap {
            return Ok(Err(LoadError::TooLarge {
                size: usize::try_from(meta.len()).unwrap_or(usize::MAX),
                limit: limits.max_bytes,
            }));
        }
        (name, Box::new(file))
    };
    let mut bytes = Vec::new();
    reader
        .by_ref()
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read `{name}`"))?;
    if bytes.len() > limits.max_bytes {
        // A pipe or a growing file: we stopped reading one byte past the limit.
        return Ok(Err(LoadError::TooLarge {
            size: bytes.len(),
            limit: limits.max_bytes,
        }));
    }
    Ok(Ok(Source { name, bytes }))
}

/// Reads and parses a plan: `Ok(Err(_))` is a load error to report, `Err(_)` an I/O failure.
pub fn load_plan(path: &Path, limits: &Limits) -> anyhow::Result<Result<Plan, LoadError>> {
    Ok(read_source(path, limits)?.and_then(|src| parse_plan(&src.bytes, limits)))
}

/// The built-in tool catalog and the tools the configuration declares, extended with a
/// static tool description file when given.
pub fn catalog(ctx: &Ctx, tools: Option<&Path>) -> anyhow::Result<StaticCatalog> {
    let mut catalog = StaticCatalog::builtin();
    for def in &ctx.config.config.tools.declared {
        catalog.insert(def.spec());
    }
    // MCP servers say which tools they have only when asked: start them once to list them.
    let mcp = &ctx.config.config.tools.mcp;
    if !mcp.is_empty() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        let tools = rt
            .block_on(weft_sources::discover(mcp))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for t in tools {
            catalog.insert(t.spec().clone());
        }
    }
    if let Some(path) = tools {
        let name = path.display();
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open tool file `{name}`"))?;
        let mut text = String::new();
        file.take(MAX_TOOLS_FILE_BYTES)
            .read_to_string(&mut text)
            .with_context(|| format!("cannot read tool file `{name}` (it must be UTF-8 JSON)"))?;
        let extra = StaticCatalog::from_json(&text).map_err(|e| {
            anyhow::anyhow!(
                "tool file `{name}` is not a tool description (`{{\"tools\": [{{\"name\": …, \"args_schema\": …}}]}}`): {e}"
            )
        })?;
        catalog.extend(extra);
    }
    Ok(catalog)
}
