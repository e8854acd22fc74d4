//! `weft approve` and `weft deny`: decide a step's pending approval on a running `weft
//! serve` (the process whose instance waits holds the call, so the decision goes to it over
//! its API: `POST /v1/instances/{id}/approvals/{step}`). `weft approve INSTANCE` with no step
//! lists what waits.

use std::io::Write;

use anyhow::Context as _;
use serde_json::{Value, json};

use super::{Ctx, Status};
use crate::output;

/// `weft approve` / `weft deny`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The instance id.
    pub instance: String,
    /// The step whose firing waits (omit it to list the instance's approvals).
    pub step: Option<String>,
    /// Why (kept with the decision in the journal).
    #[arg(long)]
    pub comment: Option<String>,
    /// Who decides (recorded; default `tenant:<tenant>`).
    #[arg(long = "as", value_name = "PRINCIPAL")]
    pub principal: Option<String>,
    /// Which firing of the step (default: the oldest waiting).
    #[arg(long)]
    pub firing: Option<u64>,
    /// The server [default: $WEFT_SERVER, else http://<server.listen>].
    #[arg(long)]
    pub server: Option<String>,
    /// The API token [default: $WEFT_TOKEN].
    #[arg(long)]
    pub token: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn server(args: &Args, ctx: &Ctx) -> String {
    let url = args
        .server
        .clone()
        .or_else(|| std::env::var("WEFT_SERVER").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| format!("http://{}", ctx.config.config.server.listen));
    url.trim_end_matches('/').to_string()
}

/// Runs `weft approve` (`grant`) or `weft deny`.
pub fn run(args: &Args, grant: bool, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let base = server(args, ctx);
    let token = args
        .token
        .clone()
        .or_else(|| std::env::var("WEFT_TOKEN").ok().filter(|s| !s.is_empty()));
    let path = |p: &str| {
        format!(
            "{base}/v1/instances/{}/approvals{p}",
            percent(&args.instance)
        )
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let (code, body) = rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .context("cannot build an HTTP client")?;
        let req = match &args.step {
            None => client.get(path("")),
            Some(step) => client.post(path(&format!("/{}", percent(step)))).json(&json!({
                "decision": if grant { "grant" } else { "deny" },
                "comment": args.comment,
                "principal": args.principal,
                "firing": args.firing,
            })),
        };
        let req = match &token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let resp = req
            .send()
            .await
            .with_context(|| format!("cannot reach weft at {base} (is `weft serve` running? --server or WEFT_SERVER names it)"))?;
        let code = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        anyhow::Ok((code, body))
    })?;
    if !code.is_success() {
        let detail = body["detail"].as_str().unwrap_or("no detail");
        let hint = body["hint"]
            .as_str()
            .map(|h| format!(" (hint: {h})"))
            .unwrap_or_default();
        anyhow::bail!(
            "{base} answered {code} [{}]: {detail}{hint}",
            body["code"].as_str().unwrap_or("?")
        );
    }
    if args.json {
        output::json(out, &body)?;
        return Ok(Status::Clean);
    }
    match &args.step {
        None => {
            let list = body["approvals"].as_array().cloned().unwrap_or_default();
            if list.is_empty() {
                writeln!(out, "nothing of {} waits for an approval", args.instance)?;
            }
            for a in list {
                let state = match &a["decision"] {
                    Value::Null => "waiting".to_string(),
                    d if d["granted"] == true => format!("granted by {}", d["principal"]),
                    d => format!("denied by {}", d["principal"]),
                };
                writeln!(
                    out,
                    "{} (firing {}): {state}",
                    a["step"].as_str().unwrap_or("?"),
                    a["firing"]
                )?;
                for r in a["reasons"].as_array().into_iter().flatten() {
                    writeln!(out, "  - {}", r.as_str().unwrap_or_default())?;
                }
            }
        }
        Some(step) => writeln!(
            out,
            "{} step {step} (firing {}) of {}",
            if grant { "granted" } else { "denied" },
            body["firing"],
            args.instance
        )?,
    }
    Ok(Status::Clean)
}

/// Escapes a path segment.
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
