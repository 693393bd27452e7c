//! Workflow definitions: named steps with templated inputs, read from TOML or JSON and compiled once.
//!
//! A workflow is a name and a list of steps, run in order. Each step is exactly one of:
//! - a single write: `action = "connector.action"` with `inputs`;
//! - several writes: `writes = [{ action, inputs }, ...]`, whose list (the plan) is recorded before the first runs;
//! - an agent step: `planner = "name"` with `inputs`; the planner proposes the writes, the plan is recorded, then
//!   each write runs with its own key.
//!
//! Inputs are JSON (or TOML) values whose strings may be templates:
//! - a string that is exactly `"{{trigger.a.b}}"` or `"{{steps.ID.output.x}}"` becomes that value, type kept;
//! - `{{...}}` inside a longer string interpolates the value as text (strings bare, other values as JSON);
//! - a path segment that is a number indexes an array (`{{steps.writes.output.0.id}}`);
//! - `{{{{` is a literal `{{` (`"{{{{trigger.a}}"` is the text `{{trigger.a}}`); `}}` outside a reference is text;
//!   three braces (`{{{trigger.a}}}`, another template language's raw-value form) are refused, naming the right form,
//!   so a `{` cannot stand directly before a reference.
//!
//! `steps.ID` may only name an earlier step, and a step id holds no whitespace, `.`, `{`, `}`, `[` or `]`, so that
//! a reference can name it. A path that does not resolve at run time renders as `null` (as text: empty). An optional
//! `volatile = ["path", ...]` names input fields sent to the connector but left out of the key (see
//! [`crate::key::without_volatile`]); each path must name a field of the step's inputs (of a writes step: of one of
//! its writes' inputs), or reach into a value a reference renders. Numbers are held to the canonical JSON parser's
//! rule in TOML as in JSON, literal by literal ([`check_toml_number_literals`]). `engine/workflows/signup.toml` is
//! a commented example.

use serde::Deserialize;
use serde_json::Value;

use crate::doc::{Doc, Obj, Str};

/// A validation or parse error; names the workflow, the step and the field where it can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub workflow: String,
    /// The step id, or empty for the workflow itself.
    pub step: String,
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.step.is_empty() {
            write!(f, "workflow {:?}, field `{}`: {}", self.workflow, self.field, self.message)
        } else {
            write!(f, "workflow {:?}, step {:?}, field `{}`: {}", self.workflow, self.step, self.field, self.message)
        }
    }
}

impl std::error::Error for Error {}

fn error(workflow: &str, step: &str, field: &str, message: impl Into<String>) -> Error {
    Error { workflow: workflow.to_string(), step: step.to_string(), field: field.to_string(), message: message.into() }
}

