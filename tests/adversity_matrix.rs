//! The adversity matrix of `docs/RELIABILITY.md` is complete: every thread cuda-host starts, every
//! function the driver calls and every operation has its rows, each naming the promise that holds
//! and tests that exist.
//!
//! What must have a row is read from cuda-host's source where it can be: the threads from their
//! `OwnThread::new` names, the functions the driver calls from their `extern "C" fn` items, the
//! operations from the crate root's exports (each either in [`OPERATIONS`] with the adversities
//! that apply to it, or in [`WITHOUT_ROWS`] with the reason it needs none).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The adversities a row may name.
const ADVERSITIES: [&str; 9] = [
    "a panic",
    "a panicking logger",
    // A logger that calls cuda-host back (asks for counts, registers, reclaims).
    "a logger that calls cuda-host",
    // A `tracing` subscriber or an NVTX injection library (features `nvtx`, `tracing`).
    "a panicking subscriber",
    "a subscriber that calls cuda-host",
    "cannot start",
    "capture before",
    "capture between",
    "context failure",
];

/// Operations and the adversities each must have a row for. A name is a crate-root export, or
/// `Type::method` for a method, or a name with the engine it runs on.
const OPERATIONS: &[(&str, &[&str])] = &[
    (
        "host_launch",
        &[
            "a panic",
            "a logger that calls cuda-host",
            "capture before",
            "capture between",
            "context failure",
        ],
    ),
    (
        "host_launch on HostEngine::Polled",
        &[
            "a panic",
            "capture before",
            "capture between",
            "context failure",
        ],
    ),
    (
        "host_launch_raw",
        &[
            "a logger that calls cuda-host",
            "capture before",
            "context failure",
        ],
    ),
    (
        "host_copy_scope",
        &[
            "a panic",
            "capture before",
            "capture between",
            "context failure",
        ],
    ),
    ("host_copy_raw", &["context failure"]),
    (
        "release_in_stream_order",
        &[
            "a panic",
            "a logger that calls cuda-host",
            "capture before",
            "capture between",
            "context failure",
        ],
    ),
    (
        "stream_point",
        &[
            "a panic",
            "a logger that calls cuda-host",
            "capture before",
            "context failure",
        ],
    ),
    (
        "reclaim",
        &[
            "a panic",
            "a panicking logger",
            "a logger that calls cuda-host",
        ],
    ),
    ("Stream::synchronize", &["context failure"]),
    ("Stream::is_complete", &["context failure"]),
    ("Context::synchronize", &["context failure"]),
    ("Event::synchronize", &["context failure"]),
    ("Stream::with_host_engine", &["cannot start"]),
    (
        "host_launch_replayable",
        &[
            "a panic",
            "a logger that calls cuda-host",
            "capture before",
            "capture between",
            "context failure",
        ],
    ),
    ("host_launch_replayable_raw", &["capture before"]),
    (
        "GraphBuilder::begin",
        &["a logger that calls cuda-host", "capture between"],
    ),
    ("GraphExec::launch", &["a logger that calls cuda-host"]),
    (
        "GraphBuilder::callback",
        &["a panic", "a logger that calls cuda-host", "capture before"],
    ),
    (
        "GraphBuilder::callback_raw",
        &["a logger that calls cuda-host"],
    ),
    ("GraphBuilder::end", &["a logger that calls cuda-host"]),
    (
        "Graph::add_engine_host_node",
        &["a panic", "capture before"],
    ),
    ("Graph::instantiate with engine nodes", &["cannot start"]),
    (
        "GraphExec::launch with engine nodes",
        &["capture before", "capture between", "context failure"],
    ),
    ("Timeline::new", &["cannot start"]),
    ("Timeline::signal", &["a panic"]),
    (
        "Timeline::enqueue_wait",
        &[
            "a logger that calls cuda-host",
            "capture before",
            "capture between",
            "context failure",
        ],
    ),
    (
        "Timeline::enqueue_signal",
        &[
            "a logger that calls cuda-host",
            "capture before",
            "capture between",
            "context failure",
        ],
    ),
    ("Timeline::wait", &["context failure"]),
    (
        "Timeline::reached",
        &[
            "a panic",
            "a logger that calls cuda-host",
            "context failure",
        ],
    ),
    ("Timeline::drop", &["a panicking logger"]),
];

