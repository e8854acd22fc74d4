//! Configuration of the built-in tools that touch the outside world.
//!
//! One serde type gathers every knob so the `weft` binary can read them from its config file
//! (a `[tools]` table) and tests can build them in code. The defaults are the safe, offline
//! ones: HTTP reaches no host, email goes to a local outbox directory, processes are off.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Options of all built-in I/O tools.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// `http.request`.
    pub http: HttpConfig,
    /// `send_email`.
    pub email: EmailConfig,
    /// `process.run`.
    pub process: ProcessConfig,
}

/// Options of `http.request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Hosts that may be called: exact names (`api.example.com`), IP literals, `*.example.com`
    /// (any subdomain, not the apex) or `*` (any host but the special ones below). Empty
    /// denies everything; there are no CIDR entries.
    ///
    /// Special addresses are reachable only when the host is listed exactly (the IP literal,
    /// or the name that resolves to them), never through `*` or `*.example.com`: loopback
    /// (`127.0.0.0/8`, `::1`, and the names `localhost` and `*.localhost`), unspecified
    /// (`0.0.0.0`, `::`), private (`10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`,
    /// `fc00::/7`), link-local (`169.254.0.0/16` with the cloud metadata service at
    /// `169.254.169.254`, `fe80::/10`) and carrier-grade NAT (`100.64.0.0/10`), each also as
    /// an IPv4-mapped IPv6 address (`::ffff:169.254.169.254`). A name that is not listed
    /// exactly is refused those of its DNS answers (and refused outright when it has no
    /// others); redirects are checked the same way, hop by hop.
    pub allow_hosts: Vec<String>,
    /// Largest response body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Timeout when neither the args nor the step give one, in milliseconds.
    pub default_timeout_ms: u64,
    /// Redirects followed at most (each target must be allowlisted too).
    pub max_redirects: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            allow_hosts: Vec::new(),
            max_body_bytes: 10 * 1024 * 1024,
            default_timeout_ms: 30_000,
            max_redirects: 5,
        }
    }
}

/// Options of `send_email`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmailConfig {
    /// Sender used when the args give no `from`.
    pub from: String,
    /// Where messages go when no SMTP server is configured: one `.eml` file per message.
    pub outbox_dir: PathBuf,
    /// SMTP relay; when absent, mail is delivered to `outbox_dir`.
    pub smtp: Option<SmtpConfig>,
}

impl Default for EmailConfig {
    fn default() -> Self {
        EmailConfig {
            from: "weft@localhost".to_string(),
            outbox_dir: PathBuf::from(".weft/outbox"),
            smtp: None,
        }
    }
}

/// How to reach an SMTP relay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpConfig {
    /// Relay host name.
    pub host: String,
    /// Port; defaults to the usual one for `security` (465 for `tls`, 587 for `starttls`,
    /// 25 for `none`).
    #[serde(default)]
    pub port: Option<u16>,
    /// Login, if the relay wants one.
    #[serde(default)]
    pub username: Option<String>,
    /// Password for `username`.
    #[serde(default)]
    pub password: Option<String>,
    /// Transport security.
    #[serde(default)]
    pub security: SmtpSecurity,
    /// Give up on the relay after this long, in milliseconds.
    #[serde(default = "default_smtp_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_smtp_timeout_ms() -> u64 {
    30_000
}

/// Transport security towards the SMTP relay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SmtpSecurity {
    /// TLS from the first byte (SMTPS).
    Tls,
    /// Plain connection upgraded with STARTTLS (required).
    #[default]
    Starttls,
    /// No encryption: only for a relay on the same machine or in tests.
    None,
}

/// Options of `process.run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessConfig {
    /// Whether `process.run` is registered at all.
    pub enabled: bool,
    /// Commands that may run, compared exactly with the `command` arg: bare names are looked
    /// up on `PATH`, paths are used as they are.
    pub allow: Vec<String>,
    /// Timeout when neither the args nor the step give one, in milliseconds.
    pub default_timeout_ms: u64,
    /// Bytes of stdout and of stderr kept each; the rest is read and dropped.
    pub max_output_bytes: usize,
    /// Environment variables passed to the child; everything else is cleared so secrets in
    /// weft's own environment do not leak into commands.
    pub env_passthrough: Vec<String>,
    /// Working directory of the child; weft's own when absent.
    pub cwd: Option<PathBuf>,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            enabled: false,
            allow: Vec::new(),
            default_timeout_ms: 30_000,
            max_output_bytes: 1024 * 1024,
            env_passthrough: ["PATH", "HOME", "LANG", "LC_ALL", "TZ"]
                .into_iter()
                .map(String::from)
                .collect(),
            cwd: None,
        }
    }
}