/// What JSON's canonical parser reads for a TOML number, or `Err` with why JSON has none: TOML's `_` separators
/// removed, a leading `+` dropped, a hexadecimal, octal or binary integer written in decimal, `inf` and `nan` refused.
/// `None` for a value that is not a number.
fn toml_number_as_json(value: &toml::de::DeValue<'_>) -> Option<Result<String, &'static str>> {
    const NOT_JSON: &str = "not a number JSON can hold, so no step's inputs could be keyed by it";
    let decimal = |text: &str| text.strip_prefix('+').unwrap_or(text).replace('_', "");
    Some(match value {
        toml::de::DeValue::Integer(integer) if integer.radix() == 10 => Ok(decimal(integer.as_str())),
        // A TOML integer with a radix is unsigned and, once toml has read it, fits an i64.
        toml::de::DeValue::Integer(integer) => {
            u128::from_str_radix(&integer.as_str().replace('_', ""), integer.radix())
                .map(|n| n.to_string())
                .map_err(|_| "not an integer TOML can hold")
        }
        toml::de::DeValue::Float(float) if float.as_str().contains("inf") || float.as_str().contains("nan") => {
            Err(NOT_JSON)
        }
        toml::de::DeValue::Float(float) => Ok(decimal(float.as_str())),
        _ => return None,
    })
}

/// Why the canonical JSON parser ([`crate::canonical::canonicalize_bytes`]) refuses the number `json`, if it does, in
/// that parser's own words (the byte offset, always 0 in a lone number, left out).
fn canonical_refusal(json: &str) -> Option<String> {
    let error = crate::canonical::canonicalize_bytes(json.as_bytes()).err()?;
    Some(error.to_string().replacen(" at byte 0", "", 1))
}

/// The first number in `value` (at the dotted path `at`, with its literal text in `text`) that the canonical JSON
/// parser refuses, as `path = literal: why`.
fn refused_toml_literal(value: &toml::Spanned<toml::de::DeValue<'_>>, text: &str, at: &str) -> Option<String> {
    match value.get_ref() {
        toml::de::DeValue::Array(items) => {
            items.iter().enumerate().find_map(|(n, item)| refused_toml_literal(item, text, &format!("{at}[{n}]")))
        }
        toml::de::DeValue::Table(table) => refused_toml_member(table, text, at),
        number => {
            let why = match toml_number_as_json(number)? {
                Ok(json) => canonical_refusal(&json)?,
                Err(why) => why.to_owned(),
            };
            let literal = text.get(value.span()).unwrap_or("?");
            Some(format!("{at} = {literal}: {why}"))
        }
    }
}

fn refused_toml_member(table: &toml::de::DeTable<'_>, text: &str, at: &str) -> Option<String> {
    table.iter().find_map(|(key, item)| {
        let key = key.get_ref();
        refused_toml_literal(item, text, &if at.is_empty() { key.to_string() } else { format!("{at}.{key}") })
    })
}

/// Refuses a number in TOML `text` (under its top-level key `under`, or anywhere when `under` is empty) that the
/// canonical JSON parser ([`crate::canonical`]) refuses in JSON: each number's literal text, converted from TOML's
/// spelling to JSON's (`_` separators removed, a leading `+` dropped, a hexadecimal, octal or binary integer written
/// in decimal), is judged by that parser's own code, and `inf` and `nan`, which JSON has not (the conversion to JSON
/// would turn them into `null`), are refused. So a TOML definition reads exactly the numbers its JSON twin reads:
/// `9007199254740993.0` and `1e-400` are refused (a double would merge them with `...992` and `0`), while
/// `1152921504606847000`, the canonical spelling of the double 2^60, is accepted. The error names the dotted path
/// of the number and its literal (`steps[0].inputs.big = 9007199254740993.0: ...`); a text TOML cannot read is
/// refused with toml's own message.
pub fn check_toml_number_literals(text: &str, under: &str) -> Result<(), String> {
    let document = toml::de::DeTable::parse(text).map_err(|e| e.to_string())?;
    let refused = if under.is_empty() {
        refused_toml_member(document.get_ref(), text, "")
    } else {
        document.get_ref().get(under).and_then(|value| refused_toml_literal(value, text, under))
    };
    refused.map_or(Ok(()), Err)
}

/// The file format, as written.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub steps: Vec<StepDef>,
}

/// One step, as written.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct StepDef {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes: Option<Vec<WriteDef>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volatile: Vec<String>,
}

/// One write of a multi-write step, as written.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct WriteDef {
    pub action: String,
    #[serde(default)]
    pub inputs: Option<Value>,
}

/// Where a template reference points.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Trigger,
    /// The output of the step at this index (always an earlier one).
    Step(usize),
}

/// A reference: a source and a path into it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    pub source: Source,
    pub path: Vec<String>,
}

/// A part of an interpolated string.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    Reference(Reference),
}

/// A compiled input template.
#[derive(Debug, Clone, PartialEq)]
pub enum Template {
    /// No template anywhere inside: cloned as is (a reference count).
    Literal(Doc),
    /// A string that is exactly one reference: the referenced value, type kept.
    Reference(Reference),
    Interpolated(Vec<Part>),
    Array(Vec<Template>),
    /// Members in canonical order (the UTF-16 order of their names), so a rendered object is collected as it is.
    Object(Vec<(Str, Template)>),
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    Action { action: String, inputs: Template },
    Writes(Vec<(String, Template)>),
    Agent { planner: String, inputs: Template },
}

/// A compiled step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub id: String,
    pub kind: StepKind,
    pub volatile: Vec<String>,
}

/// A compiled workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    pub name: String,
    pub steps: Vec<Step>,
}

impl Workflow {
    /// Reads a definition from TOML text, which holds each key of a table once (TOML refuses a repeated one), and
    /// whose numbers are held to the canonical JSON parser's rule, literal by literal ([`check_toml_number_literals`]).
    pub fn from_toml(text: &str) -> Result<Self, Error> {
        let table: toml::Table = toml::from_str(text).map_err(|e| error("?", "", "(file)", e.to_string()))?;
        check_toml_number_literals(text, "").map_err(|e| error("?", "", "(file)", e))?;
        let def = WorkflowDef::deserialize(table).map_err(|e| error("?", "", "(file)", e.to_string()))?;
        Self::compile(&def)
    }