/// Where cuda-host calls a profiler or a subscriber (`cuda-host/src/observe/`): each has rows for
/// both of their adversities.
const OBSERVED: &[&str] = &[
    "run_once_host_fn",
    "graph_host_fn",
    "thread cuda-host-poll",
    "thread cuda-host-watch",
    "reclaim",
    "release_in_stream_order",
    "stream_point",
];

/// Crate-root functions that need no rows of their own, and why.
const WITHOUT_ROWS: &[(&str, &str)] = &[
    ("driver", "loads the driver; the fault matrix covers it"),
    (
        "host_copy_fn",
        "a function the driver calls: it has its rows as one",
    ),
    (
        "host_launch_with",
        "host_launch's path through another entry point",
    ),
    (
        "host_launch_raw_with",
        "host_launch_raw's path through another entry point",
    ),
    ("in_host_function", "reads a thread-local mark"),
    ("named", "pairs a closure with a name"),
    ("metrics", "a handle whose methods read counters"),
    (
        "set_host_panic_hook",
        "installs the hook whose panics the host functions' rows cover",
    ),
    ("clear_host_panic_hook", "clears the hook"),
    ("set_launch_reclaim_interval", "sets a number"),
    ("polled_engine_threads", "reads a number"),
    (
        "set_polled_engine_threads",
        "sets a number and starts the pool's threads: the rows of thread cuda-host-poll",
    ),
];

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(folder: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(folder).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            found.push(path);
        }
    }
}

fn sources(folder: &str) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(&workspace().join(folder), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a source file");
            (path, text)
        })
        .collect()
}

/// Source text before its first item for tests (`#[cfg(test)]`, `#[cfg(all(test, ...))]`):
/// unit tests sit at the end of their files.
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]")
        .into_iter()
        .chain(text.find("#[cfg(all(test"))
        .min()
        .map_or(text, |end| &text[..end])
}

/// cuda-host's source files, without those only tests build (a `#[cfg(test)] mod NAME;` in any
/// of them: the fakes, the loom models, unit tests kept in a file of their own).
fn library_sources() -> Vec<(PathBuf, String)> {
    let all = sources("cuda-host/src");
    let mut test_only = Vec::new();
    for (path, text) in &all {
        let mut lines = text.lines().map(str::trim).peekable();
        while let Some(line) = lines.next() {
            if line.starts_with("#[cfg(")
                && line.contains("test")
                && let Some(name) = lines
                    .peek()
                    .and_then(|next| next.strip_prefix("mod "))
                    .and_then(|rest| rest.strip_suffix(';'))
            {
                let folder = path.parent().unwrap();
                let stem = path.file_stem().unwrap().to_string_lossy();
                let home = if stem == "lib" || stem == "mod" {
                    folder.to_path_buf()
                } else {
                    folder.join(&*stem)
                };
                test_only.push(home.join(format!("{name}.rs")));
            }
        }
    }
    all.into_iter()
        .filter(|(path, _)| !test_only.contains(path))
        .collect()
}

/// The identifier `text` starts with.
fn identifier_at(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The names of cuda-host's own threads.
fn threads() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (_, text) in library_sources() {
        // A single thread, or a pool of threads of one name.
        for constructor in ["OwnThread::new(\"", "OwnThreads::new(\""] {
            for part in without_tests(&text).split(constructor).skip(1) {
                found.insert(part.split('"').next().unwrap().to_owned());
            }
        }
    }
    found
}

/// The `extern "C"` functions cuda-host hands the driver: items at the start of a line.
fn functions_the_driver_calls() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (_, text) in library_sources() {
        for line in without_tests(&text).lines() {
            let item = line
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            if let Some(rest) = item.strip_prefix("unsafe extern \"C\" fn ") {
                found.insert(identifier_at(rest));
            }
        }
    }
    found
}

/// The snake-case names the crate root exports with `pub use` (its functions).
fn exported_functions() -> BTreeSet<String> {
    let lib = std::fs::read_to_string(workspace().join("cuda-host/src/lib.rs")).unwrap();
    let mut found = BTreeSet::new();
    let mut in_use = false;
    let mut exported = String::new();
    for line in lib.lines() {
        let line = line.trim();
        if line.starts_with("pub use ") {
            in_use = true;
        }
        if in_use {
            exported.push_str(line);
            exported.push(' ');
            if line.ends_with(';') {
                in_use = false;
                exported.push(';');
            }
        }
    }
    for statement in exported.split(';') {
        let names = match statement.split_once('{') {
            Some((_, inner)) => inner.trim_end_matches([' ', '}']).to_owned(),
            None => statement.rsplit("::").next().unwrap_or("").to_owned(),
        };
        for name in names.split(',') {
            let name = name.trim();
            let first = name.chars().next();
            if first.is_some_and(|c| c.is_ascii_lowercase())
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
            {
                found.insert(name.to_owned());
            }
        }
    }
    found.remove("sys");
    found.remove("cuda_host_sys");
    found
}

