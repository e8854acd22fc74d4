//! The policies in force on a deployment: the deployment's bundle, each tenant's own on top
//! of it, and reloading them while weft runs.
//!
//! **Tenants.** `tenants_dir` holds a directory per tenant (`<tenants_dir>/<tenant>/*.rego`).
//! A tenant's policy is the deployment's files and its own compiled together: Rego merges the
//! rules of one package, so a tenant's `deny` adds reasons to the deployment's and can never
//! take one away. A tenant without a directory gets the deployment's policy.
//!
//! **Reloading.** [`PolicySet::reload`] reads and compiles every bundle again and swaps them
//! in as a whole. A bundle that does not compile (or declares malformed properties) is
//! refused with its error, and the policies in force stay as they were; so is a reload that
//! would make `require_approval` appear where no bundle had it (the tools were wrapped as
//! calls that cannot wait: that takes a restart). [`PolicySet::watch`] polls the files'
//! sizes and modification times and reloads when they change.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use crate::{Policy, PolicyError};

/// Where the bundles are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bundles {
    /// The deployment's files and directories (every tenant's policy includes them).
    pub deployment: Vec<PathBuf>,
    /// A directory with one directory of `.rego` files per tenant.
    pub tenants_dir: Option<PathBuf>,
}

/// The compiled policies: the deployment's (none: every call is allowed), and each tenant's
/// that has its own files.
#[derive(Clone)]
struct Compiled {
    deployment: Option<Policy>,
    tenants: HashMap<String, Policy>,
}

impl Compiled {
    fn may_require_approval(&self) -> bool {
        self.deployment
            .as_ref()
            .is_some_and(Policy::may_require_approval)
            || self.tenants.values().any(Policy::may_require_approval)
    }
}

/// The result of the last reload attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadStatus {
    /// Reloads that swapped new policies in.
    pub reloads: u64,
    /// The error of the last attempt, when it was refused (cleared by a successful one).
    pub last_error: Option<String>,
}

/// The policies in force, shared by the chain's policy link and the plan checks. Cheap to
/// clone; every clone sees a reload.
#[derive(Clone)]
pub struct PolicySet {
    bundles: Arc<Bundles>,
    current: Arc<RwLock<Arc<Compiled>>>,
    status: Arc<Mutex<ReloadStatus>>,
    /// The files as they were before the policies in force were read from them.
    loaded: Arc<Mutex<Fingerprint>>,
    /// Fixed at load: whether any bundle may ask for approvals.
    approvals: bool,
}

/// Size and modification time of each file of the bundles.
type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

impl std::fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicySet")
            .field("bundles", &self.bundles)
            .finish_non_exhaustive()
    }
}

impl PolicySet {
    /// Reads and compiles every bundle; any error refuses the whole set.
    pub fn load(bundles: Bundles) -> Result<PolicySet, PolicyError> {
        let seen = fingerprint(&bundles);
        let compiled = compile(&bundles)?;
        Ok(PolicySet {
            loaded: Arc::new(Mutex::new(seen)),
            approvals: compiled.may_require_approval(),
            bundles: Arc::new(bundles),
            current: Arc::new(RwLock::new(Arc::new(compiled))),
            status: Arc::new(Mutex::new(ReloadStatus::default())),
        })
    }

    /// One fixed policy for every tenant (no files to reload).
    pub fn fixed(policy: Policy) -> PolicySet {
        PolicySet {
            loaded: Arc::new(Mutex::new(Vec::new())),
            approvals: policy.may_require_approval(),
            bundles: Arc::new(Bundles::default()),
            current: Arc::new(RwLock::new(Arc::new(Compiled {
                deployment: Some(policy),
                tenants: HashMap::new(),
            }))),
            status: Arc::new(Mutex::new(ReloadStatus::default())),
        }
    }

    /// The policy in force for `tenant` (`None`: no bundle applies, every call is allowed).
    pub fn for_tenant(&self, tenant: &str) -> Option<Policy> {
        self.with_tenant(tenant, |p| p.cloned())
    }

    /// Runs `f` on the policy in force for `tenant`, without copying it.
    pub fn with_tenant<R>(&self, tenant: &str, f: impl FnOnce(Option<&Policy>) -> R) -> R {
        let c = self.snapshot();
        f(c.tenants.get(tenant).or(c.deployment.as_ref()))
    }

    fn snapshot(&self) -> Arc<Compiled> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether a call behind this set may have to wait for a person (fixed at load).
    pub fn may_require_approval(&self) -> bool {
        self.approvals
    }

    /// The files of the deployment's bundle, for descriptions.
    pub fn files(&self) -> Vec<String> {
        self.snapshot()
            .deployment
            .as_ref()
            .map(|p| p.files().to_vec())
            .unwrap_or_default()
    }

    /// Tenants with a bundle of their own.
    pub fn tenants(&self) -> Vec<String> {
        let mut t: Vec<String> = self.snapshot().tenants.keys().cloned().collect();
        t.sort();
        t
    }

