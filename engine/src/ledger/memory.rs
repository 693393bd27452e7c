//! The in-memory ledger: the same contract as SQLite (`tests/ledger_contract.rs`), kept in maps behind one mutex.
//! For simulations and tests; nothing survives the process.
//!
//! Every map is a fixed-seed hash map ([`crate::fastmap`]), which a simulation hits several times per step; the two
//! listings (unfinished and paused runs) are sorted before they are returned, so nothing a caller sees depends on
//! hashing, and inbox expiry removes every expired row, in whatever order. Every record of a run is also indexed by
//! run id (step keys, plans, resolutions, replay history), so [`Ledger::forget_run`] drops a finished run in time
//! proportional to its own size and a long simulation keeps bounded memory. Inbox rows are dropped by
//! [`Ledger::expire_inbox`] after the retention, and are kept small because a simulation holds days of them.
//! Transitions are decided by the pure core in `transition.rs`, shared with the SQLite ledger. Readers that need a
//! field or two borrow a record ([`Ledger::inspect`], [`Ledger::inspect_run`]) under the lock instead of copying it.

use std::sync::{Mutex, MutexGuard};

use super::transition::{self, ClaimEffect};
use super::{
    Claim, Claimed, CompactString, Completion, Delivery, Error, Intake, Ledger, Replay, ReplayEntry, ResolutionRecord,
    Result, RunRecord, RunStatus, StepRecord,
};
use crate::fastmap::{FastMap, FastSet};
use crate::key::Key;
use crate::webhook::{RUN_ID_HASH_BYTES, RUN_ID_PREFIX};

/// The in-memory ledger. Cheap to create; `Send + Sync`.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Boxed: a record is ~250 bytes, and the table moves its values when it grows. (Held in the table, stop 38
    /// measured more simulated cache misses: a claim wrote its record into a cold slot, where a box is a block just
    /// freed and still in cache.)
    steps: FastMap<Key, Box<StepRecord>>,
    /// Run id → the keys of its step records, in insertion order (a key is inserted once, when first claimed). A list
    /// of its own rather than held in the entry: the table's entries stay small (stop 38 measured an entry holding four
    /// keys: more simulated cache misses than the list's block, which comes warm from the allocator).
    keys_by_run: FastMap<CompactString, Vec<Key>>,
    plans: FastMap<Key, Plan>,
    /// Run id → the keys of its plans. Plans whose run is unknown (no step record, no run id given) are not indexed.
    plans_by_run: FastMap<CompactString, Vec<Key>>,
    runs: FastMap<CompactString, RunRecord>,
    /// Ids of pending or running runs, kept beside `runs` so the listing does not scan every run (it sorts them).
    unfinished: FastSet<CompactString>,
    paused: FastSet<CompactString>,
    /// (source, event id) → inbox row. Rows live for the inbox retention (days), so a simulation at many times the
    /// production rate holds millions: they are kept small, keyed by a 128-bit hash of the strings (see [`Ident`]),
    /// in a [`ShardedMap`] so that no single table of millions of rows is ever copied whole.
    inbox: ShardedMap<InboxRow>,
    /// (source, dedup key) → the (source, event id) of the inbox row that carries it, and that row's receipt time,
    /// so each map expires on its own.
    dedup: ShardedMap<DedupEntry>,
    rejected: Vec<Rejected>,
    resolutions: FastMap<String, Vec<ResolutionRecord>>,
    /// Run id → its replays, in the order they began (by replay number): written under the lock that begins each.
    replay_history: FastMap<CompactString, Vec<ReplayEntry>>,
}

#[derive(Debug)]
struct Plan {
    plan: Vec<u8>,
}

/// 32 bytes, so an inbox bucket is 48 with its key (it was 72 while the row also named its dedup entry).
#[derive(Debug)]
struct InboxRow {
    run_id: RowRunId,
    received_ms: u64,
}

#[derive(Debug)]
struct DedupEntry {
    event: Ident,
    received_ms: u64,
}

