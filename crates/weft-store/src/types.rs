//! The values a [`crate::Store`] takes and returns. Times are milliseconds since the Unix
//! epoch passed in by the caller (the store never reads a clock, so tests control time).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chain::Hash;
use crate::error::{Error, Result};

/// A journal record to append. The body is opaque bytes (the runtime decides the encoding;
/// JSON via [`NewRecord::json`]); it is hashed exactly as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    /// What happened (`instance.started`, `step.fired`, …): non-empty.
    pub kind: String,
    /// The record's content.
    pub body: Vec<u8>,
    /// When it happened.
    pub at_ms: i64,
}

impl NewRecord {
    /// A record with a JSON body.
    pub fn json(kind: impl Into<String>, body: &impl Serialize, at_ms: i64) -> Result<Self> {
        Ok(NewRecord {
            kind: kind.into(),
            body: serde_json::to_vec(body).map_err(Error::invalid)?,
            at_ms,
        })
    }
}

/// A stored journal record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Position in the instance's journal, from 1, contiguous.
    pub seq: u64,
    /// What happened.
    pub kind: String,
    /// The record's content.
    pub body: Vec<u8>,
    /// When it happened.
    pub at_ms: i64,
    /// Hash of the previous record ([`crate::GENESIS`] for seq 1).
    pub prev_hash: Hash,
    /// `SHA-256(prev_hash ‖ seq ‖ kind ‖ body ‖ at_ms)`.
    pub hash: Hash,
}

impl Record {
    /// Decodes a JSON body.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|e| Error::Corrupt {
            message: format!("journal record seq {} is not valid JSON: {e}", self.seq),
        })
    }
}

/// The result of an append: the sequence numbers given, and the new chain head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// First sequence number assigned (one past the old head when nothing was appended).
    pub first_seq: u64,
    /// Last sequence number assigned (the new head).
    pub last_seq: u64,
    /// Hash of the last record (the new chain head).
    pub head: Hash,
}

impl Appended {
    /// The sequence numbers assigned, in order.
    pub fn seqs(&self) -> std::ops::RangeInclusive<u64> {
        self.first_seq..=self.last_seq
    }
}

/// A snapshot of an instance's state after record `seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The last journal record folded into `state`.
    pub seq: u64,
    /// That record's hash (the chain anchor after compaction).
    pub hash: Hash,
    /// The encoded state (the runtime decides the encoding).
    pub state: Vec<u8>,
    /// When it was taken.
    pub at_ms: i64,
}

/// Lifecycle of a stored plan version (seed 000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    /// Stored, not in use (the status of a new version).
    Template,
    /// Instances run it.
    Active,
    /// Done with.
    Completed,
    /// Kept for history only.
    Archived,
}

impl PlanStatus {
    /// Lower-case name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanStatus::Template => "template",
            PlanStatus::Active => "active",
            PlanStatus::Completed => "completed",
            PlanStatus::Archived => "archived",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "template" => PlanStatus::Template,
            "active" => PlanStatus::Active,
            "completed" => PlanStatus::Completed,
            "archived" => PlanStatus::Archived,
            other => {
                return Err(Error::Corrupt {
                    message: format!("unknown plan status `{other}` in the store"),
                });
            }
        })
    }
}

/// A stored plan version with its document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    /// Its summary.
    #[serde(flatten)]
    pub info: PlanInfo,
    /// The plan JSON.
    pub document: Value,
}

/// A stored version of a tenant's declared tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRecord {
    /// Owner.
    pub tenant: String,
    /// Tool name.
    pub name: String,
    /// 1, 2, … per (tenant, name).
    pub version: u32,
    /// The definition (`weft_sources::ToolDef` as JSON); `None`: the tool was deleted in
    /// this version.
    pub definition: Option<Value>,
    /// When this version was stored.
    pub created_at_ms: i64,
}

/// A stored plan version without its document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanInfo {
    /// Owner.
    pub tenant: String,
    /// Plan name.
    pub name: String,
    /// 1, 2, … per (tenant, name).
    pub version: u32,
    /// Lifecycle status.
    pub status: PlanStatus,
    /// When this version was stored.
    pub created_at_ms: i64,
}

/// Where an instance is in its life, as the store indexes it (the names of
/// `weft_core::instance::Status`; the reason of `failed`/`paused` goes in
/// [`InstanceRecord::reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceStatus {
    /// Steps may fire, actions may be in flight, or (reactive) alive until stopped.
    Running,
    /// Finished with an output.
    Completed,
    /// Acyclic, settled without an output, and an input event or a pending timer can still
    /// move it (records of older builds say `stuck` for such an instance until it next
    /// settles: recovery folds the journal again and writes the status it finds).
    Waiting,
    /// Acyclic, settled without an output, and nothing can ever enable a step again.
    Stuck,
    /// Aborted by a failure.
    Failed,
    /// Waiting for a repair or stopped by the firing-rate limit.
    Paused,
    /// Stopped from outside.
    Stopped,
}

