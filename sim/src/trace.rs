//! The trace: a 128-bit XXH3 hash over the ordered event log, and (with `--trace`) the readable events around the
//! first violation.
//!
//! Every engine event, every committed effect and every world event (a crash, a restart, a webhook delivery) is fed
//! to [`Trace::record`] in the order the simulation produced it. The hash covers a compact binary encoding of each
//! event (its length, then length-prefixed fields), so it is cheap enough to run on every event of a 10^8-step run,
//! and two runs that produced different events (or the same ones in another order) get different trace hashes but
//! with a chance of 2^-128 or so. It is a fingerprint runs compare, not a commitment anyone could attack: a
//! non-cryptographic hash does that at a tenth of blake3's cost here (docs/speed.md, stop 31).

use std::collections::VecDeque;
use xxhash_rust::xxh3::Xxh3;

/// Encoded events are hashed in batches of about this many bytes.
const HASH_BATCH_BYTES: usize = 16 * 1024;

/// How many events before the first violation the trace keeps.
pub const TRACE_BEFORE_MAX: usize = 200;
/// How many events after the first violation the trace keeps.
pub const TRACE_AFTER_MAX: usize = 100;

/// A field of an event, for hashing and for the readable trace.
#[derive(Debug, Clone, Copy)]
pub enum Field<'a> {
    Str(&'a str),
    U64(u64),
    Bytes(&'a [u8]),
    /// Text hashed as `hashed` (exactly as `Str(hashed)` is) and shown as `shown` in the readable trace: an event
    /// whose text was made readable after passing runs had it in their trace hash (`run-ended-still-driven`), so
    /// their hashes stay what they were.
    Shown {
        hashed: &'a str,
        shown: &'a str,
    },
    /// `action` hashed as `Str(action)` and shown as `connector.action`, as every other event names an action: the
    /// `effect` event hashed the bare action name before its line showed the connector.
    Action {
        connector: &'a str,
        action: &'a str,
    },
}

/// The hashed (and optionally kept) event log.
pub struct Trace {
    /// Boxed: XXH3's streaming state holds its own buffer (some 600 bytes).
    hasher: Box<Xxh3>,
    /// Encoded events not yet hashed. XXH3 hashes one byte stream however it is split; events are fed in batches of
    /// [`HASH_BATCH_BYTES`], one call per batch instead of one per event.
    pending: Vec<u8>,
    events: u64,
    /// Kept only when a readable trace was asked for.
    readable: Option<Readable>,
}

struct Readable {
    /// Only events that mention this run (a field equal to it), from the start; everything when `None`.
    run_filter: Option<String>,
    epoch_ms: u64,
    before: VecDeque<String>,
    after: Vec<String>,
    violation_at: Option<u64>,
    /// The first violation's description (`ID: ...`), as marked.
    violation: Option<String>,
}

impl Trace {
    pub fn new(keep_readable: bool) -> Self {
        Self::with_options(keep_readable, None, 0)
    }

    /// A trace that keeps readable events (times shown relative to `epoch_ms`); with `run_filter`, only the events
    /// of that run, every one of them from the start.
    pub fn with_options(keep_readable: bool, run_filter: Option<String>, epoch_ms: u64) -> Self {
        Trace {
            hasher: Box::new(Xxh3::new()),
            pending: Vec::with_capacity(HASH_BATCH_BYTES + 1024),
            events: 0,
            readable: keep_readable.then(|| Readable {
                run_filter,
                epoch_ms,
                before: VecDeque::with_capacity(TRACE_BEFORE_MAX),
                after: Vec::new(),
                violation_at: None,
                violation: None,
            }),
        }
    }

    /// Adds one event: `time_ms` is simulated time, `tag` names the kind of event.
    pub fn record(&mut self, time_ms: u64, tag: &str, fields: &[Field<'_>]) {
        self.events += 1;
        // Each event is its length (8 bytes) and then its encoding, which keeps the stream unambiguous.
        let buf = &mut self.pending;
        let start = buf.len();
        buf.extend_from_slice(&[0; 8]);
        buf.extend_from_slice(&time_ms.to_le_bytes());
        push_bytes(buf, tag.as_bytes());
        for field in fields {
            match field {
                Field::Str(s) => push_bytes(buf, s.as_bytes()),
                Field::U64(n) => buf.extend_from_slice(&n.to_le_bytes()),
                Field::Bytes(b) => push_bytes(buf, b),
                Field::Shown { hashed, .. } => push_bytes(buf, hashed.as_bytes()),
                Field::Action { action, .. } => push_bytes(buf, action.as_bytes()),
            }
        }
        let len = (buf.len() - start - 8) as u64;
        buf[start..start + 8].copy_from_slice(&len.to_le_bytes());
        if buf.len() >= HASH_BATCH_BYTES {
            self.hasher.update(buf);
            buf.clear();
        }
        if let Some(readable) = &mut self.readable {
            readable.push(self.events, time_ms, tag, fields);
        }
    }

    /// Marks the first violation, so the readable trace keeps the events around it.
    pub fn violation(&mut self, description: &str) {
        if let Some(readable) = &mut self.readable
            && readable.violation_at.is_none()
            && readable.run_filter.is_none()
        {
            readable.violation_at = Some(self.events);
            readable.after.push(format!("!!! first violation: {description}"));
            readable.violation = Some(description.to_owned());
        }
    }

    /// The run the first violation marked in the readable trace names ([`run_named`]), if any: the run whose every
    /// event `--trace-run` shows, from before the window of events this trace keeps.
    pub fn first_violation_run(&self) -> Option<&str> {
        self.readable.as_ref()?.violation.as_deref().and_then(run_named)
    }

    pub fn event_count(&self) -> u64 {
        self.events
    }

    /// The trace hash so far, 32 lowercase hex digits.
    pub fn hash_hex(&self) -> String {
        let mut hasher = self.hasher.clone();
        hasher.update(&self.pending);
        format!("{:032x}", hasher.digest128())
    }

    /// The readable trace: the events before the first violation, the violation, and the events after it (or the
    /// last events of the run when nothing was violated).
    pub fn readable_text(&self) -> Option<String> {
        let readable = self.readable.as_ref()?;
        let mut out = String::new();
        if let Some(run) = &readable.run_filter {
            out.push_str(&format!("# every event of run {run}\n"));
        }
        match readable.violation_at {
            _ if readable.run_filter.is_some() => {}
            Some(at) => out.push_str(&format!(
                "# the {} events before the first violation (event #{at}), the violation, and up to {} after it\n",
                readable.before.len(),
                TRACE_AFTER_MAX
            )),
            None => out.push_str(&format!("# no violation; the last {} events\n", readable.before.len())),
        }
        out.push_str(&legend(readable.epoch_ms));
        for line in &readable.before {
            out.push_str(line);
            out.push('\n');
        }
        for line in &readable.after {
            out.push_str(line);
            out.push('\n');
        }
        Some(out)
    }
}

impl Readable {
    fn push(&mut self, number: u64, time_ms: u64, tag: &str, fields: &[Field<'_>]) {
        if let Some(run) = &self.run_filter {
            if fields.iter().any(|f| matches!(f, Field::Str(s) if *s == run.as_str())) {
                self.after.push(format_event(number, time_ms.saturating_sub(self.epoch_ms), tag, fields));
            }
            return;
        }
        let line = format_event(number, time_ms.saturating_sub(self.epoch_ms), tag, fields);
        if self.violation_at.is_some() {
            if self.after.len() <= TRACE_AFTER_MAX {
                self.after.push(line);
            }
        } else {
            if self.before.len() == TRACE_BEFORE_MAX {
                self.before.pop_front();
            }
            self.before.push_back(line);
        }
    }
}

/// The readable trace's legend: what its columns are, and each kind of event's fields in order (the tags `world`
/// records; a test holds the two lists together). Every line starts with `# `, as the trace's headings do.
fn legend(epoch_ms: u64) -> String {
    let mut out = String::from(
        "# legend: #N t=S.mmms TAG FIELDS: the event's number among all the simulation's events (shown here or not),\n\
         #   the simulated time since the start, the event's kind, and its fields in the order below. W is a worker\n\
         #   (the one numbered after the last is the front door: the API and the webhook endpoint); a KEY or HASH \
         shows\n",
    );
    out.push_str(&format!(
        "#   its first 8 bytes in hex; a field ending _AT is the simulated clock in ms, which reads {epoch_ms} at \
         t=0.\n"
    ));
    for (tag, fields) in LEGEND.iter() {
        out.push_str(&format!("#   {tag:<23} {fields}\n"));
    }
    out.push_str(
        "#   !!! first violation: ID: DESCRIPTION (the invariant it breaks; as the results' first violation)\n",
    );
    out
}

/// Each event kind's tag and fields, in the trace's order: the engine's events, the fakes', the world's.
const LEGEND: &[(&str, &str)] = &[
    ("run-started", "W RUN WORKFLOW"),
    ("webhook-duplicate", "W SOURCE EVENT_ID RUN: a delivery of an event already taken (RUN: the run it started)"),
    ("webhook-rejected", "W SOURCE EVENT_ID REASON"),
    ("replayed", "W RUN STEP KEY: the key's stored output returned without a call"),
    ("plan-recorded", "W RUN STEP KEY WRITES REUSED PLAN_HASH (REUSED: 1 when the plan in force was reused)"),
    ("call-started", "W RUN STEP KEY SENT_KEY ACTION ATTEMPT (SENT_KEY: the key sent to the API)"),
    ("call-ended", "W RUN STEP KEY ACTION ATTEMPT OUTCOME"),
    ("lookup", "W RUN STEP KEY ACTION FOUND (FOUND: 1 when it adopted an earlier create)"),
    ("step-succeeded", "W RUN STEP KEY ACTION"),
    ("retry-scheduled", "W RUN STEP KEY ATTEMPT DELAY_MS"),
    ("run-paused", "W RUN STEP KEY REASON"),
    ("run-resolved", "W RUN KEY RESOLUTION: the engine applied a person's decision"),
    ("run-succeeded", "W RUN"),
    ("run-failed", "W RUN REASON"),
    ("event", "W TEXT: an engine event of a kind not listed here, as Rust debug text"),
    ("effect", "RUN ACTION SENT_KEY OBJECT VISIBLE_AT: a write committed at t; reads (lookups) see it from VISIBLE_AT"),
    ("fake-webhook", "SOURCE EVENT_ID: an event an API emitted"),
    ("crash-point", "W POINT RUN KEY: W stopped dead at POINT (a worker is then killed; the front door fails)"),
    ("worker-killed", "W"),
    ("worker-restarted", "W"),
    ("worker-stalled", "W STALL_MS"),
    ("worker-resumed", "W"),
    ("network-cut", "W UNTIL_AT: W reaches no API until then"),
    ("webhook-delivery", "EVENT_ID ATTEMPT: a delivery reached the front door"),
    ("inbox-expired", "ROWS: the webhook inbox forgot ROWS events past their retention"),
    ("person-resolved", "RUN RESOLUTION: a person decided on a paused run (as flow resolve does)"),
    ("person-found-not-paused", "RUN STATUS: the person found the run carried on, nothing to decide"),
    ("engine-error", "MESSAGE"),
    ("run-finished", "RUN STATUS: the run's last drive ended; its end-of-run checks ran"),
    ("heal", "(no fields): the faults stop; every run must now end within the heal phase (I8)"),
    ("end", "MS: the heal phase is over, MS after the start; what follows is the end-of-run accounting"),
    ("run-ended-still-driven", "RUN DETAIL: succeeded or failed while a drive still waits on a lease (meets I8)"),
    ("stuck-run", "RUN DETAIL: neither finished nor paused after the heal phase (I8; the first 3 runs)"),
];

/// The run a violation's description names: the id after the word `run` (`run run-53 step ...`, `... started run
/// wh-1f...`), else the first of an I8's examples (`... (e.g. run-1, run-2)`); `None` when it names none.
pub fn run_named(description: &str) -> Option<&str> {
    fn id(rest: &str) -> Option<&str> {
        let end = rest.find(|c: char| c.is_whitespace() || matches!(c, ':' | ',' | ')')).unwrap_or(rest.len());
        Some(&rest[..end]).filter(|id| !id.is_empty())
    }
    let after_word = description
        .match_indices("run ")
        .find(|(at, _)| *at == 0 || description[..*at].ends_with(' '))
        .and_then(|(at, word)| id(&description[at + word.len()..]));
    after_word.or_else(|| description.split_once("(e.g. ").and_then(|(_, rest)| id(rest)))
}

fn format_event(number: u64, time_ms: u64, tag: &str, fields: &[Field<'_>]) -> String {
    let mut line = format!("#{number:<10} t={}.{:03}s {tag:<18}", time_ms / 1000, time_ms % 1000);
    for field in fields {
        match field {
            Field::Str(s) => {
                line.push(' ');
                line.push_str(s);
            }
            Field::U64(n) => line.push_str(&format!(" {n}")),
            Field::Bytes(b) => {
                line.push(' ');
                for byte in b.iter().take(8) {
                    line.push_str(&format!("{byte:02x}"));
                }
            }
            Field::Shown { shown, .. } => {
                line.push(' ');
                line.push_str(shown);
            }
            Field::Action { connector, action } => {
                line.push(' ');
                line.push_str(connector);
                line.push('.');
                line.push_str(action);
            }
        }
    }
    line
}

fn push_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_events_same_hash_and_any_change_changes_it() {
        let run = |tag: &str, n: u64| {
            let mut t = Trace::new(false);
            t.record(1, "call", &[Field::Str("run-1"), Field::U64(n)]);
            t.record(2, tag, &[Field::Str("run-1")]);
            t.hash_hex()
        };
        assert_eq!(run("ok", 1), run("ok", 1));
        assert_ne!(run("ok", 1), run("ok", 2));
        assert_ne!(run("ok", 1), run("ko", 1));
    }

    #[test]
    fn the_hash_is_of_the_stream_however_it_is_batched() {
        // Events past one batch are hashed as they fill it; the hash is of the whole stream all the same.
        let mut t = Trace::new(false);
        let mut stream = Vec::new();
        for i in 0..(3 * HASH_BATCH_BYTES as u64 / 20) {
            t.record(i, "tick", &[Field::U64(i)]);
            let event: Vec<u8> = [&i.to_le_bytes()[..], &4u32.to_le_bytes(), b"tick", &i.to_le_bytes()].concat();
            stream.extend_from_slice(&(event.len() as u64).to_le_bytes());
            stream.extend_from_slice(&event);
        }
        assert!(stream.len() > 2 * HASH_BATCH_BYTES);
        let hash = t.hash_hex();
        assert_eq!(hash, format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&stream)));
        assert_eq!(hash.len(), 32);
        assert_eq!(hash, t.hash_hex(), "reading the hash changes nothing");
    }

    #[test]
    fn field_boundaries_are_unambiguous() {
        let mut a = Trace::new(false);
        a.record(0, "e", &[Field::Str("ab"), Field::Str("c")]);
        let mut b = Trace::new(false);
        b.record(0, "e", &[Field::Str("a"), Field::Str("bc")]);
        assert_ne!(a.hash_hex(), b.hash_hex());
    }

    #[test]
    fn readable_trace_keeps_events_around_the_first_violation() {
        let mut t = Trace::new(true);
        for i in 0..(TRACE_BEFORE_MAX as u64 + 50) {
            t.record(i, "tick", &[Field::U64(i)]);
        }
        t.violation("I1 duplicate");
        t.record(999, "after", &[]);
        let text = t.readable_text().unwrap();
        assert!(text.contains("first violation: I1 duplicate"));
        assert!(text.contains("after"));
        assert_eq!(text.lines().filter(|l| l.contains("tick")).count(), TRACE_BEFORE_MAX);
    }
}
