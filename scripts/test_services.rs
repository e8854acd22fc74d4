// Shared by the build scripts of the crates whose tests need a service (`include!`d, so this
// file holds items only and no inner doc comment). `service(cfg, var)` declares `cfg`, reruns
// the build script when `var` changes and turns `cfg` on when `var` is set to something other
// than "" or "0": tests marked `#[cfg_attr(not(cfg), ignore = "needs …")]` then run, and are
// counted as ignored (with the reason) when it is off.

fn service(cfg: &str, var: &str) {
    println!("cargo:rustc-check-cfg=cfg({cfg})");
    println!("cargo:rerun-if-env-changed={var}");
    if std::env::var(var).is_ok_and(|v| !v.is_empty() && v != "0") {
        println!("cargo:rustc-cfg={cfg}");
    }
}
