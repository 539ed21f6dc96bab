//! `cargo xtask cold-build [--compare DIR]... [--runs N]`: how long cold builds of cuda-host-sys
//! alone and of cuda-host take in snapshot mode (the `bindgen` feature off, so bindgen is not
//! compiled: cuda-host's default features, cuda-host-sys without its default), against cold
//! builds of other Cargo projects given with `--compare`, alternated in one run on this machine.
//!
//! Each build gets an empty target folder; sources are fetched beforehand (`cargo fetch`), so the
//! network is not measured. See `docs/PERFORMANCE.md` for the comparison with cudarc.

use crate::cargo;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

struct Subject {
    name: String,
    dir: PathBuf,
    arguments: Vec<String>,
}

/// The builds of ours that are timed: cuda-host-sys alone and cuda-host, both without bindgen.
fn our_subjects(root: &Path) -> Vec<Subject> {
    vec![
        Subject {
            name: "cuda-host-sys (snapshot, no bindgen)".to_owned(),
            dir: root.to_path_buf(),
            arguments: ["build", "-p", "cuda-host-sys", "--no-default-features"]
                .map(String::from)
                .to_vec(),
        },
        Subject {
            name: "cuda-host (default features)".to_owned(),
            dir: root.to_path_buf(),
            arguments: ["build", "-p", "cuda-host"].map(String::from).to_vec(),
        },
    ]
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let mut subjects = our_subjects(root);
    let ours = subjects.len();
    let mut runs = 3;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--compare" => {
                let dir = PathBuf::from(args.next().ok_or("--compare needs a directory")?);
                let name = dir.file_name().map_or_else(
                    || dir.display().to_string(),
                    |name| name.to_string_lossy().into_owned(),
                );
                subjects.push(Subject {
                    name,
                    dir,
                    arguments: vec!["build".to_owned()],
                });
            }
            "--runs" => {
                runs = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("--runs needs a positive number")?;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    for subject in &subjects {
        crate::run(Command::new(cargo()).current_dir(&subject.dir).arg("fetch"))?;
    }
    let scratch = crate::target_dir(root)?.join("xtask/cold-build");
    let mut seconds: Vec<Vec<f64>> = vec![Vec::new(); subjects.len()];
    for run in 0..runs {
        for (index, subject) in subjects.iter().enumerate() {
            let target = scratch.join(format!("{index}"));
            if target.exists() {
                std::fs::remove_dir_all(&target)
                    .map_err(|e| format!("{}: {e}", target.display()))?;
            }
            let start = Instant::now();
            crate::run(
                Command::new(cargo())
                    .current_dir(&subject.dir)
                    .args(&subject.arguments)
                    .arg("--quiet")
                    .env("CARGO_TARGET_DIR", &target)
                    .env("CUDA_SYS_BINDINGS", "snapshot"),
            )?;
            let elapsed = start.elapsed().as_secs_f64();
            println!("run {}: {:<40} {elapsed:6.1} s", run + 1, subject.name);
            seconds[index].push(elapsed);
        }
    }
    println!("\nmedian of {runs} cold builds:");
    let medians: Vec<f64> = seconds.iter_mut().map(|times| median(times)).collect();
    let names: Vec<&str> = subjects
        .iter()
        .map(|subject| subject.name.as_str())
        .collect();
    for line in summary(&names, &medians, ours) {
        println!("{line}");
    }
    Ok(())
}

/// One line per build with its median; each of the first `ours` also against the first project
/// compared (the one after them), the reference.
fn summary(names: &[&str], medians: &[f64], ours: usize) -> Vec<String> {
    let reference = names.get(ours).zip(medians.get(ours));
    names
        .iter()
        .zip(medians)
        .enumerate()
        .map(|(index, (name, time))| match reference {
            Some((other, other_time)) if index < ours => format!(
                "  {name:<40} {time:6.1} s  ({:+.1} s against {other})",
                time - other_time
            ),
            _ => format!("  {name:<40} {time:6.1} s"),
        })
        .collect()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_are_cuda_host_sys_alone_and_cuda_host_both_without_bindgen() {
        let subjects = our_subjects(Path::new("/w"));
        let arguments: Vec<Vec<&str>> = subjects
            .iter()
            .map(|subject| subject.arguments.iter().map(String::as_str).collect())
            .collect();
        assert_eq!(
            arguments,
            [
                vec!["build", "-p", "cuda-host-sys", "--no-default-features"],
                vec!["build", "-p", "cuda-host"],
            ]
        );
        assert!(
            subjects
                .iter()
                .all(|subject| subject.dir == Path::new("/w"))
        );
    }

    #[test]
    fn each_of_ours_is_reported_against_the_first_project_compared() {
        let lines = summary(
            &["sys", "host", "cudarc-driver", "other"],
            &[2.2, 5.1, 4.1, 9.0],
            2,
        );
        assert!(
            lines[0].ends_with("2.2 s  (-1.9 s against cudarc-driver)"),
            "{lines:?}"
        );
        assert!(
            lines[1].ends_with("5.1 s  (+1.0 s against cudarc-driver)"),
            "{lines:?}"
        );
        assert!(lines[2].ends_with("4.1 s"), "{lines:?}");
        assert!(lines[3].ends_with("9.0 s"), "{lines:?}");
        // Without a project to compare, the medians alone.
        let alone = summary(&["sys", "host"], &[2.2, 5.1], 2);
        assert!(alone.iter().all(|line| line.ends_with(" s")), "{alone:?}");
    }
}
