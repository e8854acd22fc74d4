//! `weft policy`: the Rego bundle that decides every tool call (`[policy] bundles`, or files
//! given on the command line), tried without running anything. `eval` shows the decision
//! for one input document and why (and what evaluated it: weft's compiled rules, or
//! regorus's interpreter and why); `test` runs the bundle's Rego tests.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::{Value, json};
use weft_policy::{DENY_RULE, Decision, Evaluator, Policy};

use super::{Ctx, Status};
use crate::output;

/// `weft policy …`.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Decide one input document (`{"kind": "tool_call", "tool": …, "args": …}`, as weft
    /// builds it before a call) and print the decision (`allow`, `deny`, `require_approval`)
    /// with its reasons. Exit 0 when allowed, 1 when denied or when it needs an approval.
    Eval {
        /// The input document (JSON), `-` for stdin.
        #[arg(long)]
        input: PathBuf,
        /// `.rego` files or directories (default: `[policy] bundles`).
        bundles: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Decide with regorus's interpreter alone, not weft's compiled rules (they decide
        /// alike; this is the reference to compare with).
        #[arg(long)]
        interpreter: bool,
    },
    /// Run the bundle's Rego tests: every rule named `test_*` must be true (use `with input
    /// as …` in them). Exit 1 when one fails.
    Test {
        /// `.rego` files or directories (default: `[policy] bundles`).
        bundles: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn bundle(given: &[PathBuf], ctx: &Ctx) -> anyhow::Result<Policy> {
    let paths = if given.is_empty() {
        ctx.config.config.policy.bundles.clone()
    } else {
        given.to_vec()
    };
    anyhow::ensure!(
        !paths.is_empty(),
        "no policy bundle: name .rego files or directories, or set `[policy] bundles` in weft.toml"
    );
    Ok(Policy::load(&paths)?)
}

/// Runs `weft policy …`.
pub fn run(cmd: &PolicyCommand, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    match cmd {
        PolicyCommand::Eval {
            input,
            bundles,
            json,
            interpreter,
        } => {
            let mut policy = bundle(bundles, ctx)?;
            if *interpreter {
                policy = policy.interpreted();
            }
            let (evaluator, why) = match policy.evaluator() {
                Evaluator::Constant => ("constant", None),
                Evaluator::Compiled => ("compiled", None),
                Evaluator::Interpreter(why) => ("interpreter", Some(why)),
            };
            let text = if input.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("cannot read stdin")?
            } else {
                std::fs::read_to_string(input)
                    .with_context(|| format!("cannot read {}", input.display()))?
            };
            let doc: Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", input.display()))?;
            let decision = policy.decide(&doc);
            let (name, reasons, timeout_ms) = match &decision {
                Decision::Allow => ("allow", Vec::new(), None),
                Decision::Deny(r) => ("deny", r.clone(), None),
                Decision::RequireApproval {
                    reasons,
                    timeout_ms,
                } => ("require_approval", reasons.clone(), *timeout_ms),
            };
            if *json {
                let mut doc = json!({"decision": name, "reasons": reasons, "rule": DENY_RULE,
                        "bundle": policy.files(), "evaluator": evaluator, "interpreted_because": why});
                if let Some(t) = timeout_ms {
                    doc["approval_timeout_ms"] = json!(t);
                }
                output::json(out, &doc)?;
            } else {
                match timeout_ms {
                    Some(t) => writeln!(out, "{name} (within {t} ms, else denied)")?,
                    None => writeln!(out, "{name}")?,
                }
                for r in &reasons {
                    writeln!(out, "  - {r}")?;
                }
                if let Some(why) = why.filter(|_| !*interpreter) {
                    eprintln!("note: regorus's interpreter decides for this bundle ({why})");
                }
            }
            // Exit 0 only when the call would run as it is.
            Ok(match decision {
                Decision::Allow => Status::Clean,
                Decision::Deny(_) | Decision::RequireApproval { .. } => Status::PlanErrors,
            })
        }
        PolicyCommand::Test { bundles, json } => {
            let policy = bundle(bundles, ctx)?;
            let results = policy.run_tests();
            let failed = results.iter().filter(|t| !t.passed).count();
            if *json {
                let tests: Vec<Value> = results
                    .iter()
                    .map(|t| json!({"rule": t.rule, "passed": t.passed, "detail": t.detail}))
                    .collect();
                output::json(
                    out,
                    &json!({"passed": results.len() - failed, "failed": failed, "tests": tests}),
                )?;
            } else {
                for t in &results {
                    match &t.detail {
                        None => writeln!(out, "PASS {}", t.rule)?,
                        Some(d) => writeln!(out, "FAIL {} ({d})", t.rule)?,
                    }
                }
                writeln!(
                    out,
                    "{} passed, {failed} failed{}",
                    results.len() - failed,
                    if results.is_empty() {
                        " (no rule named test_* in the bundle)"
                    } else {
                        ""
                    }
                )?;
            }
            Ok(if failed > 0 || results.is_empty() {
                Status::PlanErrors
            } else {
                Status::Clean
            })
        }
    }
}
