//! Hygiene the tools can enforce, checked on the source tree: the crate layering (no crate
//! depends on one above it; the runtime sees only the tool interface; the durable layer no
//! storage backend), front ends that build nothing themselves (only the assembly point,
//! `weft-node`, makes engines, stores and registries), and a `//!` comment at the top of
//! every Rust file saying why it exists.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::root;

/// The layers, bottom first: a crate may depend on crates of lower layers only.
const LAYERS: &[&[&str]] = &[
    &["weft-alloc", "weft-spawn", "weft-core", "weft-ui"],
    &["weft-analysis", "weft-tools", "weft-store"],
    &[
        "weft-builtins",
        "weft-sources",
        "weft-policy",
        "weft-runtime",
        "weft-store-sqlite",
        "weft-store-postgres",
    ],
    &["weft-durable", "weft-llm"],
    &["weft-node"],
    // The benchmarks assemble nodes (the tool-source workloads) like a front end does.
    &["weft-server", "weft-bench"],
    &["weft-cli", "weft-loadgen"],
];

fn layer(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&name))
}

/// The `weft-*` crates in a manifest's `[dependencies]` (not dev- or build-dependencies).
fn weft_deps(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_deps = t == "[dependencies]";
            continue;
        }
        if in_deps && t.starts_with("weft-") {
            let name: String = t
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            let name = name.trim_end_matches('.').to_string();
            out.push(name);
        }
    }
    out
}

fn crates() -> BTreeMap<String, PathBuf> {
    let dir = root().join("crates");
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).expect("crates/") {
        let p = e.expect("entry").path();
        if p.join("Cargo.toml").is_file() {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            out.insert(name, p);
        }
    }
    out
}

#[test]
fn no_crate_depends_on_a_crate_above_it() {
    let mut problems = Vec::new();
    for (name, dir) in crates() {
        let Some(mine) = layer(&name) else {
            problems.push(format!("{name} is in no layer of tidy.rs"));
            continue;
        };
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("manifest");
        for dep in weft_deps(&manifest) {
            match layer(&dep) {
                Some(l) if l < mine => {}
                _ => problems.push(format!("{name} (layer {mine}) depends on {dep}")),
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_engine_sees_the_tool_interface_and_the_durable_layer_no_backend() {
    let read = |c: &str| {
        std::fs::read_to_string(root().join("crates").join(c).join("Cargo.toml")).expect("manifest")
    };
    assert_eq!(
        weft_deps(&read("weft-runtime")),
        ["weft-core", "weft-tools"]
    );
    assert_eq!(weft_deps(&read("weft-tools")), ["weft-core"]);
    let durable = weft_deps(&read("weft-durable"));
    assert!(
        !durable.iter().any(|d| d.starts_with("weft-store-")),
        "{durable:?}"
    );
    assert!(durable.contains(&"weft-store".to_string()));
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name()
                .is_some_and(|n| n == "target" || n == "node_modules")
            {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn front_ends_build_nothing_themselves() {
    // What only the assembly point may construct.
    const BUILDERS: &[&str] = &[
        "Engine::new(",
        "EngineOptions {",
        "Durable::open(",
        "Registry::new(",
        "register_all(",
        "weft_store_sqlite::",
        "weft_store_postgres::",
        "InProcessBus::new(",
    ];
    let mut files = Vec::new();
    rust_files(&root().join("crates/weft-cli/src"), &mut files);
    rust_files(&root().join("crates/weft-server/src"), &mut files);
    let mut problems = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for b in BUILDERS {
                if code.contains(b) {
                    problems.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn every_rust_file_starts_with_a_module_comment() {
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    assert!(files.len() > 100, "found only {} files", files.len());
    let missing: Vec<String> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .map(|t| !t.starts_with("//!"))
                .unwrap_or(true)
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a leading //! comment: {missing:#?}"
    );
}
