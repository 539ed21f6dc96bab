//! Log calls that never unwind, and never call a logger under a lock. A logger is user code: it
//! may panic, and it may call cuda-host back. A log call on a thread the driver or cuda-host runs,
//! inside a `Drop`, or in a call documented never to panic goes through [`logged!`], which
//! catches the panic and disposes of its payload (`super::dispose`: handed off a marked thread,
//! dropped now elsewhere). Code that holds a lock a call back would take
//! runs inside [`holding_logs`], which keeps the thread's [`logged!`] calls until it returns, or
//! holds a [`LogHold`] beside the lock's guard.

use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Makes a `log` call, e.g. `logged!(warn!("a look waits: {error}"))`, catching a panic of the
/// logger; inside [`holding_logs`], later.
macro_rules! logged {
    (error!($($argument:tt)+)) => { $crate::contain::logged!(@ Error, $($argument)+) };
    (warn!($($argument:tt)+)) => { $crate::contain::logged!(@ Warn, $($argument)+) };
    (info!($($argument:tt)+)) => { $crate::contain::logged!(@ Info, $($argument)+) };
    (debug!($($argument:tt)+)) => { $crate::contain::logged!(@ Debug, $($argument)+) };
    (@ $level:ident, $($argument:tt)+) => {
        if let Err(payload) = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| {
            let level = ::log::Level::$level;
            if level <= ::log::max_level()
                && !$crate::contain::hold_log_call(
                    $crate::contain::LogSite {
                        level,
                        module: module_path!(),
                        file: file!(),
                        line: line!(),
                    },
                    || format!($($argument)+),
                )
            {
                ::log::log!(level, $($argument)+)
            }
        })) {
            $crate::contain::dispose(payload);
        }
    };
}

pub(crate) use logged;

/// Where a log call was made, and at what level: what a held call is made with later, so that a
/// logger sees it as the call that made it (loggers filter by module, and print file and line).
#[derive(Clone, Copy)]
pub(crate) struct LogSite {
    pub(crate) level: log::Level,
    pub(crate) module: &'static str,
    pub(crate) file: &'static str,
    pub(crate) line: u32,
}

/// A log call held by [`holding_logs`]: where it was made, and its message.
type Held = (LogSite, String);

thread_local! {
    /// How deep in [`holding_logs`] this thread runs: calls are held while it is above 0. A
    /// `Cell` of its own, so that a hold that holds nothing (most) touches nothing else.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The log calls held on this thread. Never dropped, so that a hold in another
    /// thread-local's `Drop` during the thread's exit still holds; empty, with nothing
    /// allocated, whenever no hold is open (the outermost takes the calls when it ends).
    static HELD: ManuallyDrop<RefCell<Vec<Held>>> =
        const { ManuallyDrop::new(RefCell::new(Vec::new())) };
    /// Whether `HELD` may hold calls, so that the end of a hold that held none looks no further.
    static ANY_HELD: Cell<bool> = const { Cell::new(false) };
}

/// Runs `call`, holding the thread's [`logged!`] calls until it returned (or unwound), then
/// makes them: for code that holds a lock a logger's call back into cuda-host would take. Nested
/// calls make theirs when the outermost returns.
#[inline]
pub(crate) fn holding_logs<T>(call: impl FnOnce() -> T) -> T {
    let _hold = LogHold::begin();
    call()
}

/// Holds the thread's [`logged!`] calls while it lives, as [`holding_logs`] does during a call:
/// for a lock held by a guard, which keeps one beside the lock's guard and lets go of the lock
/// first. Dropped (also on unwind), the outermost hold makes the held calls. Stays on the
/// thread whose calls it holds.
pub(crate) struct LogHold {
    /// Whether this hold counted itself (not during the thread's exit, once the count is gone).
    entered: bool,
    _on_this_thread: std::marker::PhantomData<*const ()>,
}

impl LogHold {
    /// Holds the thread's log calls until the returned hold is dropped.
    #[inline]
    pub(crate) fn begin() -> LogHold {
        let entered = DEPTH.try_with(|depth| depth.set(depth.get() + 1)).is_ok();
        LogHold {
            entered,
            _on_this_thread: std::marker::PhantomData,
        }
    }
}

impl Drop for LogHold {
    #[inline]
    fn drop(&mut self) {
        if !self.entered {
            return;
        }
        let outermost = DEPTH
            .try_with(|depth| {
                depth.set(depth.get() - 1);
                depth.get() == 0
            })
            .unwrap_or(false);
        if outermost {
            make_held();
        }
    }
}