    /// Reads a definition from JSON text strictly, with the parser step inputs go through
    /// ([`crate::canonical::canonicalize_bytes`]): a member named twice in one object (two `inputs` of a step, two
    /// `email`s in one inputs object), which plain serde_json settles silently by keeping the last, is refused with
    /// its name and byte offset, and so is a number no double holds exactly (no step's inputs could be keyed by it).
    pub fn from_json(text: &str) -> Result<Self, Error> {
        crate::canonical::canonicalize_bytes(text.as_bytes()).map_err(|e| error("?", "", "(file)", e.to_string()))?;
        let def: WorkflowDef = serde_json::from_str(text).map_err(|e| error("?", "", "(file)", e.to_string()))?;
        Self::compile(&def)
    }

    /// Validates and compiles a definition: step ids unique, non-empty and nameable by a template (no whitespace,
    /// `.`, `{`, `}`, `[` or `]`), exactly one of `action`/`writes`/`planner`, actions written `connector.action`,
    /// templates well formed and naming only earlier steps.
    pub fn compile(def: &WorkflowDef) -> Result<Self, Error> {
        let wf = def.name.as_str();
        if wf.is_empty() {
            return Err(error(wf, "", "name", "must not be empty"));
        }
        if def.steps.is_empty() {
            return Err(error(wf, "", "steps", "a workflow needs at least one step"));
        }
        let mut ids: Vec<&str> = Vec::with_capacity(def.steps.len());
        let mut steps = Vec::with_capacity(def.steps.len());
        for step in &def.steps {
            let id = step.id.as_str();
            if id.is_empty() {
                return Err(error(wf, "", "id", format!("step number {} has an empty id", steps.len() + 1)));
            }
            check_step_id(id).map_err(|m| error(wf, id, "id", m))?;
            if ids.contains(&id) {
                return Err(error(wf, id, "id", "duplicate step id"));
            }
            let kinds = [step.action.is_some(), step.writes.is_some(), step.planner.is_some()];
            if kinds.iter().filter(|k| **k).count() != 1 {
                return Err(error(wf, id, "action", "a step needs exactly one of `action`, `writes`, `planner`"));
            }
            let compile = |value: &Option<Value>, field: &str| {
                compile_template(value.as_ref().unwrap_or(&Value::Object(Default::default())), &ids)
                    .map_err(|m| error(wf, id, field, m))
            };
            let kind = if let Some(action) = &step.action {
                check_action(action).map_err(|m| error(wf, id, "action", m))?;
                StepKind::Action { action: action.clone(), inputs: compile(&step.inputs, "inputs")? }
            } else if let Some(writes) = &step.writes {
                if step.inputs.is_some() {
                    return Err(error(wf, id, "inputs", "a `writes` step carries inputs per write"));
                }
                if writes.is_empty() {
                    return Err(error(wf, id, "writes", "must list at least one write"));
                }
                let mut compiled = Vec::with_capacity(writes.len());
                for (index, write) in writes.iter().enumerate() {
                    check_action(&write.action).map_err(|m| error(wf, id, &format!("writes[{index}].action"), m))?;
                    compiled.push((write.action.clone(), compile(&write.inputs, &format!("writes[{index}].inputs"))?));
                }
                StepKind::Writes(compiled)
            } else {
                let planner = step.planner.clone().expect("checked above");
                if planner.is_empty() {
                    return Err(error(wf, id, "planner", "must not be empty"));
                }
                StepKind::Agent { planner, inputs: compile(&step.inputs, "inputs")? }
            };
            for path in &step.volatile {
                if path.is_empty() || path.split('.').any(str::is_empty) {
                    return Err(error(wf, id, "volatile", format!("{path:?} is not a path like `a.b`")));
                }
                check_volatile(path, &kind).map_err(|m| error(wf, id, "volatile", m))?;
            }
            ids.push(id);
            steps.push(Step { id: step.id.clone(), kind, volatile: step.volatile.clone() });
        }
        Ok(Workflow { name: def.name.clone(), steps })
    }

    /// For each step, whether a later step's template names its output. An output nobody names is never read again
    /// in a drive, so a re-drive that replays the step need not parse it back.
    pub fn outputs_referenced(&self) -> Vec<bool> {
        let mut referenced = vec![false; self.steps.len()];
        for step in &self.steps {
            match &step.kind {
                StepKind::Action { inputs, .. } | StepKind::Agent { inputs, .. } => mark_steps(inputs, &mut referenced),
                StepKind::Writes(writes) => writes.iter().for_each(|(_, t)| mark_steps(t, &mut referenced)),
            }
        }
        referenced
    }
}

