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

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let mut subjects = vec![
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
    ];
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
    // Each of ours against the first project compared, the reference.
    let reference = subjects.get(ours).zip(medians.get(ours));
    for (index, (subject, time)) in subjects.iter().zip(&medians).enumerate() {
        print!("  {:<40} {time:6.1} s", subject.name);
        match reference {
            Some((other, other_time)) if index < ours => {
                println!("  ({:+.1} s against {})", time - other_time, other.name)
            }
            _ => println!(),
        }
    }
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