/// The name of every `#[test]` function of the workspace's tests and sources (unit tests and
/// loom models included).
fn test_names() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for folder in ["tests", "cuda-host/src", "cuda-host-testing"] {
        let mut files = Vec::new();
        rust_files(&workspace().join(folder), &mut files);
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            for part in text.split("#[test]").skip(1) {
                // The first `fn` after the attribute (other attributes may come between).
                if let Some((_, rest)) = part.split_once("fn ") {
                    found.insert(identifier_at(rest));
                }
            }
        }
    }
    found
}

struct Row {
    promise: String,
    tests: Vec<String>,
}

/// The matrix's rows, by (where, adversity).
fn matrix() -> BTreeMap<(String, String), Row> {
    let text = std::fs::read_to_string(workspace().join("docs/RELIABILITY.md")).unwrap();
    let section = text
        .split_once("## The adversity matrix")
        .expect("docs/RELIABILITY.md has the adversity matrix")
        .1;
    let section = section.split("\n## ").next().unwrap();
    let mut rows = BTreeMap::new();
    // Every line of the table but its head and the line under it is a row.
    for line in section.lines().filter(|line| line.starts_with('|')).skip(2) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "a row of four cells: {line}");
        assert!(
            cells[0].starts_with('`') && cells[0].ends_with('`'),
            "a row's first cell names its place in backticks: {line}"
        );
        let place = cells[0].trim_matches('`').to_owned();
        let adversity = cells[1].to_owned();
        assert!(
            ADVERSITIES.contains(&adversity.as_str()),
            "an adversity of {ADVERSITIES:?}: {line}"
        );
        let tests = cells[3]
            .split(',')
            .map(|test| test.trim().trim_matches('`').to_owned())
            .filter(|test| !test.is_empty())
            .collect();
        let row = Row {
            promise: cells[2].to_owned(),
            tests,
        };
        assert!(
            rows.insert((place, adversity), row).is_none(),
            "a row twice: {line}"
        );
    }
    rows
}

#[test]
fn every_thread_driver_callback_and_operation_has_its_adversity_rows_with_tests_that_exist() {
    let rows = matrix();
    let mut required: BTreeSet<(String, String)> = BTreeSet::new();
    let threads = threads();
    assert!(
        threads.len() >= 2,
        "the threads' names were not found: {threads:?}"
    );
    for thread in threads {
        required.insert((format!("thread {thread}"), "cannot start".into()));
        required.insert((format!("thread {thread}"), "a panic".into()));
    }
    let functions = functions_the_driver_calls();
    assert!(
        functions.contains("run_once_host_fn"),
        "the trampolines were not found: {functions:?}"
    );
    for function in functions {
        required.insert((function, "a panic".into()));
    }
    for place in OBSERVED {
        for adversity in [
            "a panicking subscriber",
            "a subscriber that calls cuda-host",
        ] {
            required.insert(((*place).into(), adversity.into()));
        }
    }
    for (operation, adversities) in OPERATIONS {
        for adversity in *adversities {
            required.insert(((*operation).into(), (*adversity).into()));
        }
    }
    let missing: Vec<_> = required
        .iter()
        .filter(|cell| !rows.contains_key(*cell))
        .collect();
    assert!(missing.is_empty(), "cells with no row: {missing:#?}");

    let classified: BTreeSet<&str> = OPERATIONS
        .iter()
        .map(|(name, _)| *name)
        .chain(WITHOUT_ROWS.iter().map(|(name, _)| *name))
        .collect();
    let unclassified: Vec<_> = exported_functions()
        .into_iter()
        .filter(|name| !classified.contains(name.as_str()))
        .collect();
    assert!(
        unclassified.is_empty(),
        "exported functions neither in OPERATIONS nor in WITHOUT_ROWS: {unclassified:?}"
    );

    let names = test_names();
    for ((place, adversity), row) in &rows {
        assert!(
            !row.promise.is_empty() && !row.tests.is_empty(),
            "`{place}`, {adversity}: a promise and its tests"
        );
        for test in &row.tests {
            assert!(
                names.contains(test),
                "`{place}`, {adversity}: no test is named {test}"
            );
        }
    }
}