/// Marks every step `template` names.
fn mark_steps(template: &Template, referenced: &mut [bool]) {
    let mut mark = |reference: &Reference| {
        if let Source::Step(index) = reference.source {
            referenced[index] = true;
        }
    };
    match template {
        Template::Literal(_) => {}
        Template::Reference(reference) => mark(reference),
        Template::Interpolated(parts) => parts.iter().for_each(|part| {
            if let Part::Reference(reference) = part {
                mark(reference);
            }
        }),
        Template::Array(items) => items.iter().for_each(|t| mark_steps(t, referenced)),
        Template::Object(members) => members.iter().for_each(|(_, t)| mark_steps(t, referenced)),
    }
}

/// Refuses a step id a template could not name. A reference `{{steps.ID.output...}}` is split at every `.` (so
/// `pay.customer` would be read as step `pay`) and ends at the first `}}`; whitespace, braces and brackets are
/// refused with them, so that a reference to a step reads as exactly that step's id.
fn check_step_id(id: &str) -> Result<(), String> {
    let refused = |c: char| c.is_whitespace() || matches!(c, '.' | '{' | '}' | '[' | ']');
    let Some(c) = id.chars().find(|c| refused(*c)) else { return Ok(()) };
    let why = if c == '.' {
        let first = id.split('.').next().unwrap_or_default();
        format!(", which separates the segments of a reference: `{{{{steps.{id}.output}}}}` would name step {first:?}")
    } else {
        String::new()
    };
    Err(format!(
        "step id {id:?} holds {c:?}{why}. A step id holds no whitespace, `.`, `{{`, `}}`, `[` or `]`, so that a \
         template names it as written (use letters, digits, `-` or `_`)"
    ))
}

/// Refuses a volatile path that names nothing the step sends: an action step's volatile paths are left out of its
/// inputs, and a writes step's out of each write's inputs, so a path must name a field of the inputs (of at least one
/// write). A part of the inputs that one reference renders (`"{{trigger.meta}}"`) may hold any field, so a path into
/// it is taken as it is. An agent step's paths are left out of its inputs and of the inputs of the writes its planner
/// proposes, which are known only at run time, so they are not checked.
fn check_volatile(path: &str, kind: &StepKind) -> Result<(), String> {
    let problems: Vec<String> = match kind {
        StepKind::Action { inputs, .. } => volatile_unnamed(path, inputs, "inputs").into_iter().collect(),
        StepKind::Writes(writes) => {
            let problems: Vec<Option<String>> = writes
                .iter()
                .enumerate()
                .map(|(index, (_, inputs))| volatile_unnamed(path, inputs, &format!("writes[{index}].inputs")))
                .collect();
            // One write that has the field is enough: the path is left out of every write's inputs.
            problems.into_iter().collect::<Option<Vec<String>>>().unwrap_or_default()
        }
        StepKind::Agent { .. } => Vec::new(),
    };
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!("{path:?} names no input field: {}", problems.join("; ")))
}

