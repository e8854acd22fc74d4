//! The policies of a deployment and its tenants, reloaded while weft runs: a tenant's bundle
//! adds to the deployment's and cannot take a denial away; a reload swaps new bundles in, a
//! broken one is refused with its error and the previous policies stay in force; the watcher
//! picks a change up on its own.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use weft_policy::{Bundles, Decision, PolicySet};

const DEPLOYMENT: &str = r#"package weft
deny contains "no deletes" if input.tool.name == "crm.delete"
"#;

const ACME: &str = r#"package weft
deny contains "acme sends no email" if input.tool.name == "send_email"
"#;

fn call(tool: &str) -> Value {
    json!({"version": 1, "kind": "tool_call", "tenant": "t", "tool": {"name": tool, "effect": "write"}, "args": {}})
}

fn decide(set: &PolicySet, tenant: &str, tool: &str) -> Decision {
    set.for_tenant(tenant)
        .map_or(Decision::Allow, |p| p.decide(&call(tool)))
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("weft-policy-set-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_tenant_bundle_adds_to_the_deployment_and_never_takes_away() {
    let d = dir("tenants");
    write(&d.join("policies/base.rego"), DEPLOYMENT);
    write(&d.join("tenants/acme/mail.rego"), ACME);
    // Trying to allow what the deployment denies only adds another rule to the same set.
    write(
        &d.join("tenants/beta/lax.rego"),
        "package weft\ndeny contains \"never\" if false\n",
    );
    let set = PolicySet::load(Bundles {
        deployment: vec![d.join("policies")],
        tenants_dir: Some(d.join("tenants")),
    })
    .unwrap();
    assert_eq!(set.tenants(), ["acme", "beta"]);
    assert!(
        matches!(decide(&set, "acme", "send_email"), Decision::Deny(r) if r == ["acme sends no email"])
    );
    assert!(matches!(
        decide(&set, "acme", "crm.delete"),
        Decision::Deny(_)
    ));
    assert_eq!(decide(&set, "beta", "send_email"), Decision::Allow);
    assert!(matches!(
        decide(&set, "beta", "crm.delete"),
        Decision::Deny(_)
    ));
    // A tenant without a directory gets the deployment's policy.
    assert_eq!(decide(&set, "gamma", "send_email"), Decision::Allow);
    assert!(matches!(
        decide(&set, "gamma", "crm.delete"),
        Decision::Deny(_)
    ));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_reload_swaps_bundles_in_and_a_broken_one_leaves_the_previous_in_force() {
    let d = dir("reload");
    let file = d.join("policies/base.rego");
    write(&file, "package weft\n");
    let set = PolicySet::load(Bundles {
        deployment: vec![d.join("policies")],
        tenants_dir: None,
    })
    .unwrap();
    assert_eq!(decide(&set, "t", "crm.delete"), Decision::Allow);
    write(&file, DEPLOYMENT);
    set.reload().unwrap();
    assert!(matches!(decide(&set, "t", "crm.delete"), Decision::Deny(_)));
    assert_eq!(set.status().reloads, 1);

    // Broken: refused with the file and the compiler's message; the denial stays.
    write(&file, "package weft\ndeny contains x if {");
    let err = set.reload().unwrap_err().to_string();
    assert!(
        err.contains("base.rego") && err.contains("does not compile"),
        "{err}"
    );
    assert!(matches!(decide(&set, "t", "crm.delete"), Decision::Deny(_)));
    let status = set.status();
    assert_eq!(status.reloads, 1);
    assert_eq!(status.last_error.as_deref(), Some(err.as_str()));

    // Approvals where none were: needs a restart, refused the same way.
    write(
        &file,
        "package weft\nrequire_approval contains \"ask\" if input.tool.name == \"send_email\"\n",
    );
    let err = set.reload().unwrap_err().to_string();
    assert!(err.contains("restart"), "{err}");
    assert!(matches!(decide(&set, "t", "crm.delete"), Decision::Deny(_)));

    // Fixed again: the error clears.
    write(&file, "package weft\n");
    set.reload().unwrap();
    assert_eq!(decide(&set, "t", "crm.delete"), Decision::Allow);
    assert_eq!(set.status().last_error, None);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_watcher_reloads_a_changed_bundle_on_its_own() {
    let d = dir("watch");
    let file = d.join("policies/base.rego");
    write(&file, "package weft\n");
    std::fs::create_dir_all(d.join("tenants")).unwrap();
    let set = PolicySet::load(Bundles {
        deployment: vec![d.join("policies")],
        tenants_dir: Some(d.join("tenants")),
    })
    .unwrap();
    let _watcher = set.watch(Duration::from_millis(20));
    write(&file, DEPLOYMENT);
    // A new tenant directory is picked up too.
    write(&d.join("tenants/acme/mail.rego"), ACME);
    let mut waited = 0;
    while !(matches!(decide(&set, "t", "crm.delete"), Decision::Deny(_))
        && matches!(decide(&set, "acme", "send_email"), Decision::Deny(_)))
    {
        assert!(
            waited < 10_000,
            "the watcher did not reload within 10 s: {:?}",
            set.status()
        );
        std::thread::sleep(Duration::from_millis(20));
        waited += 20;
    }
    let _ = std::fs::remove_dir_all(&d);
}
