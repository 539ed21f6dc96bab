//! `cargo xtask mutations [--seconds N] [--base-seed S] [NAME]...`: whether the chaos harness
//! finds each defect it is meant to find. Each `tests/chaos/mutations/NAME.patch` reverts one
//! fix in cuda-host; for each, a scratch tree at `HEAD` gets the patch, and the harness runs on
//! it for at most N seconds (default 300) from a fixed base seed, stopping at the first broken
//! promise, or at its crash (the mutation's use after free may kill it before it can report). A
//! mutation the harness does not find in time fails the task.
//!
//! The scratch tree is a detached worktree in the target folder, kept between runs with its own
//! target folder, so that a mutation rebuilds only what its patch touches. It holds `HEAD`: what
//! is not committed is not mutated. Each run's whole output is kept beside it, as `NAME.log`.

use crate::{cargo, target_dir};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MUTATIONS: &str = "tests/chaos/mutations";

/// One patch's outcome.
struct Outcome {
    name: String,
    reverts: String,
    /// How long the harness ran until a promise broke; `None` if none did.
    found_after: Option<Duration>,
    /// The first violation the harness printed, or why the mutation could not run.
    said: String,
    /// The seed of the sequence that broke a promise.
    seed: Option<String>,
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let mut seconds = 300u64;
    let mut base_seed = 1u64;
    let mut names = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => {
                seconds = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--seconds needs a number")?;
            }
            "--base-seed" => {
                base_seed = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--base-seed needs a number")?;
            }
            name => names.push(name.trim_end_matches(".patch").to_owned()),
        }
    }
    let patches = patches(root, &names)?;
    let scratch = target_dir(root)?.join("mutations");
    let tree = scratch.join("tree");
    prepare_tree(root, &tree)?;
    let mut outcomes = Vec::new();
    for patch in &patches {
        let outcome = hunt(&tree, &scratch.join("target"), patch, seconds, base_seed)?;
        println!(
            "mutations: {}: {}",
            outcome.name,
            match outcome.found_after {
                Some(after) => format!(
                    "found after {:.1} s (CHAOS_SEED={}): {}",
                    after.as_secs_f64(),
                    outcome.seed.as_deref().unwrap_or("?"),
                    outcome.said
                ),
                None => format!("NOT FOUND: {}", outcome.said),
            }
        );
        outcomes.push(outcome);
    }
    print_table(&outcomes, seconds, base_seed);
    let missed = outcomes.iter().filter(|o| o.found_after.is_none()).count();
    if missed == 0 {
        Ok(())
    } else {
        Err(format!(
            "{missed} of {} mutations not found in {seconds} s",
            outcomes.len()
        ))
    }
}

/// The patches named (all, if none is), sorted by name.
fn patches(root: &Path, names: &[String]) -> Result<Vec<PathBuf>, String> {
    let dir = root.join(MUTATIONS);
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|error| format!("reading {}: {error}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "patch"))
        .collect();
    all.sort();
    if names.is_empty() {
        return Ok(all);
    }
    names
        .iter()
        .map(|name| {
            all.iter()
                .find(|path| path.file_stem().is_some_and(|stem| stem == name.as_str()))
                .cloned()
                .ok_or_else(|| format!("no mutation {name} in {MUTATIONS}"))
        })
        .collect()
}

fn git(dir: &Path, args: &[&str]) -> Result<(), String> {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .status()
        .map_err(|error| format!("git {}: {error}", args.join(" ")))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "git {} in {}: {status}",
            args.join(" "),
            dir.display()
        ))
    }
}

/// A detached worktree at `HEAD` in `tree`, made once and reset to `HEAD` on later runs.
fn prepare_tree(root: &Path, tree: &Path) -> Result<(), String> {
    if tree.join(".git").exists() {
        let head = Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(root)
            .output()
            .map_err(|error| format!("git rev-parse: {error}"))?;
        let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
        git(tree, &["checkout", "--quiet", "--force", "--detach", &head])
    } else {
        let _ = std::fs::remove_dir_all(tree);
        git(root, &["worktree", "prune"])?;
        let path = tree
            .to_str()
            .ok_or("a target folder path that is not UTF-8")?;
        git(
            root,
            &["worktree", "add", "--quiet", "--detach", path, "HEAD"],
        )
    }
}

/// Applies `patch` to `tree`, runs the harness until it breaks a promise or `seconds` pass,
/// and takes the patch back out.
fn hunt(
    tree: &Path,
    target: &Path,
    patch: &Path,
    seconds: u64,
    base_seed: u64,
) -> Result<Outcome, String> {
    let name = patch
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = std::fs::read_to_string(patch)
        .map_err(|error| format!("reading {}: {error}", patch.display()))?;
    let reverts = text
        .lines()
        .take_while(|line| !line.starts_with("diff --git"))
        .find_map(|line| line.strip_prefix("Reverts: "))
        .unwrap_or("?")
        .to_owned();
    let mut outcome = Outcome {
        name,
        reverts,
        found_after: None,
        said: String::new(),
        seed: None,
    };
    let patch_path = patch.to_str().ok_or("a patch path that is not UTF-8")?;
    if let Err(error) = git(tree, &["apply", patch_path]) {
        outcome.said = format!("the patch does not apply ({error})");
        return Ok(outcome);
    }
    let log = target.with_file_name(format!("{}.log", outcome.name));
    let result = run_harness(tree, target, &log, seconds, base_seed, &mut outcome);
    git(tree, &["checkout", "--quiet", "--force", "."])?;
    result.map(|()| outcome)
}