/// What a compiled inputs template is at one point of a path: still a template, or a literal document inside it.
enum AtPath<'t> {
    Template(&'t Template),
    Doc(&'t Doc),
}

/// Where the volatile `path` stops naming anything in `inputs` (a compiled template, called `root`), with the fields
/// there are, or `None` when it names a field or may name one (it reaches a value a reference renders).
fn volatile_unnamed(path: &str, inputs: &Template, root: &str) -> Option<String> {
    let mut at = root.to_owned();
    let mut node = AtPath::Template(inputs);
    for segment in path.split('.') {
        let names: Vec<&str> = match node {
            AtPath::Template(Template::Reference(_)) => return None,
            AtPath::Template(Template::Literal(doc)) | AtPath::Doc(doc) => match doc {
                Doc::Object(obj) => match obj.get(segment) {
                    Some(child) => {
                        node = AtPath::Doc(child);
                        at = format!("{at}.{segment}");
                        continue;
                    }
                    None => obj.iter().map(|(name, _)| name.as_str()).collect(),
                },
                _ => return Some(format!("`{at}` is not an object")),
            },
            AtPath::Template(Template::Object(members)) => match members.iter().find(|(name, _)| name == segment) {
                Some((_, child)) => {
                    node = AtPath::Template(child);
                    at = format!("{at}.{segment}");
                    continue;
                }
                None => members.iter().map(|(name, _)| name.as_str()).collect(),
            },
            AtPath::Template(Template::Interpolated(_) | Template::Array(_)) => {
                return Some(format!("`{at}` is not an object"));
            }
        };
        if names.is_empty() {
            return Some(format!("`{at}` has no fields"));
        }
        return Some(format!("`{at}` has `{}`", names.join("`, `")));
    }
    None
}

/// Splits `connector.action`.
pub fn split_action(action: &str) -> Option<(&str, &str)> {
    let (connector, name) = action.split_once('.')?;
    (!connector.is_empty() && !name.is_empty()).then_some((connector, name))
}

fn check_action(action: &str) -> Result<(), String> {
    split_action(action).map(|_| ()).ok_or_else(|| format!("{action:?} is not written `connector.action`"))
}

fn compile_template(value: &Value, earlier: &[&str]) -> Result<Template, String> {
    Ok(match value {
        Value::String(text) if text.contains("{{") => compile_string(text, earlier)?,
        Value::Array(items) => {
            let compiled = items.iter().map(|v| compile_template(v, earlier)).collect::<Result<Vec<_>, _>>()?;
            if compiled.iter().all(|t| matches!(t, Template::Literal(_))) {
                Template::Literal(literal_doc(value))
            } else {
                Template::Array(compiled)
            }
        }
        Value::Object(map) => {
            let mut compiled = Vec::with_capacity(map.len());
            for (k, v) in map {
                compiled.push((Str::from(k), compile_template(v, earlier).map_err(|m| format!("at `{k}`: {m}"))?));
            }
            if compiled.iter().all(|(_, t)| matches!(t, Template::Literal(_))) {
                Template::Literal(literal_doc(value))
            } else {
                compiled.sort_by(|a, b| crate::canonical::cmp_utf16(&a.0, &b.0));
                Template::Object(compiled)
            }
        }
        other => Template::Literal(Doc::from(other)),
    })
}

/// The bound on template references in one string, so a hostile definition cannot make compilation quadratic.
const REFERENCE_COUNT_MAX: usize = 64;

/// The escape of a literal `{{` in a string: `{{{{`. No reference starts with `{`, so a `{{` followed by `{{` never
/// opened a valid reference, and no template that compiled without the escape reads differently with it.
const ESCAPED_BRACES: &str = "{{{{";

fn compile_string(text: &str, earlier: &[&str]) -> Result<Template, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        if parts.len() > 2 * REFERENCE_COUNT_MAX {
            return Err(format!("more than {REFERENCE_COUNT_MAX} references in one string"));
        }
        literal.push_str(&rest[..open]);
        if rest[open..].starts_with(ESCAPED_BRACES) {
            literal.push_str("{{");
            rest = &rest[open + ESCAPED_BRACES.len()..];
            continue;
        }
        if !literal.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut literal)));
        }
        let after = &rest[open + 2..];
        if after.starts_with('{') {
            // Three braces: no reference starts with `{`. Most likely a template language's raw-value form.
            // Quoted as written: to the end of the reference and any braces that close it (`{{{x}}}`).
            let shown = after.find("}}").map_or(&rest[open..], |close| {
                let end = open + 2 + close + 2;
                &rest[open..end + rest[end..].bytes().take_while(|b| *b == b'}').count()]
            });
            return Err(format!(
                "`{shown}` opens a reference with three braces: a reference is written `{{{{trigger...}}}}` or \
                 `{{{{steps...}}}}` (there is no raw-value form; every value is inserted as it is), and `{{{{{{{{` \
                 writes a literal `{{{{`"
            ));
        }
        let close = after.find("}}").ok_or_else(|| format!("unclosed `{{{{` in {text:?}"))?;
        parts.push(Part::Reference(compile_reference(after[..close].trim(), earlier)?));
        rest = &after[close + 2..];
    }
    literal.push_str(rest);
    if parts.is_empty() {
        // Only escaped braces: a literal string.
        return Ok(Template::Literal(Doc::from(literal.as_str())));
    }
    if !literal.is_empty() {
        parts.push(Part::Text(literal));
    }
    if let [Part::Reference(reference)] = parts.as_slice() {
        return Ok(Template::Reference(reference.clone()));
    }
    Ok(Template::Interpolated(parts))
}

/// The document of `value`, a part of the inputs with no reference in it: `value` itself, with each escaped `{{{{`
/// of its strings written `{{` (every `{{` in such a part starts an escape).
fn literal_doc(value: &Value) -> Doc {
    fn has_braces(value: &Value) -> bool {
        match value {
            Value::String(text) => text.contains("{{"),
            Value::Array(items) => items.iter().any(has_braces),
            Value::Object(map) => map.values().any(has_braces),
            _ => false,
        }
    }
    fn unescaped(value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(text.replace(ESCAPED_BRACES, "{{")),
            Value::Array(items) => Value::Array(items.iter().map(unescaped).collect()),
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), unescaped(v))).collect()),
            other => other.clone(),
        }
    }
    if has_braces(value) { Doc::from(&unescaped(value)) } else { Doc::from(value) }
}

