//! The web UI's static assets, compiled into the binary so `weft serve` needs no files on disk
//! and no Node.js: hand-written HTML, CSS and ES modules from `assets/`, looked up by path in a
//! fixed table. Anything not in the table (including traversal attempts) is `None`; the
//! filesystem is never touched.

/// One embedded file: its bytes and the `Content-Type` to serve it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asset {
    /// The file's contents, as committed under `crates/weft-ui/assets/`.
    pub bytes: &'static [u8],
    /// The media type with charset, e.g. `text/javascript; charset=utf-8`.
    pub content_type: &'static str,
}

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const SVG: &str = "image/svg+xml";

macro_rules! table {
    ($($name:literal => $ct:expr),* $(,)?) => {
        /// Every embedded asset by its path below `/ui/`.
        const TABLE: &[(&str, Asset)] = &[
            $(($name, Asset { bytes: include_bytes!(concat!("../assets/", $name)), content_type: $ct }),)*
        ];
    };
}

table! {
    "index.html" => HTML,
    "app.css" => CSS,
    "app.js" => JS,
    "api.js" => JS,
    "util.js" => JS,
    "layout.js" => JS,
    "net.js" => JS,
    "netnav.js" => JS,
    "plans.js" => JS,
    "instances.js" => JS,
    "generate.js" => JS,
    "quotas.js" => JS,
    "favicon.svg" => SVG,
}

/// The asset at `path` (relative to `/ui/`, no leading slash). `""` and `"index.html"` give the
/// index page; any path not in the embedded table gives `None`.
pub fn asset(path: &str) -> Option<Asset> {
    let path = if path.is_empty() { "index.html" } else { path };
    TABLE
        .iter()
        .find(|(name, _)| *name == path)
        .map(|(_, asset)| *asset)
}

/// The paths of all embedded assets (for listings and tests).
pub fn paths() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|(name, _)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_path_and_index_give_the_index_page() {
        let empty = asset("").unwrap();
        let index = asset("index.html").unwrap();
        assert_eq!(empty, index);
        assert_eq!(index.content_type, HTML);
        let text = std::str::from_utf8(index.bytes).unwrap();
        assert!(text.contains("<!doctype html>"), "index is an HTML page");
        assert!(text.contains("app.js"), "index loads the app module");
    }

    #[test]
    fn known_assets_have_their_content_types() {
        assert_eq!(asset("app.css").unwrap().content_type, CSS);
        assert_eq!(asset("app.js").unwrap().content_type, JS);
        assert_eq!(asset("favicon.svg").unwrap().content_type, SVG);
        for path in paths() {
            let a = asset(path).unwrap();
            assert!(!a.bytes.is_empty(), "{path} is empty");
            assert!(std::str::from_utf8(a.bytes).is_ok(), "{path} is not UTF-8");
        }
    }

    #[test]
    fn unknown_and_traversal_paths_are_rejected() {
        for bad in [
            "nope.js",
            "../Cargo.toml",
            "../src/lib.rs",
            "/index.html",
            "./index.html",
            "assets/app.js",
            "..%2FCargo.toml",
            "app.js/",
            "APP.JS",
            "index.html\0",
            "/etc/passwd",
            "..",
        ] {
            assert!(asset(bad).is_none(), "{bad:?} must not resolve");
        }
    }

    #[test]
    fn every_module_the_page_imports_is_embedded() {
        // Relative ES-module imports (`from "./x.js"`) in the embedded scripts must resolve
        // inside the table, or the page would break at run time with a 404.
        for path in paths().filter(|p| p.ends_with(".js")) {
            let text = std::str::from_utf8(asset(path).unwrap().bytes).unwrap();
            for part in text.split("from \"./").skip(1) {
                let target = part.split('"').next().unwrap();
                assert!(asset(target).is_some(), "{path} imports missing ./{target}");
            }
        }
    }
}
