//! Transcripts: every LLM exchange (request, reply or error, usage, latency, correlation ids)
//! is recorded through a [`TranscriptSink`], and a recorded transcript can be replayed
//! ([`crate::replay::ReplayProvider`]) so planner tests are deterministic (STYLE.md §6).
//! Sinks: memory, a JSONL file, and a weft store ([`crate::stored::StoreTranscript`]).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::chat::{ChatRequest, ChatResponse, Usage};
use crate::error::{Error, Result};
use crate::ids::Correlation;

/// Prompt and completion tokens over `exchanges`.
pub fn token_totals(exchanges: &[Exchange]) -> (u64, u64) {
    exchanges.iter().fold((0, 0), |(p, c), e| {
        (p + e.usage.prompt_tokens, c + e.usage.completion_tokens)
    })
}

/// One recorded exchange.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// Position in its operation (0-based).
    pub seq: u64,
    /// Ids of the operation it belongs to.
    pub correlation: Correlation,
    /// What it was for: `plan`, `review`, `repair`, `explain`, `summarize`, `react`, `complete`.
    pub purpose: String,
    /// Provider name.
    pub provider: String,
    /// Request sent.
    pub request: ChatRequest,
    /// Reply, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<ChatResponse>,
    /// Error, when there was no reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Tokens used.
    pub usage: Usage,
    /// Wall time in ms.
    pub latency_ms: u64,
    /// When it started (Unix ms).
    pub started_at_ms: i64,
}

/// Where exchanges go.
pub trait TranscriptSink: Send + Sync {
    /// Records one exchange.
    fn record(&self, exchange: &Exchange) -> Result<()>;
}

/// Discards everything.
#[derive(Debug, Default)]
pub struct NoTranscript;

impl TranscriptSink for NoTranscript {
    fn record(&self, _: &Exchange) -> Result<()> {
        Ok(())
    }
}

/// Keeps exchanges in memory.
#[derive(Debug, Default)]
pub struct MemoryTranscript {
    items: Mutex<Vec<Exchange>>,
}

impl MemoryTranscript {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
    /// A copy of everything recorded so far.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.items.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl TranscriptSink for MemoryTranscript {
    fn record(&self, exchange: &Exchange) -> Result<()> {
        self.items
            .lock()
            .map_err(|_| Error::Transcript("memory transcript lock poisoned".into()))?
            .push(exchange.clone());
        Ok(())
    }
}

/// Appends one JSON object per line to a file.
#[derive(Debug)]
pub struct JsonlTranscript {
    path: PathBuf,
    file: Mutex<File>,
}

impl JsonlTranscript {
    /// Opens (creating or appending to) `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::Transcript(format!("{}: {e}", path.display())))?;
        Ok(JsonlTranscript {
            path,
            file: Mutex::new(file),
        })
    }

    /// Reads every exchange of a JSONL transcript.
    pub fn load(path: impl AsRef<Path>) -> Result<Vec<Exchange>> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let f = File::open(path).map_err(|e| Error::File {
            path: name.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        let mut out = Vec::new();
        for (i, line) in BufReader::new(f).lines().enumerate() {
            let line = line.map_err(|e| Error::File {
                path: name.clone(),
                line: i + 1,
                message: e.to_string(),
            })?;
            if line.trim().is_empty() {
                continue;
            }
            out.push(serde_json::from_str(&line).map_err(|e| Error::File {
                path: name.clone(),
                line: i + 1,
                message: e.to_string(),
            })?);
        }
        Ok(out)
    }
}

impl TranscriptSink for JsonlTranscript {
    fn record(&self, exchange: &Exchange) -> Result<()> {
        let mut line =
            serde_json::to_string(exchange).map_err(|e| Error::Transcript(e.to_string()))?;
        line.push('\n');
        let mut f = self
            .file
            .lock()
            .map_err(|_| Error::Transcript("transcript file lock poisoned".into()))?;
        f.write_all(line.as_bytes())
            .and_then(|()| f.flush())
            .map_err(|e| Error::Transcript(format!("{}: {e}", self.path.display())))
    }
}