/// Makes the calls held on this thread, if any.
fn make_held() {
    if !ANY_HELD.try_with(|any| any.replace(false)).unwrap_or(true) {
        return;
    }
    let held = HELD
        .try_with(|held| {
            held.try_borrow_mut()
                .map(|mut held| std::mem::take(&mut *held))
        })
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    for (site, message) in held {
        let made = catch_unwind(AssertUnwindSafe(|| {
            log::logger().log(
                &log::Record::builder()
                    .level(site.level)
                    .target(site.module)
                    .module_path_static(Some(site.module))
                    .file_static(Some(site.file))
                    .line(Some(site.line))
                    .args(format_args!("{message}"))
                    .build(),
            );
        }));
        if let Err(payload) = made {
            crate::contain::dispose(payload);
        }
    }
}

/// Holds a call made at `site` whose message `message` formats, if the thread runs inside
/// [`holding_logs`]; whether it did. The message is formatted before the held calls are
/// borrowed: a `Display` that logs has its call held too.
pub(crate) fn hold_log_call(site: LogSite, message: impl FnOnce() -> String) -> bool {
    if DEPTH.try_with(Cell::get).unwrap_or(0) == 0 {
        return false;
    }
    let message = message();
    HELD.try_with(|held| {
        let Ok(mut held) = held.try_borrow_mut() else {
            return false;
        };
        held.push((site, message));
        let _ = ANY_HELD.try_with(|any| any.set(true));
        true
    })
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// What the recorder saw on each thread: the level, target and message of each call.
    static SEEN: Mutex<Vec<(std::thread::ThreadId, log::Level, String, String)>> =
        Mutex::new(Vec::new());

    /// Where the recorder saw each call made from, on each thread: its message, module and line.
    #[allow(clippy::type_complexity)]
    static SEEN_AT: Mutex<Vec<(std::thread::ThreadId, String, Option<String>, Option<u32>)>> =
        Mutex::new(Vec::new());

    struct Recorder;

    impl log::Log for Recorder {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }

        fn log(&self, record: &log::Record<'_>) {
            SEEN_AT.lock().expect("the record").push((
                std::thread::current().id(),
                record.args().to_string(),
                record.module_path().map(str::to_owned),
                record.line(),
            ));
            SEEN.lock().expect("the record").push((
                std::thread::current().id(),
                record.level(),
                record.target().to_owned(),
                record.args().to_string(),
            ));
        }

        fn flush(&self) {}
    }

    /// The calls this thread made so far, as (level, target, message).
    fn seen_here() -> Vec<(log::Level, String, String)> {
        static INSTALLED: std::sync::Once = std::sync::Once::new();
        INSTALLED.call_once(|| {
            log::set_logger(&Recorder).expect("the unit tests' only logger");
            log::set_max_level(log::LevelFilter::Debug);
        });
        let here = std::thread::current().id();
        SEEN.lock()
            .expect("the record")
            .iter()
            .filter(|(thread, ..)| *thread == here)
            .map(|(_, level, target, message)| (*level, target.clone(), message.clone()))
            .collect()
    }

    #[test]
    fn calls_held_are_made_in_order_at_their_level_once_the_outermost_hold_returns() {
        assert!(seen_here().is_empty());
        let inner = holding_logs(|| {
            logged!(warn!("first {}", 1));
            holding_logs(|| logged!(error!("second")));
            assert!(seen_here().is_empty(), "held while the outer hold runs");
            7
        });
        assert_eq!(inner, 7);
        let target = module_path!().to_owned();
        assert_eq!(
            seen_here(),
            [
                (log::Level::Warn, target.clone(), "first 1".to_owned()),
                (log::Level::Error, target.clone(), "second".to_owned()),
            ]
        );
        logged!(debug!("not held"));
        assert_eq!(seen_here().len(), 3, "made at once outside a hold");
    }

    #[test]
    fn calls_held_are_made_when_the_hold_unwinds() {
        assert!(seen_here().is_empty());
        let unwound = std::panic::catch_unwind(|| {
            holding_logs(|| {
                logged!(warn!("before the panic"));
                panic!("deliberate");
            })
        });
        assert!(unwound.is_err());
        assert_eq!(seen_here().len(), 1);
        logged!(warn!("after"));
        assert_eq!(seen_here().len(), 2, "no hold left behind");
    }

    /// A held call is the caller's call, made later: a logger sees it from the module and line
    /// that made it, as it sees a call made at once (loggers filter and print by module, and
    /// print the line).
    #[test]
    fn a_held_call_keeps_the_module_and_line_that_made_it() {
        assert!(seen_here().is_empty());
        let line = line!() + 1;
        holding_logs(|| logged!(warn!("held")));
        logged!(warn!("made at once"));
        let here = std::thread::current().id();
        let seen: Vec<_> = SEEN_AT
            .lock()
            .expect("the record")
            .iter()
            .filter(|(thread, ..)| *thread == here)
            .map(|(_, message, module, line)| (message.clone(), module.clone(), *line))
            .collect();
        let module = Some(module_path!().to_owned());
        assert_eq!(
            seen,
            [
                ("held".to_owned(), module.clone(), Some(line)),
                ("made at once".to_owned(), module, Some(line + 1)),
            ]
        );
    }
}