/// Runs the harness on `tree`, its whole output kept in `log`.
fn run_harness(
    tree: &Path,
    target: &Path,
    log: &Path,
    seconds: u64,
    base_seed: u64,
    outcome: &mut Outcome,
) -> Result<(), String> {
    let built = Command::new(cargo())
        .args(["test", "--test", "chaos", "--no-run", "--quiet"])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(tree)
        .status()
        .map_err(|error| format!("cargo: {error}"))?;
    if !built.success() {
        outcome.said = "the mutated tree does not build".to_owned();
        return Ok(());
    }
    let started = Instant::now();
    let mut child = Command::new(cargo())
        .args(["test", "--quiet", "--test", "chaos"])
        .env("CARGO_TARGET_DIR", target)
        .env("CHAOS_SECONDS", seconds.to_string())
        .env("CHAOS_BASE_SEED", base_seed.to_string())
        .env("CHAOS_HUNT", "1")
        .current_dir(tree)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("cargo: {error}"))?;
    let stdout = child.stdout.take().expect("piped");
    // Read beside stdout, so that neither pipe fills while the other is read: it names the
    // signal of a harness that crashed (a use after free the mutation made) before it reported.
    let stderr = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut text);
        text
    });
    let mut kept = std::fs::File::create(log)
        .map_err(|error| format!("creating {}: {error}", log.display()))?;
    let mut in_violations = false;
    // What the harness printed last: a stranded wait or a broken bound comes just before the
    // watchdog's "a step never returned".
    let mut before = String::new();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        writeln!(kept, "{line}").map_err(|error| format!("writing {}: {error}", log.display()))?;
        if outcome.found_after.is_none()
            && (line.contains("broke a promise") || line.contains("a step never returned"))
        {
            outcome.found_after = Some(started.elapsed());
            outcome.seed = line
                .split_whitespace()
                .skip_while(|word| *word != "seed")
                .nth(1)
                .map(str::to_owned);
            if line.contains("a step never returned") {
                outcome.said = match before.strip_prefix("chaos: ") {
                    Some(what) if !what.starts_with("seed ") => {
                        format!("{what}; then a step never returned")
                    }
                    _ => "a step never returned".to_owned(),
                };
            }
        } else if line == "chaos: violations:" {
            in_violations = true;
        } else if in_violations && outcome.said.is_empty() {
            outcome.said = line.trim().to_owned();
        } else if outcome.seed.is_none() && line.contains("replay with CHAOS_SEED=") {
            // The watchdog names the seed in its replay line.
            outcome.seed = line
                .split("CHAOS_SEED=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_owned);
        }
        before = line;
    }
    let status = child.wait().map_err(|error| format!("cargo: {error}"))?;
    let errors = errors.join().unwrap_or_default();
    writeln!(kept, "{errors}").map_err(|error| format!("writing {}: {error}", log.display()))?;
    let crash = errors
        .lines()
        .find(|line| line.contains("(signal:"))
        .and_then(|line| line.split("(signal:").nth(1))
        .map(|signal| signal.trim_end_matches(')').trim().to_owned());
    if outcome.found_after.is_none()
        && let Some(signal) = crash
    {
        // The process died before it could report: the mutation's use after free, most often.
        outcome.found_after = Some(started.elapsed());
        outcome.said = format!("the harness crashed ({signal}) before it reported");
        return Ok(());
    }
    if outcome.found_after.is_none() {
        outcome.said = if status.success() {
            format!("no promise broke in {seconds} s")
        } else {
            format!("the harness failed without breaking a promise: {status}")
        };
    }
    Ok(())
}

fn print_table(outcomes: &[Outcome], seconds: u64, base_seed: u64) {
    println!();
    println!("mutations: the harness for at most {seconds} s from base seed {base_seed}");
    println!("| mutation | reverts | found after | first violation |");
    println!("| --- | --- | --- | --- |");
    for outcome in outcomes {
        let found = outcome.found_after.map_or("not found".to_owned(), |after| {
            format!("{:.1} s", after.as_secs_f64())
        });
        let mut said = outcome.said.clone();
        if said.len() > 120 {
            let mut end = 117;
            while !said.is_char_boundary(end) {
                end -= 1;
            }
            said.truncate(end);
            said.push_str("...");
        }
        println!(
            "| `{}` | {} | {found} | {} |",
            outcome.name,
            outcome.reverts,
            said.replace('|', "\\|")
        );
    }
}