/// The run id an inbox row keeps. A webhook run id (`wh-` and 32 lowercase hex digits: [`crate::webhook::run_id`])
/// is kept as its 16 bytes, inline: as a string it was a separate 48-byte heap block in every row, and a simulation
/// holds millions of rows. Any other id is kept as it is; both give back the exact string.
#[derive(Debug, PartialEq, Eq)]
enum RowRunId {
    Webhook([u8; RUN_ID_HASH_BYTES]),
    Other(Box<str>),
}

impl RowRunId {
    fn new(run_id: &str) -> Self {
        let other = || RowRunId::Other(run_id.into());
        // Lowercase only: the id must read back exactly as it was given.
        let hex = run_id.strip_prefix(RUN_ID_PREFIX);
        match hex.and_then(|hex| crate::key::decode_hex(hex, crate::key::HexCase::Lower)) {
            Some(bytes) => RowRunId::Webhook(bytes),
            None => other(),
        }
    }

    fn to_run_id(&self) -> String {
        match self {
            RowRunId::Webhook(bytes) => {
                let mut out = String::with_capacity(RUN_ID_PREFIX.len() + 2 * RUN_ID_HASH_BYTES);
                out.push_str(RUN_ID_PREFIX);
                crate::key::push_hex(bytes, &mut out);
                out
            }
            RowRunId::Other(id) => id.to_string(),
        }
    }
}

/// An inbox identity: the first 128 bits of blake3 over a domain tag and the length-prefixed source and id. Two
/// different (source, id) pairs share one with probability about 2^-64 even among billions of events, so the ledger
/// treats it as the pair itself. (The SQLite ledger keeps the strings.) Keyed by the two strings, a row took 48 bytes of
/// `String`s and three heap blocks in a B-tree, and its dedup entry as much again in a second one.
type Ident = [u8; 16];

fn ident(domain: &[u8], source: &str, id: &str) -> Ident {
    let mut hasher = blake3::Hasher::new();
    hasher.update(domain);
    for part in [source.as_bytes(), id.as_bytes()] {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    let mut out = [0; 16];
    out.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
    out
}

/// A map keyed by [`Ident`], split into [`ShardedMap::SHARDS`] hash tables by the identity's first byte.
///
/// A hash table grows by allocating one twice its size and moving every entry across, so while it grows the old
/// table and the new one are both live: three times the table's size at once. Inbox and dedup rows stay for days, so
/// in a long simulation each table holds millions (`mixed` adds about 0.075 per step; at 3.67 M rows a table of 2^22
/// buckets of 41 or 49 bytes doubles). A 50 M-step run whose two tables doubled near its end peaked at 1,146 MiB
/// against 419 MB just before. Split in 64, the rows fill the tables evenly (the identities are blake3 bytes), so
/// they all double within a few per cent of rows of each other, but one at a time: the same run peaks at 822 MiB,
/// the size after growing plus one table's move. A lookup costs the same: the first byte picks the table, then one
/// probe.
#[derive(Debug)]
struct ShardedMap<V> {
    shards: Box<[FastMap<Ident, V>]>,
}

impl<V> Default for ShardedMap<V> {
    fn default() -> Self {
        ShardedMap { shards: (0..Self::SHARDS).map(|_| FastMap::default()).collect() }
    }
}

impl<V> ShardedMap<V> {
    const SHARDS: usize = 64;

    /// The table an identity's row is in.
    fn shard_of(ident: &Ident) -> usize {
        ident[0] as usize % Self::SHARDS
    }

    fn get(&self, ident: &Ident) -> Option<&V> {
        self.shards[Self::shard_of(ident)].get(ident)
    }

    fn insert(&mut self, ident: Ident, value: V) {
        self.shards[Self::shard_of(&ident)].insert(ident, value);
    }

    fn len(&self) -> usize {
        self.shards.iter().map(FastMap::len).sum()
    }

    /// Keeps the entries `keep` says to. Visits the shards in order and each table in its own order, so only a
    /// `keep` whose answer does not depend on the order may be used (expiry by receipt time).
    fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        for shard in self.shards.iter_mut() {
            shard.retain(|_, value| keep(value));
        }
    }
}

const INBOX_EVENT_TAG: &[u8] = b"flow/memory-inbox/event";
const INBOX_DEDUP_TAG: &[u8] = b"flow/memory-inbox/dedup";

