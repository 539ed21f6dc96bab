//! A logger that panics on every record while armed: cuda-host logs on the driver's thread, on
//! the watcher's, in drains and in calls documented never to panic, and a logger is user code. A
//! logger is set once per process, so a test that installs it runs in a child process of its own.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static ARMED: AtomicBool = AtomicBool::new(false);
/// Records the logger panicked on.
static PANICS: AtomicUsize = AtomicUsize::new(0);

struct PanickingLogger;

impl log::Log for PanickingLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        if ARMED.load(Ordering::SeqCst) {
            PANICS.fetch_add(1, Ordering::SeqCst);
            panic!("deliberate panic of a logger, at: {}", record.args());
        }
    }

    fn flush(&self) {}
}

/// Installs the logger, not armed yet, for every level, with deliberate panics kept quiet.
///
/// # Panics
/// When the process has a logger already.
pub fn install() {
    crate::quiet::quiet_deliberate_panics();
    log::set_logger(&PanickingLogger).expect("the only logger of this process");
    log::set_max_level(log::LevelFilter::Trace);
}

/// Makes the logger panic on every record from now on (`true`), or no longer (`false`).
pub fn arm(armed: bool) {
    ARMED.store(armed, Ordering::SeqCst);
}

/// How many records the logger panicked on.
pub fn panics() -> usize {
    PANICS.load(Ordering::SeqCst)
}
