//! The negative controls still break what they say they break.
//!
//! A negative control (`JQ_TEST_BREAK=<name>`, see `jq_pg_test::sabotage`) replaces a pattern
//! of text in one jq function's definition. When the function is rewritten the pattern may no
//! longer occur, and the control then fails for the wrong reason (the sabotage's own assertion)
//! instead of showing that its test catches the bug: nine had gone stale that way before this
//! test existed. So this test reads every test file under `tests/` (subdirectories included: a
//! test target split into modules is a directory `tests/<name>/` with a `main.rs`), finds each
//! `sabotage(client, function, pattern, replacement, times)` call (with `syn`; the function and
//! pattern may be string literals or `const` items of that file or of another file of the same
//! test target), and checks against the installed extension that the pattern occurs exactly
//! `times` times in the function, on every run, not only when someone runs that control.
//!
//! Negative control of this test: `JQ_TEST_BREAK=stale_pattern_guard` adds a call with a
//! pattern that occurs nowhere; the test must then fail naming it (seen failing).

use jq_pg_test::{broken, TestDb};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// One `sabotage(...)` call found in a test file.
struct Call {
    file: String,
    /// The `JQ_TEST_BREAK` name of the enclosing `if broken("...")`, when there is one.
    control: Option<String>,
    function: String,
    pattern: String,
    times: usize,
}

/// Collects the `sabotage` calls of one file, resolving `const NAME: &str = "..."` items.
struct Finder<'a> {
    /// The file's path relative to `tests/`, e.g. `plans/claim.rs`.
    file: String,
    consts: &'a HashMap<String, String>,
    control: Option<String>,
    calls: Vec<Call>,
    problems: Vec<String>,
}

fn string_of(e: &syn::Expr, consts: &HashMap<String, String>) -> Option<String> {
    match e {
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
        syn::Expr::Path(p) => p.path.get_ident().and_then(|i| consts.get(&i.to_string()).cloned()),
        syn::Expr::Reference(r) => string_of(&r.expr, consts),
        _ => None,
    }
}

fn called_name(call: &syn::ExprCall) -> Option<String> {
    match &*call.func {
        syn::Expr::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

impl<'ast> Visit<'ast> for Finder<'_> {
    fn visit_expr_if(&mut self, e: &'ast syn::ExprIf) {
        let name = match &*e.cond {
            syn::Expr::Call(c) if called_name(c).as_deref() == Some("broken") => {
                c.args.first().and_then(|a| string_of(a, self.consts))
            }
            _ => None,
        };
        if name.is_some() {
            let outer = std::mem::replace(&mut self.control, name);
            syn::visit::visit_expr_if(self, e);
            self.control = outer;
        } else {
            syn::visit::visit_expr_if(self, e);
        }
    }

    fn visit_expr_call(&mut self, e: &'ast syn::ExprCall) {
        if called_name(e).as_deref() == Some("sabotage") {
            let args: Vec<&syn::Expr> = e.args.iter().collect();
            let times = match args.get(4) {
                Some(syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. })) => i.base10_parse::<usize>().ok(),
                _ => None,
            };
            match (args.len(), args.get(1).and_then(|a| string_of(a, self.consts)),
                   args.get(2).and_then(|a| string_of(a, self.consts)), times) {
                (5, Some(function), Some(pattern), Some(times)) => self.calls.push(Call {
                    file: self.file.clone(),
                    control: self.control.clone(),
                    function,
                    pattern,
                    times,
                }),
                _ => self.problems.push(format!(
                    "{}: a sabotage call (control {:?}) whose function, pattern or count is not a literal \
                     or a const of its test target; this test cannot check it",
                    self.file, self.control
                )),
            }
        }
        syn::visit::visit_expr_call(self, e);
    }
}

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// Every `.rs` file under `dir`, subdirectories included.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

fn test_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&tests_dir(), &mut files);
    files.sort();
    files
}

/// The `const NAME: &str = "..."` items of a file.
fn consts_of(file: &syn::File) -> HashMap<String, String> {
    file.items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Const(c) => string_of(&c.expr, &HashMap::new()).map(|v| (c.ident.to_string(), v)),
            _ => None,
        })
        .collect()
}

/// The test target a file belongs to: `plans` for `plans/claim.rs` (the directory `tests/plans/`
/// is the target `plans`), the file itself for a one-file target such as `wal.rs`.
fn target_of(file: &str) -> &str {
    file.split('/').next().unwrap_or(file)
}

fn find_calls() -> (Vec<Call>, Vec<String>) {
    let (mut calls, mut problems) = (Vec::new(), Vec::new());
    let dir = tests_dir();
    let files: Vec<(String, syn::File)> = test_files()
        .into_iter()
        .map(|path| {
            let src = std::fs::read_to_string(&path).expect("read a test file");
            let file = syn::parse_file(&src).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()));
            (path.strip_prefix(&dir).unwrap().display().to_string(), file)
        })
        .collect();
    // A call may name a const of another file of its test target (its main.rs, say). A name
    // that two files of one target define differently resolves only in those files (None).
    let mut target_consts: HashMap<&str, HashMap<String, Option<String>>> = HashMap::new();
    for (name, file) in &files {
        let consts = target_consts.entry(target_of(name)).or_default();
        for (k, v) in consts_of(file) {
            consts.entry(k).and_modify(|old| if old.as_ref() != Some(&v) { *old = None }).or_insert(Some(v));
        }
    }
    for (name, file) in &files {
        let mut consts: HashMap<String, String> = target_consts[target_of(name)]
            .iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
            .collect();
        consts.extend(consts_of(file));
        let mut finder = Finder { file: name.clone(), consts: &consts, control: None, calls: Vec::new(), problems: Vec::new() };
        finder.visit_file(file);
        calls.append(&mut finder.calls);
        problems.append(&mut finder.problems);
    }
    (calls, problems)
}

#[test]
fn every_sabotage_pattern_occurs_as_often_as_its_control_expects() {
    let (mut calls, mut problems) = find_calls();
    // Guard against the guard finding nothing (a parse that silently misses every call).
    assert!(calls.len() >= 50, "found only {} sabotage calls in pg_test/tests", calls.len());
    if broken("stale_pattern_guard") {
        calls.push(Call {
            file: "negative_controls.rs".into(),
            control: Some("stale_pattern_guard".into()),
            function: "jq.complete(bigint,uuid,jsonb)".into(),
            pattern: "a pattern that occurs nowhere".into(),
            times: 1,
        });
    }
    let db = TestDb::new("negctl");
    let mut c = db.connect();
    for call in &calls {
        let def: String = match c.query_one("SELECT pg_get_functiondef($1::text::regprocedure)", &[&call.function]) {
            Ok(row) => row.get(0),
            Err(e) => {
                problems.push(format!("{} ({:?}): function {} not found: {e}", call.file, call.control, call.function));
                continue;
            }
        };
        let found = def.matches(call.pattern.as_str()).count();
        if found != call.times {
            problems.push(format!(
                "{} (JQ_TEST_BREAK={}): {:?} occurs {found} times in {}, the control expects {}",
                call.file,
                call.control.as_deref().unwrap_or("?"),
                call.pattern,
                call.function,
                call.times
            ));
        }
    }
    assert!(problems.is_empty(), "stale negative controls:\n{}", problems.join("\n"));
}