impl InstanceStatus {
    /// Every status.
    pub const ALL: [InstanceStatus; 7] = [
        InstanceStatus::Running,
        InstanceStatus::Completed,
        InstanceStatus::Waiting,
        InstanceStatus::Stuck,
        InstanceStatus::Failed,
        InstanceStatus::Paused,
        InstanceStatus::Stopped,
    ];

    /// Will the instance never run again? (Recovery skips these.)
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            InstanceStatus::Completed | InstanceStatus::Failed | InstanceStatus::Stopped
        )
    }

    /// Lower-case name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceStatus::Running => "running",
            InstanceStatus::Completed => "completed",
            InstanceStatus::Waiting => "waiting",
            InstanceStatus::Stuck => "stuck",
            InstanceStatus::Failed => "failed",
            InstanceStatus::Paused => "paused",
            InstanceStatus::Stopped => "stopped",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Result<Self> {
        InstanceStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| Error::Corrupt {
                message: format!("unknown instance status `{s}` in the store"),
            })
    }
}

/// The index entry of an instance (its state is in the journal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// Instance id (unique in the store).
    pub id: String,
    /// Owner.
    pub tenant: String,
    /// Plan it runs.
    pub plan_name: String,
    /// Plan version it runs.
    pub plan_version: u32,
    /// Current status.
    pub status: InstanceStatus,
    /// Why it is failed or paused.
    pub reason: Option<String>,
    /// When it was created.
    pub created_at_ms: i64,
    /// When its status last changed.
    pub updated_at_ms: i64,
    /// The instance that started it (child plans).
    pub parent: Option<String>,
}

/// Keyset pagination: results ordered by id, strictly after `after`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page {
    /// Last id of the previous page.
    pub after: Option<String>,
    /// Most results (1..=10,000).
    pub limit: u32,
}

impl Page {
    /// The first page of `limit` results.
    pub fn first(limit: u32) -> Self {
        Page { after: None, limit }
    }

    /// Checks the limit.
    pub fn checked_limit(&self) -> Result<u32> {
        if (1..=10_000).contains(&self.limit) {
            Ok(self.limit)
        } else {
            Err(Error::invalid(format!(
                "page limit {} is outside 1..=10000",
                self.limit
            )))
        }
    }
}

/// A pending timer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timer {
    /// The instance it belongs to.
    pub instance: String,
    /// Unique within the instance.
    pub timer_id: String,
    /// When it is due.
    pub due_ms: i64,
    /// What to do when it fires.
    pub payload: Value,
}

/// Amounts one shared counter holds ([`crate::Store::add_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    /// Tool calls.
    pub tool_calls: u64,
    /// Language-model calls.
    pub llm_calls: u64,
    /// Language-model tokens.
    pub llm_tokens: u64,
    /// Declared cost.
    pub cost: f64,
}

/// One shared counter: the operator's quotas, counted by every process that shares the
/// store (`weft_tools::shared`). A counter is its key's count in one period (an index since
/// the epoch) and is forgotten once the period ends.
#[derive(Debug, Clone, PartialEq)]
pub struct CountRow {
    /// Which quota (`tenant/acme`, `plan/acme/etl`, `planner/acme`).
    pub key: String,
    /// The period it counts.
    pub period: u64,
    /// When the period ends (epoch ms).
    pub ends_ms: i64,
    /// The amounts: what to add, or the counter's total.
    pub counts: Counts,
}

/// Outcome of [`crate::Store::record_effect`].
#[derive(Debug, Clone, PartialEq)]
pub enum EffectRecorded {
    /// The key was new; the outcome is now recorded.
    Inserted,
    /// The key was already recorded, with this outcome (the new one was not stored).
    AlreadyExists(Value),
}

/// Who owns an instance, until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The owning process.
    pub owner: String,
    /// When the lease runs out unless renewed.
    pub expires_at_ms: i64,
    /// The fencing token: 1 for the instance's first lease, one more each time another
    /// owner takes it over (renewing or re-taking one's own lease keeps it).
    #[serde(default)]
    pub epoch: u64,
}

impl Lease {
    /// The fence a holder of this lease writes with.
    pub fn fence(&self) -> Fence {
        Fence {
            owner: self.owner.clone(),
            epoch: self.epoch,
        }
    }
}

/// What a writer proves with [`crate::Store::append_fenced`]: it holds the instance's lease
/// as `owner` at `epoch` (from [`crate::Store::owner_of`] after acquiring it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The lease owner.
    pub owner: String,
    /// The lease's epoch when it was taken.
    pub epoch: u64,
}

/// Who writes a fenced batch ([`crate::Store::write_batch_fenced`]) and how long the
/// leases it takes last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseTerms {
    /// The lease owner (the writing process).
    pub owner: String,
    /// Lifetime of a lease taken in the batch.
    pub ttl_ms: i64,
    /// The caller's clock.
    pub now_ms: i64,
}

/// Rejects records the store cannot take, before any of them is written.
pub fn check_records(records: &[NewRecord]) -> Result<()> {
    for r in records {
        if r.kind.is_empty() {
            return Err(Error::invalid("a journal record needs a non-empty kind"));
        }
    }
    Ok(())
}

/// Current time in ms since the Unix epoch, for callers (never used by the store itself).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