fn compile_reference(text: &str, earlier: &[&str]) -> Result<Reference, String> {
    let mut segments = text.split('.');
    match segments.next() {
        Some("trigger") => {
            let path: Vec<String> = segments.map(str::to_string).collect();
            if path.iter().any(String::is_empty) {
                return Err(format!("`{{{{{text}}}}}` has an empty path segment"));
            }
            Ok(Reference { source: Source::Trigger, path })
        }
        Some("steps") => {
            let id = segments.next().ok_or_else(|| format!("`{{{{{text}}}}}` names no step"))?;
            let index = earlier
                .iter()
                .position(|e| *e == id)
                .ok_or_else(|| format!("`{{{{{text}}}}}` names step {id:?}, which is not an earlier step"))?;
            if segments.next() != Some("output") {
                return Err(format!("`{{{{{text}}}}}` must read `steps.{id}.output...`"));
            }
            let path: Vec<String> = segments.map(str::to_string).collect();
            if path.iter().any(String::is_empty) {
                return Err(format!("`{{{{{text}}}}}` has an empty path segment"));
            }
            Ok(Reference { source: Source::Step(index), path })
        }
        _ => Err(format!("`{{{{{text}}}}}` must start with `trigger` or `steps`")),
    }
}

/// A finished step's output as the templates of later steps see it: an action or agent step's document, or a writes
/// step's list of its writes' outputs. The list holds each write's output as the write returned it, shared with whoever
/// else holds it (a fake's stored response, say); templates see exactly the array `[output 0, output 1, …]`.
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutput {
    One(Doc),
    Writes(Vec<Doc>),
}

/// Renders a template against the trigger and the outputs of the earlier steps (by index).
///
/// What a template takes from the trigger or an output is shared, not copied; a rendered object or array is one heap
/// block, and an interpolated string one more.
pub fn render(template: &Template, trigger: &Doc, outputs: &[StepOutput]) -> Doc {
    match template {
        Template::Literal(value) => value.clone(),
        Template::Reference(reference) => match resolve(reference, trigger, outputs) {
            Some(Resolved::Value(value)) => value.clone(),
            Some(Resolved::Writes(outputs)) => Doc::array(outputs.to_vec()),
            None => Doc::Null,
        },
        Template::Interpolated(parts) => {
            let mut text = String::new();
            for part in parts {
                match part {
                    Part::Text(t) => text.push_str(t),
                    Part::Reference(reference) => match resolve(reference, trigger, outputs) {
                        Some(Resolved::Value(Doc::String(s))) => text.push_str(s),
                        Some(Resolved::Value(Doc::Null)) | None => {}
                        Some(Resolved::Value(other)) => text.push_str(&other.to_string()),
                        Some(Resolved::Writes(outputs)) => text.push_str(&Doc::array(outputs.to_vec()).to_string()),
                    },
                }
            }
            Doc::from(text.as_str())
        }
        Template::Array(items) => Doc::Array(items.iter().map(|t| render(t, trigger, outputs)).collect()),
        Template::Object(members) => Doc::Object(Obj::from_sorted(
            members.iter().map(|(name, template)| (name.clone(), render(template, trigger, outputs))).collect(),
        )),
    }
}