#[derive(Debug)]
#[allow(dead_code, reason = "kept as a record of the rejection; only the receipt time is read (by expiry)")]
struct Rejected {
    source: String,
    event_id: String,
    reason: String,
    received_ms: u64,
}

impl MemoryLedger {
    /// Sets run `run_id` to `status` and returns whether it wrote: with `replays` given (a drive's end,
    /// [`Ledger::finish_drive`]), only while the run is still that drive's ([`RunRecord::walked_by`]).
    fn set_status(
        &self,
        run_id: &str,
        replays: Option<u32>,
        status: RunStatus,
        reason: Option<&str>,
        now_ms: u64,
    ) -> Result<bool> {
        let mut inner = self.lock();
        let Some(run) = inner.runs.get_mut(run_id) else {
            return Err(Error::NotFound { what: format!("run {run_id}") });
        };
        if replays.is_some_and(|replays| !run.walked_by(replays)) {
            return Ok(false);
        }
        let old = run.status;
        run.status = status;
        run.reason = reason.map(str::to_owned);
        run.updated_ms = now_ms;
        inner.set_run_indexes(run_id, Some(old), status);
        Ok(true)
    }
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of entries held in every map and index, inbox excluded (inbox rows leave by expiry): for tests
    /// that check `forget_run` keeps memory bounded.
    pub fn entry_count(&self) -> usize {
        let inner = self.lock();
        inner.steps.len()
            + inner.keys_by_run.len()
            + inner.plans.len()
            + inner.plans_by_run.len()
            + inner.runs.len()
            + inner.unfinished.len()
            + inner.paused.len()
            + inner.resolutions.len()
            + inner.replay_history.len()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves maps that may be half-updated; refusing to go on is the only safe
        // reaction, and it is a bug elsewhere anyway.
        self.inner.lock().expect("the memory ledger's mutex was poisoned by a panic during a write")
    }
}

impl Inner {
    fn set_run_indexes(&mut self, run_id: &str, old: Option<RunStatus>, new: RunStatus) {
        if old == Some(new) || (old.is_some_and(RunStatus::is_unfinished) && new.is_unfinished()) {
            return;
        }
        match old {
            Some(RunStatus::Pending | RunStatus::Running) => {
                self.unfinished.remove(run_id);
            }
            Some(RunStatus::Paused) => {
                self.paused.remove(run_id);
            }
            _ => {}
        }
        match new {
            RunStatus::Pending | RunStatus::Running => {
                self.unfinished.insert(run_id.into());
            }
            RunStatus::Paused => {
                self.paused.insert(run_id.into());
            }
            RunStatus::Succeeded | RunStatus::Failed => {}
        }
    }

    fn insert_run(&mut self, run: RunRecord) -> bool {
        if self.runs.contains_key(run.run_id.as_str()) {
            return false;
        }
        self.set_run_indexes(&run.run_id, None, run.status);
        self.runs.insert(run.run_id.as_str().into(), run);
        true
    }

    fn record_plan(&mut self, run_id: &str, key: &Key, plan: &[u8]) -> Vec<u8> {
        if let Some(existing) = self.plans.get(key) {
            return existing.plan.clone();
        }
        file_under_run(&mut self.plans_by_run, run_id, *key, 1);
        self.plans.insert(*key, Plan { plan: plan.to_vec() });
        plan.to_vec()
    }
}

/// Adds `key` to the keys of `run_id` (whose id, inline up to 24 bytes, is copied only for its first key), in a list
/// with room for `capacity` keys when it is new.
fn file_under_run(by_run: &mut FastMap<CompactString, Vec<Key>>, run_id: &str, key: Key, capacity: usize) {
    match by_run.get_mut(run_id) {
        Some(keys) => keys.push(key),
        None => {
            let mut keys = Vec::with_capacity(capacity);
            keys.push(key);
            by_run.insert(run_id.into(), keys);
        }
    }
}

/// A run's list of keys starts with room for this many: a run has a few keys, and a list made for one would be
/// reallocated at the second (a `Vec` grows from one straight to four). Its plans start with room for one: most runs
/// record one plan or none.
const RUN_KEYS_CAPACITY: usize = 4;