    /// Reads and compiles every bundle again and swaps them in; on an error the policies in
    /// force stay, and the error is returned and kept in [`PolicySet::status`].
    pub fn reload(&self) -> Result<(), PolicyError> {
        let seen = fingerprint(&self.bundles);
        let result = compile(&self.bundles).and_then(|c| {
            if c.may_require_approval() && !self.approvals {
                Err(PolicyError::NeedsRestart {
                    message: "a bundle now defines `require_approval`, which no bundle did when weft started; calls were set up as calls that cannot wait for a person".into(),
                })
            } else {
                Ok(c)
            }
        });
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(c) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(c);
                *self.loaded.lock().unwrap_or_else(|e| e.into_inner()) = seen;
                status.reloads += 1;
                status.last_error = None;
                Ok(())
            }
            Err(e) => {
                status.last_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// The result of the last reload attempt.
    pub fn status(&self) -> ReloadStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Polls the bundles' files every `every` and reloads when one changed (was added,
    /// removed, resized or modified); a refused reload is logged and tried again at the next
    /// change. Stops when the returned [`Watcher`] is dropped.
    pub fn watch(&self, every: Duration) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let set = self.clone();
        let flag = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("weft-policy-watch".into())
            .spawn(move || {
                // A refused state is tried again only once the files change again.
                let mut refused: Option<Fingerprint> = None;
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(every);
                    let now = fingerprint(&set.bundles);
                    let loaded = set.loaded.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if now == loaded || refused.as_ref() == Some(&now) {
                        continue;
                    }
                    if set.reload().is_err() {
                        refused = Some(now);
                    }
                    match set.status().last_error {
                        None => tracing::info!(target: "weft::policy", "policy bundles reloaded"),
                        Some(e) => tracing::error!(target: "weft::policy", error = %e,
                            "policy bundles not reloaded; the previous ones stay in force"),
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!(target: "weft::policy", error = %e, "cannot watch the policy bundles");
        }
        Watcher { stop }
    }
}

/// Stops [`PolicySet::watch`]'s polling when dropped.
#[derive(Debug)]
pub struct Watcher {
    stop: Arc<AtomicBool>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The tenant directories of `dir`, by tenant name (directories whose name is not a valid
/// tenant name are skipped).
fn tenant_dirs(dir: &Path) -> Result<BTreeMap<String, PathBuf>, PolicyError> {
    let mut out = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| PolicyError::Read {
        path: dir.display().to_string(),
        message: e.to_string(),
    })?;
    for e in entries.flatten() {
        let path = e.path();
        if !path.is_dir() {
            continue;
        }
        if let Some(name) = path.file_name().and_then(|n| n.to_str())
            && !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            out.insert(name.to_string(), path);
        }
    }
    Ok(out)
}

fn compile(b: &Bundles) -> Result<Compiled, PolicyError> {
    let deployment = if b.deployment.is_empty() {
        None
    } else {
        Some(Policy::load(&b.deployment)?)
    };
    let mut tenants = HashMap::new();
    if let Some(dir) = &b.tenants_dir {
        for (tenant, path) in tenant_dirs(dir)? {
            let mut paths = b.deployment.clone();
            paths.push(path);
            tenants.insert(tenant, Policy::load(&paths)?);
        }
    }
    for (who, policy) in deployment
        .iter()
        .map(|p| ("deployment", p))
        .chain(tenants.iter().map(|(t, p)| (t.as_str(), p)))
    {
        // Worth knowing: the interpreter costs a call about ten times the compiled rules.
        if let crate::Evaluator::Interpreter(why) = policy.evaluator() {
            tracing::info!(target: "weft::policy", bundle = who, reason = %why,
                "policy bundle decided by regorus's interpreter, not compiled");
        }
    }
    Ok(Compiled {
        deployment,
        tenants,
    })
}

/// Size and modification time of every file the bundles name or hold.
fn fingerprint(b: &Bundles) -> Fingerprint {
    let mut out = Vec::new();
    for p in &b.deployment {
        walk(p, 1, &mut out);
    }
    if let Some(d) = &b.tenants_dir {
        walk(d, 2, &mut out);
    }
    out
}

/// Adds `p` (a file, or a directory's entries down to `depth` levels) to `out`.
fn walk(p: &Path, depth: u32, out: &mut Fingerprint) {
    let Ok(meta) = std::fs::metadata(p) else {
        out.push((p.to_path_buf(), u64::MAX, None));
        return;
    };
    if meta.is_dir() && depth > 0 {
        if let Ok(rd) = std::fs::read_dir(p) {
            let mut children: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            children.sort();
            for c in children {
                walk(&c, depth - 1, out);
            }
        }
    } else {
        out.push((p.to_path_buf(), meta.len(), meta.modified().ok()));
    }
}
