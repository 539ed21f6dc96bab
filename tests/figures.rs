//! One figure, one place: every measured range quoted in the repository's code and documents
//! (`17–45 µs`, `0.8–1.3 µs`) is one that `docs/PERFORMANCE.md` or `docs/REAL-DRIVER.md`, where
//! the runs behind it are described, quotes too. A figure that changes is then changed where it
//! was measured, and a copy that drifts from it fails here.

/// The documents that give the runs behind the figures.
const SOURCES: [&str; 2] = ["docs/PERFORMANCE.md", "docs/REAL-DRIVER.md"];

use suite::repository::root;

fn tracked_texts() -> Vec<String> {
    suite::repository::tracked_files(".")
        .into_iter()
        .filter(|path| {
            let extension = std::path::Path::new(path).extension();
            extension.is_some_and(|extension| extension == "rs" || extension == "md")
        })
        .filter(|path| !path.starts_with("cuda-sys/snapshot/"))
        .collect()
}

/// The ranges of `text` given in a unit of time: `a–b µs`, `a–b ns`, `a–b ms`, with the unit.
fn ranges(text: &str) -> Vec<String> {
    let is_number = |c: char| c.is_ascii_digit() || c == '.' || c == ',';
    let mut found = Vec::new();
    for (dash, _) in text.match_indices('–') {
        let before = &text[..dash];
        let start = before
            .char_indices()
            .rev()
            .take_while(|&(_, c)| is_number(c))
            .last()
            .map(|(index, _)| index);
        let after = &text[dash + '–'.len_utf8()..];
        let end = after.find(|c: char| !is_number(c)).unwrap_or(after.len());
        let (Some(start), true) = (start, end > 0) else {
            continue;
        };
        let rest = after[end..].trim_start_matches(' ');
        let Some(unit) = ["µs", "ns", "ms"].into_iter().find(|u| rest.starts_with(u)) else {
            continue;
        };
        found.push(format!("{}–{} {unit}", &text[start..dash], &after[..end]));
    }
    found
}

#[test]
fn ranges_are_found_with_their_units() {
    assert_eq!(
        ranges("costs 17–45 µs, then 0.8–1.3µs and 3–4 ms; not 2–3 times, nor a–b µs"),
        ["17–45 µs", "0.8–1.3 µs", "3–4 ms"]
    );
}

#[test]
fn every_quoted_range_is_one_the_measurements_quote() {
    let root = root();
    let measured: String = SOURCES
        .iter()
        .map(|source| std::fs::read_to_string(root.join(source)).expect("the figures' document"))
        .collect::<Vec<_>>()
        .join("\n");
    let known = ranges(&measured);
    let mut stray = Vec::new();
    for path in tracked_texts() {
        // This file quotes ranges only as examples of what it reads.
        if SOURCES.contains(&path.as_str()) || path == "tests/figures.rs" {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(&path)) else {
            continue;
        };
        for range in ranges(&text) {
            if !known.contains(&range) {
                stray.push(format!("{path}: {range}"));
            }
        }
    }
    assert!(
        stray.is_empty(),
        "figures not quoted in {SOURCES:?}, where their runs are described:\n{}",
        stray.join("\n")
    );
}