/// The ids of a set, sorted (the listings promise id order).
fn sorted(ids: &FastSet<CompactString>) -> Vec<String> {
    // `String::from(&str)`, not `to_string`: a `CompactString`'s `to_string` goes through `Display` and the
    // formatting machinery, once per run a restarted worker lists.
    let mut out: Vec<String> = ids.iter().map(|id| String::from(id.as_str())).collect();
    out.sort_unstable();
    out
}

impl Ledger for MemoryLedger {
    fn get(&self, key: &Key) -> Result<Option<StepRecord>> {
        Ok(self.lock().steps.get(key).map(|record| StepRecord::clone(record)))
    }

    fn inspect(&self, key: &Key, read: &mut dyn FnMut(Option<&StepRecord>)) -> Result<()> {
        read(self.lock().steps.get(key).map(|record| &**record));
        Ok(())
    }

    fn claim(&self, claim: &Claim<'_>) -> Result<Claimed> {
        let mut inner = self.lock();
        if let Some(replays) = claim.walk
            && !inner.runs.get(claim.run_id).is_some_and(|run| run.walked_by(replays))
        {
            return Ok(Claimed::Superseded);
        }
        match transition::claim(inner.steps.get_mut(&claim.key).map(|r| &mut **r), claim)? {
            ClaimEffect::Insert(record, granted) => {
                file_under_run(&mut inner.keys_by_run, claim.run_id, claim.key, RUN_KEYS_CAPACITY);
                inner.steps.insert(claim.key, Box::new(record));
                Ok(granted)
            }
            ClaimEffect::Updated(granted) => Ok(granted),
            ClaimEffect::Conflict(conflict) => Ok(conflict),
        }
    }

    fn complete(&self, key: &Key, fence: u64, completion: Completion, now_ms: u64) -> Result<()> {
        let mut inner = self.lock();
        transition::complete(inner.steps.get_mut(key).map(|r| &mut **r), key, fence, completion, now_ms).map(|_| ())
    }

    fn renew(&self, key: &Key, fence: u64, lease_expiry_ms: u64) -> Result<()> {
        let mut inner = self.lock();
        transition::renew(inner.steps.get_mut(key).map(|r| &mut **r), key, fence, lease_expiry_ms)
    }

    fn record_plan(&self, run_id: &str, key: &Key, plan: &[u8], _now_ms: u64) -> Result<Vec<u8>> {
        Ok(self.lock().record_plan(run_id, key, plan))
    }

    fn get_plan(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        Ok(self.lock().plans.get(key).map(|p| p.plan.clone()))
    }

    fn run_plans(&self, run_id: &str) -> Result<Vec<(Key, Vec<u8>)>> {
        let inner = self.lock();
        let keys = inner.plans_by_run.get(run_id).map_or(&[][..], Vec::as_slice);
        let mut out: Vec<(Key, Vec<u8>)> =
            keys.iter().filter_map(|key| inner.plans.get(key).map(|p| (*key, p.plan.clone()))).collect();
        out.sort_by_key(|(key, _)| key.0);
        Ok(out)
    }

    fn create_run(&self, run: RunRecord) -> Result<bool> {
        Ok(self.lock().insert_run(run))
    }

    fn get_run(&self, run_id: &str) -> Result<Option<RunRecord>> {
        Ok(self.lock().runs.get(run_id).cloned())
    }

    fn inspect_run(&self, run_id: &str, read: &mut dyn FnMut(Option<&RunRecord>)) -> Result<()> {
        read(self.lock().runs.get(run_id));
        Ok(())
    }

    fn run_status(&self, run_id: &str) -> Result<Option<RunStatus>> {
        Ok(self.lock().runs.get(run_id).map(|run| run.status))
    }

    fn set_run_status(&self, run_id: &str, status: RunStatus, reason: Option<&str>, now_ms: u64) -> Result<()> {
        self.set_status(run_id, None, status, reason, now_ms).map(|_| ())
    }

