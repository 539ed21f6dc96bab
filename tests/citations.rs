//! Every file of the repository cites only files of the repository: a path written in a
//! document, a comment or a script (`cuda-host/src/launch/running.rs`, `docs/REAL-DRIVER.md`)
//! names a file or folder that exists.
//!
//! A citation is a word that ends in a file extension and either holds a `/` or is a document's
//! name (`*.md`). It resolves against the citing file's folder, the repository's root, or the
//! root of a crate or folder that the repository's docs write paths from. Not citations: C's
//! `#include <...>` and bare `.h` names (system and CUDA headers), placeholders in capitals
//! (`DIR/run-tests.sh`, `OUT_DIR/bindings.rs`), shell variables (`$dir/file`), paths joined to
//! another (`"/bindings.rs"`), and what builds write (`target/`, [`GENERATED`]).

use std::path::Path;

const EXTENSIONS: [&str; 13] = [
    "rs", "md", "c", "h", "def", "toml", "sh", "ptx", "cu", "supp", "py", "json", "txt",
];

/// Files the builds write into their output folders, which their build scripts name.
const GENERATED: [&str; 1] = ["entry_points.md"];

/// Folders the repository's texts write paths from, besides the citing file's own.
const ROOTS: [&str; 8] = [
    "",
    "cuda-host/",
    "cuda-host/src/",
    "cuda-sys/",
    "cuda-host-testing/",
    "cuda-host-testing/driver/",
    "docs/",
    "examples/user-crate/",
];

use suite::repository::root;

/// The repository's files, as git tracks them.
fn tracked_files() -> Vec<String> {
    suite::repository::tracked_files(".")
}

fn is_path_character(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// The words of `text` that look like citations, each with what precedes it.
fn citations(text: &str) -> Vec<(String, char)> {
    let mut found = Vec::new();
    let mut previous = ' ';
    let mut word = String::new();
    let mut before = ' ';
    for c in text.chars().chain(std::iter::once(' ')) {
        if is_path_character(c) {
            if word.is_empty() {
                before = previous;
            }
            word.push(c);
        } else if !word.is_empty() {
            let trimmed = word.trim_end_matches(['.', '/']).to_owned();
            if let Some((_, extension)) = trimmed.rsplit_once('.')
                && EXTENSIONS.contains(&extension)
                && (trimmed.contains('/') || extension == "md")
            {
                found.push((trimmed, before));
            }
            word.clear();
        }
        previous = c;
    }
    found
}

fn is_placeholder(citation: &str) -> bool {
    citation.split('/').any(|part| {
        let stem = part.split('.').next().unwrap_or("");
        stem.len() > 1
            && stem
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
            && !part.ends_with(".md")
    })
}

/// `path` relative to the repository's root, with `.` and `..` taken out; `None` above it.
fn normalized(path: &Path) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for component in path.components() {
        match component {
            std::path::Component::Normal(part) => parts.push(part.to_str()?),
            std::path::Component::ParentDir => {
                parts.pop()?;
            }
            _ => {}
        }
    }
    Some(parts.join("/"))
}

fn resolves(citation: &str, citing: &Path, files: &[String]) -> bool {
    let citation = citation.trim_start_matches("./");
    if !citation.contains('/') {
        return files
            .iter()
            .any(|file| file == citation || file.ends_with(&format!("/{citation}")));
    }
    let folder = citing.parent().unwrap_or(Path::new(""));
    std::iter::once(folder.join(citation))
        .chain(ROOTS.iter().map(|base| Path::new(base).join(citation)))
        .filter_map(|candidate| normalized(&candidate))
        .any(|candidate| {
            files
                .iter()
                .any(|file| *file == candidate || file.starts_with(&format!("{candidate}/")))
        })
}

#[test]
fn every_path_a_file_of_the_repository_cites_exists() {
    let files = tracked_files();
    let mut missing = Vec::new();
    for file in &files {
        // This file's examples are citations of missing files on purpose.
        if file.starts_with("cuda-sys/snapshot/")
            || file.ends_with("Cargo.lock")
            || file == "tests/citations.rs"
            // A patch names its files as `a/<path>` and `b/<path>`.
            || file.ends_with(".patch")
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root().join(file)) else {
            continue; // not text
        };
        for line in text.lines() {
            if line.trim_start().starts_with("#include <") {
                continue;
            }
            for (citation, before) in citations(line) {
                let skipped = matches!(before, '$' | '{' | '<' | '@' | ':')
                    || citation.starts_with("target/")
                    || citation.starts_with('/')
                    || GENERATED.contains(&citation.as_str())
                    || citation.starts_with("http")
                    || citation.ends_with(".h") && !citation.contains('/')
                    || is_placeholder(&citation);
                if !skipped && !resolves(&citation, Path::new(file), &files) {
                    missing.push(format!("{file}: {citation}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "citations of paths the repository lacks:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_citation_of_a_missing_file_is_found_and_placeholders_are_not() {
    let files = tracked_files();
    let found = citations("see `cuda-host/src/launch/gone.rs` and DIR/run-tests.sh, FACTS.md.");
    let words: Vec<&str> = found.iter().map(|(word, _)| word.as_str()).collect();
    assert_eq!(
        words,
        [
            "cuda-host/src/launch/gone.rs",
            "DIR/run-tests.sh",
            "FACTS.md"
        ]
    );
    assert!(!resolves(words[0], Path::new("README.md"), &files));
    assert!(is_placeholder(words[1]));
    assert!(!resolves(words[2], Path::new("README.md"), &files));
    assert!(resolves(
        "launch/running.rs",
        Path::new("cuda-host/src/lib.rs"),
        &files
    ));
}

#[test]
fn a_file_git_does_not_track_does_not_satisfy_a_citation() {
    // `tracked_files` walks the file system and `resolves` asks `exists()`: a file that is only
    // in the working tree (untracked, or ignored outside `target/`) satisfies a citation that a
    // clean checkout of the commit lacks. So the citation test passed in a tree holding an
    // untracked tests/adversity_matrix.rs, and fails at the commits that cite it
    // (docs/RELIABILITY.md at 89c8533).
    let name = format!("docs/untracked-citation-probe-{}.md", std::process::id());
    let probe = root().join(&name);
    std::fs::write(&probe, "").expect("the probe file is written");
    let files = tracked_files();
    let listed = files.contains(&name);
    let resolved = resolves(&name, Path::new("README.md"), &files);
    std::fs::remove_file(&probe).expect("the probe file is removed");
    assert!(
        !listed && !resolved,
        "a file git does not track counts as the repository's: listed {listed}, a citation of \
         it resolves {resolved}"
    );
}