/// What a reference names: a value inside a document, or the whole of a writes step's output.
enum Resolved<'v> {
    Value(&'v Doc),
    Writes(&'v [Doc]),
}

fn resolve<'v>(reference: &Reference, trigger: &'v Doc, outputs: &'v [StepOutput]) -> Option<Resolved<'v>> {
    let mut path = reference.path.iter();
    let mut value = match reference.source {
        Source::Trigger => trigger,
        Source::Step(index) => match outputs.get(index)? {
            StepOutput::One(value) => value,
            // The first segment indexes the writes, as it would index the array of their outputs.
            StepOutput::Writes(writes) => match path.next() {
                Some(segment) => writes.get(segment.parse::<usize>().ok()?)?,
                None => return Some(Resolved::Writes(writes)),
            },
        },
    };
    for segment in path {
        value = match value {
            Doc::Object(obj) => obj.get(segment)?,
            Doc::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(Resolved::Value(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rendering_keeps_types_and_interpolates() {
        let wf = Workflow::from_json(
            &json!({"name": "w", "steps": [
                {"id": "a", "action": "c.x", "inputs": {"n": "{{trigger.n}}", "s": "id-{{trigger.n}}-{{trigger.s}}"}},
                {"id": "b", "action": "c.y", "inputs": {"from": "{{steps.a.output.list.1}}", "lit": [1, "x"]}}
            ]})
            .to_string(),
        )
        .expect("valid");
        let trigger = crate::doc!({"n": 7, "s": "z"});
        let StepKind::Action { inputs, .. } = &wf.steps[0].kind else { panic!("action step") };
        assert_eq!(render(inputs, &trigger, &[]), json!({"n": 7, "s": "id-7-z"}));
        let StepKind::Action { inputs, .. } = &wf.steps[1].kind else { panic!("action step") };
        assert_eq!(
            render(inputs, &trigger, &[StepOutput::One(crate::doc!({"list": [0, {"k": true}]}))]),
            json!({"from": {"k": true}, "lit": [1, "x"]})
        );
    }

    #[test]
    fn outputs_referenced_lists_the_steps_a_later_template_names() {
        let wf = Workflow::from_json(
            &json!({"name": "w", "steps": [
                {"id": "a", "action": "c.x", "inputs": {"email": "{{trigger.email}}"}},
                {"id": "b", "action": "c.y", "inputs": {"deep": [{"k": "id {{steps.a.output.id}}"}]}},
                {"id": "c", "action": "c.z", "inputs": {"whole": "{{steps.b.output}}"}},
                {"id": "d", "writes": [{"action": "c.x", "inputs": {"from": "{{steps.c.output.n}}"}}]},
                {"id": "e", "planner": "p", "inputs": {"literal": "steps.d.output"}},
                {"id": "f", "action": "c.x", "inputs": {"t": "{{trigger.x}}"}}
            ]})
            .to_string(),
        )
        .expect("valid");
        // d is named only by a literal (no braces), e and f by nothing.
        assert_eq!(wf.outputs_referenced(), [true, true, true, false, false, false]);
    }

    #[test]
    fn a_writes_steps_outputs_render_as_the_array_of_them() {
        let wf = Workflow::from_json(
            &json!({"name": "w", "steps": [
                {"id": "w", "writes": [{"action": "c.x", "inputs": {}}, {"action": "c.y", "inputs": {}}]},
                {"id": "a", "action": "c.z", "inputs": {
                    "second": "{{steps.w.output.1.id}}",
                    "all": "{{steps.w.output}}",
                    "text": "got {{steps.w.output.0.id}} of {{steps.w.output}}",
                    "past_the_end": "{{steps.w.output.2.id}}",
                    "not_an_index": "{{steps.w.output.id}}"
                }}
            ]})
            .to_string(),
        )
        .expect("valid");
        let StepKind::Action { inputs, .. } = &wf.steps[1].kind else { panic!("action step") };
        let writes = vec![crate::doc!({"id": "ch_1"}), crate::doc!({"id": "re_2", "n": 2})];
        let as_writes = render(inputs, &Doc::object([]), &[StepOutput::Writes(writes.clone())]);
        let array = Doc::array(writes.clone());
        // Exactly what the same outputs give as one array document.
        assert_eq!(as_writes, render(inputs, &Doc::object([]), &[StepOutput::One(array.clone())]));
        assert_eq!(
            as_writes,
            json!({
                "second": "re_2",
                "all": array,
                "text": format!("got ch_1 of {array}"),
                "past_the_end": null,
                "not_an_index": null
            })
        );
    }

    #[test]
    fn the_documented_example_parses() {
        let text = include_str!("../workflows/signup.toml");
        let wf = Workflow::from_toml(text).expect("signup.toml is valid");
        let kinds: Vec<&str> = wf
            .steps
            .iter()
            .map(|s| match s.kind {
                StepKind::Action { .. } => "action",
                StepKind::Writes(_) => "writes",
                StepKind::Agent { .. } => "agent",
            })
            .collect();
        assert_eq!(kinds, ["action", "action", "writes", "agent"]);
        assert_eq!(wf.steps[0].volatile, ["requested_at"]);
    }

    /// A member named twice, at any depth, is refused with its name (serde_json alone keeps the last one); TOML
    /// refuses a repeated key itself.
    #[test]
    fn a_member_named_twice_is_refused() {
        let cases = [
            (r#"{"name": "w", "name": "v", "steps": [{"id": "a", "action": "c.x"}]}"#, "\"name\""),
            (r#"{"name": "w", "steps": [{"id": "a", "action": "c.x", "action": "c.y"}]}"#, "\"action\""),
            (
                r#"{"name": "w", "steps": [{"id": "a", "action": "c.x", "inputs": {"email": "a", "email": "b"}}]}"#,
                "\"email\"",
            ),
            (
                r#"{"name": "w", "steps": [{"id": "a", "writes": [{"action": "c.x", "inputs": {"k": 1, "k": 2}}]}]}"#,
                "\"k\"",
            ),
        ];
        for (text, member) in cases {
            let err = Workflow::from_json(text).expect_err(text);
            assert_eq!(err.field, "(file)", "{text}: {err}");
            assert!(err.to_string().contains(&format!("duplicate object key {member}")), "{text}: {err}");
        }
        let err = Workflow::from_json(
            r#"{"name": "w", "steps": [{"id": "a", "action": "c.x", "inputs": {"n": 9007199254740993}}]}"#,
        )
        .expect_err("an integer no double holds");
        assert!(err.to_string().contains("9007199254740993"), "{err}");
        let toml = "name = \"w\"\n[[steps]]\nid = \"a\"\naction = \"c.x\"\ninputs = { email = \"a\", email = \"b\" }\n";
        let err = Workflow::from_toml(toml).expect_err("a repeated TOML key");
        assert!(err.to_string().contains("duplicate key"), "{err}");
        // The same definitions without the repetition read.
        Workflow::from_json(r#"{"name": "w", "steps": [{"id": "a", "action": "c.x", "inputs": {"email": "a"}}]}"#)
            .expect("valid");
    }

    /// TOML can write numbers JSON cannot hold (`nan`, `inf`) and integers no double holds; converted to JSON inputs
    /// they would become `null` or another number and be keyed as that. Each is refused, naming where it is.
    #[test]
    fn a_toml_number_no_key_could_be_derived_from_is_refused() {
        let workflow =
            |inputs: &str| format!("name = \"w\"\n[[steps]]\nid = \"a\"\naction = \"c.x\"\ninputs = {inputs}\n");
        for (inputs, says) in [
            ("{ f = nan }", "steps[0].inputs.f = nan"),
            ("{ f = -inf }", "steps[0].inputs.f = -inf"),
            ("{ list = [1, inf] }", "steps[0].inputs.list[1] = inf"),
            ("{ n = 9007199254740993 }", "steps[0].inputs.n = 9007199254740993"),
        ] {
            let err = Workflow::from_toml(&workflow(inputs)).expect_err(inputs);
            assert!(err.to_string().contains(says), "{inputs}: {err}");
        }
        // Every integer a double holds exactly still reads, however large, and so does any finite float.
        for inputs in ["{ n = 9007199254740992 }", "{ n = -9223372036854775808 }", "{ f = 1e308 }"] {
            Workflow::from_toml(&workflow(inputs)).expect(inputs);
        }
    }

    #[test]
    fn validation_errors_name_step_and_field() {
        let cases: &[(Value, &str, &str)] = &[
            (json!({"name": "w", "steps": []}), "", "steps"),
            (json!({"name": "w", "steps": [{"id": "a"}]}), "a", "action"),
            (json!({"name": "w", "steps": [{"id": "a", "action": "nodot"}]}), "a", "action"),
            (json!({"name": "w", "steps": [{"id": "a", "action": "c.x"}, {"id": "a", "action": "c.x"}]}), "a", "id"),
            (
                json!({"name": "w", "steps": [{"id": "a", "action": "c.x", "inputs": {"v": "{{steps.b.output}}"}}]}),
                "a",
                "inputs",
            ),
            (
                json!({"name": "w", "steps": [{"id": "a", "action": "c.x", "inputs": {"v": "{{nope.x}}"}}]}),
                "a",
                "inputs",
            ),
            (
                json!({"name": "w", "steps": [{"id": "a", "action": "c.x", "inputs": {"v": "{{trigger.x"}}]}),
                "a",
                "inputs",
            ),
            (
                json!({"name": "w", "steps": [{"id": "a", "writes": [{"action": "c.x", "inputs": {"v": "{{x}}"}}]}]}),
                "a",
                "writes[0].inputs",
            ),
            (json!({"name": "w", "steps": [{"id": "a", "writes": []}]}), "a", "writes"),
            (json!({"name": "w", "steps": [{"id": "a", "action": "c.x", "planner": "p"}]}), "a", "action"),
            (json!({"name": "w", "steps": [{"id": "a", "action": "c.x", "volatile": ["a..b"]}]}), "a", "volatile"),
        ];
        for (def, step, field) in cases {
            let err = Workflow::from_json(&def.to_string()).expect_err(&def.to_string());
            assert_eq!((err.step.as_str(), err.field.as_str()), (*step, *field), "{def}: {err}");
        }
    }
}