    fn begin_replay(&self, run_id: &str, trigger: &[u8], now_ms: u64) -> Result<Replay> {
        let mut inner = self.lock();
        let Some(run) = inner.runs.get_mut(run_id) else {
            return Err(Error::NotFound { what: format!("run {run_id}") });
        };
        if !Replay::may_begin(run.status) {
            return Ok(Replay::Refused { status: run.status, reason: run.reason.clone() });
        }
        let old = run.status;
        run.status = RunStatus::Running;
        run.reason = None;
        // The trigger it replaces moves into the history, under the same lock: no replay without its entry.
        let replaced_trigger = std::mem::replace(&mut run.trigger, trigger.to_vec());
        run.updated_ms = now_ms;
        run.replays += 1;
        let entry = ReplayEntry { replay: run.replays, replaced_trigger, replayed_ms: now_ms };
        inner.set_run_indexes(run_id, Some(old), RunStatus::Running);
        inner.replay_history.entry(run_id.into()).or_default().push(entry);
        Ok(Replay::Begun)
    }

    fn replay_history(&self, run_id: &str) -> Result<Vec<ReplayEntry>> {
        Ok(self.lock().replay_history.get(run_id).cloned().unwrap_or_default())
    }

    fn finish_drive(
        &self,
        run_id: &str,
        replays: u32,
        status: RunStatus,
        reason: Option<&str>,
        now_ms: u64,
    ) -> Result<bool> {
        self.set_status(run_id, Some(replays), status, reason, now_ms)
    }

    fn unfinished_runs(&self) -> Result<Vec<String>> {
        Ok(sorted(&self.lock().unfinished))
    }

    fn paused_runs(&self) -> Result<Vec<String>> {
        Ok(sorted(&self.lock().paused))
    }

    fn intake(&self, delivery: &Delivery<'_>, run: RunRecord) -> Result<Intake> {
        let mut inner = self.lock();
        let event = ident(INBOX_EVENT_TAG, delivery.source, delivery.event_id);
        if let Some(row) = inner.inbox.get(&event) {
            return Ok(Intake::Duplicate { run_id: row.run_id.to_run_id() });
        }
        let dedup = delivery.dedup_key.map(|dedup_key| ident(INBOX_DEDUP_TAG, delivery.source, dedup_key));
        if let Some(dedup) = dedup {
            if let Some(first) = inner.dedup.get(&dedup) {
                let row = inner.inbox.get(&first.event).expect("a dedup key points at an inbox row that is gone");
                return Ok(Intake::Duplicate { run_id: row.run_id.to_run_id() });
            }
            inner.dedup.insert(dedup, DedupEntry { event, received_ms: delivery.received_ms });
        }
        inner.inbox.insert(event, InboxRow { run_id: RowRunId::new(&run.run_id), received_ms: delivery.received_ms });
        // The run id is derived from the event: a run that exists already (its inbox row expired, the sender
        // retried a week later) was started by this event, so this delivery starts nothing.
        let run_id = String::from(run.run_id.as_str());
        if inner.insert_run(run) { Ok(Intake::Started { run_id }) } else { Ok(Intake::Duplicate { run_id }) }
    }

    fn record_rejected(&self, source: &str, event_id: &str, reason: &str, now_ms: u64) -> Result<()> {
        self.lock().rejected.push(Rejected {
            source: source.to_owned(),
            event_id: event_id.to_owned(),
            reason: reason.to_owned(),
            received_ms: now_ms,
        });
        Ok(())
    }

    fn expire_inbox(&self, before_ms: u64) -> Result<u64> {
        let mut inner = self.lock();
        // Every expired row goes, so the order the hash maps visit them in cannot matter. A dedup entry carries its
        // row's receipt time, so it goes with its row.
        let inbox_before = inner.inbox.len();
        inner.inbox.retain(|row| row.received_ms >= before_ms);
        inner.dedup.retain(|entry| entry.received_ms >= before_ms);
        let expired = inbox_before - inner.inbox.len();
        let rejected_before = inner.rejected.len();
        inner.rejected.retain(|r| r.received_ms >= before_ms);
        Ok((expired + (rejected_before - inner.rejected.len())) as u64)
    }

