//! The CPU time a named thread of this process has used, and how often it went to sleep: how the
//! tests and benchmarks show that cuda-host's own threads (the stream-point watcher, the polled
//! engine) cost nothing idle.

use std::time::Duration;

/// The CPU time used so far by the threads of this process named `name` (as Linux keeps it: at
/// most 15 bytes), summed (the polled engine's server threads share one name), or `None` where
/// there is no such thread or no `/proc`. Nanoseconds from `schedstat` where the kernel keeps it;
/// else utime + stime from `stat`, in ticks of 10 ms.
pub fn thread_cpu_time(name: &str) -> Option<Duration> {
    sum_over_threads(name, task_cpu_time)
}

/// `read` of each thread of this process named `name`, summed; `None` where there is no such
/// thread or no `/proc`. A thread that exited since the listing counts nothing.
fn sum_over_threads<T: std::ops::Add<Output = T>>(
    name: &str,
    read: impl Fn(&std::path::Path) -> Option<T>,
) -> Option<T> {
    let mut total = None;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let Some(value) = read(&path) else {
            continue;
        };
        total = Some(match total {
            Some(sum) => sum + value,
            None => value,
        });
    }
    total
}

/// Sets the calling thread's timer slack (`PR_SET_TIMERSLACK`), which the threads it starts
/// inherit.
///
/// # Panics
/// When Linux refuses it.
#[cfg(target_os = "linux")]
pub fn set_own_timer_slack(nanoseconds: u64) {
    use std::ffi::{c_int, c_ulong};
    unsafe extern "C" {
        fn prctl(option: c_int, ...) -> c_int;
    }
    // SAFETY: PR_SET_TIMERSLACK (29) takes one unsigned long by value and changes only the
    // calling thread's slack.
    let set = unsafe { prctl(29, nanoseconds as c_ulong) };
    assert_eq!(set, 0, "PR_SET_TIMERSLACK");
}

/// The timer slack, in nanoseconds, of the thread of this process named `name` (summed over
/// several, as the others: name one thread), as Linux keeps it (`timerslack_ns`); `None` where
/// there is no such thread or file.
pub fn thread_timer_slack(name: &str) -> Option<u64> {
    // Kept under /proc/ID, not /proc/self/task/ID.
    sum_over_threads(name, |path| {
        std::fs::read_to_string(
            std::path::Path::new("/proc")
                .join(path.file_name()?)
                .join("timerslack_ns"),
        )
        .ok()?
        .trim()
        .parse()
        .ok()
    })
}

/// The CPU time of the task at `path` (`/proc/self/task/ID`).
fn task_cpu_time(path: &std::path::Path) -> Option<Duration> {
    if let Some(nanoseconds) = std::fs::read_to_string(path.join("schedstat"))
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u64>().ok())
    {
        return Some(Duration::from_nanos(nanoseconds));
    }
    let stat = std::fs::read_to_string(path.join("stat")).ok()?;
    // The fields after the command's closing parenthesis; utime and stime are 14 and 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// [`thread_cpu_time`] of threads that cuda-host starts: a thread takes its name itself as it
/// starts, which may be after the call that started it has returned, so this waits (bounded) for
/// the name to appear (on one thread at least: of a pool, call it once every thread has shown
/// itself running, as a parked pool has).
pub fn started_thread_cpu_time(name: &str) -> Duration {
    let mut time = None;
    crate::wait_until(&format!("a thread named {name}"), || {
        time = thread_cpu_time(name);
        time.is_some()
    });
    time.expect("the wait ended with the time read")
}

/// How many times the threads of this process named `name` went to sleep of their own accord
/// (`voluntary_ctxt_switches`), summed: each of a parked or resting thread's wakes ends in one.
/// `None` where there is no such thread or no `/proc`.
pub fn thread_sleeps(name: &str) -> Option<u64> {
    sum_over_threads(name, |path| {
        std::fs::read_to_string(path.join("status"))
            .ok()?
            .lines()
            .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))?
            .trim()
            .parse::<u64>()
            .ok()
    })
}