    fn record_resolution(&self, resolution: &ResolutionRecord, status: RunStatus, reason: Option<&str>) -> Result<()> {
        resolution.check()?;
        let mut inner = self.lock();
        let run_id = resolution.run_id.as_str();
        let Some(run) = inner.runs.get_mut(run_id) else {
            return Err(Error::NotFound { what: format!("run {run_id}") });
        };
        resolution.check_waited_for(run.status, run.reason.as_deref())?;
        let old = run.status;
        run.status = status;
        run.reason = reason.map(str::to_owned);
        run.updated_ms = resolution.at_ms;
        inner.set_run_indexes(run_id, Some(old), status);
        inner.resolutions.entry(resolution.run_id.clone()).or_default().push(resolution.clone());
        Ok(())
    }

    fn resolutions(&self, run_id: &str) -> Result<Vec<ResolutionRecord>> {
        Ok(self.lock().resolutions.get(run_id).cloned().unwrap_or_default())
    }

    fn run_steps(&self, run_id: &str) -> Result<Vec<StepRecord>> {
        let inner = self.lock();
        let keys = inner.keys_by_run.get(run_id).map_or(&[][..], Vec::as_slice);
        let mut out: Vec<StepRecord> =
            keys.iter().filter_map(|key| inner.steps.get(key)).map(|r| (**r).clone()).collect();
        out.sort_by_key(|a| (a.last_attempt_ms, a.key.0));
        Ok(out)
    }

    fn forget_run(&self, run_id: &str) -> Result<()> {
        let mut inner = self.lock();
        for key in inner.keys_by_run.remove(run_id).unwrap_or_default() {
            inner.steps.remove(&key);
        }
        for key in inner.plans_by_run.remove(run_id).unwrap_or_default() {
            inner.plans.remove(&key);
        }
        inner.resolutions.remove(run_id);
        inner.replay_history.remove(run_id);
        if let Some(run) = inner.runs.remove(run_id) {
            inner.set_run_indexes(run_id, Some(run.status), RunStatus::Succeeded);
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{RowRunId, ShardedMap, ident};

    #[test]
    fn a_sharded_map_finds_every_row_and_keeps_exactly_what_retain_keeps() {
        let id = |i: u64| ident(b"test", "payments", &i.to_string());
        let mut map = ShardedMap::<u64>::default();
        for i in 0..2_000 {
            map.insert(id(i), i);
        }
        assert_eq!(map.len(), 2_000);
        assert_eq!(map.shards.iter().filter(|shard| !shard.is_empty()).count(), ShardedMap::<u64>::SHARDS);
        for i in 0..2_000 {
            assert_eq!(map.get(&id(i)), Some(&i));
        }
        assert_eq!(map.get(&id(2_000)), None);
        map.insert(id(7), 7_000);
        assert_eq!((map.len(), map.get(&id(7))), (2_000, Some(&7_000)), "an insert under a present identity replaces");
        map.retain(|&value| value >= 1_000);
        assert_eq!(map.len(), 1_001);
        for i in 0..2_000 {
            assert_eq!(map.get(&id(i)).is_some(), i >= 1_000 || i == 7, "{i}");
        }
    }

    #[test]
    fn inbox_rows_stay_small() {
        // A long simulation holds millions of these (see the `inbox` field); a bigger row is a bigger heap.
        assert_eq!(std::mem::size_of::<super::InboxRow>(), 32);
        assert_eq!(std::mem::size_of::<super::DedupEntry>(), 24);
    }

    #[test]
    fn row_run_ids_give_back_the_exact_string() {
        let webhook = crate::webhook::run_id("payments", "evt_1");
        assert!(matches!(RowRunId::new(&webhook), RowRunId::Webhook(_)));
        let kept_as_they_are = [
            "run-7",
            "wh-",
            "wh-0123",
            // Upper-case hex, a non-hex digit, one digit too many: not the webhook form, so kept as strings.
            "wh-0123456789ABCDEF0123456789abcdef",
            "wh-0123456789abcdeg0123456789abcdef",
            "wh-0123456789abcdef0123456789abcdef0",
            "",
        ];
        for id in kept_as_they_are {
            assert_eq!(RowRunId::new(id), RowRunId::Other(id.into()), "{id:?}");
        }
        for id in kept_as_they_are.iter().copied().chain([webhook.as_str(), "wh-00000000000000000000000000000000"]) {
            assert_eq!(RowRunId::new(id).to_run_id(), id);
        }
    }
}
