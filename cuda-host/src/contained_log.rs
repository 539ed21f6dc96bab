//! Log calls that never unwind, and never call a logger under a lock. A logger is user code: it
//! may panic, and it may call cuda-host back. A log call on a thread the driver or cuda-host runs,
//! inside a `Drop`, or in a call documented never to panic goes through [`logged!`], which
//! catches the panic and disposes of its payload as the trampolines do (dropped later on a
//! caller's thread when caught on the driver's). Code that holds a lock a call back would take
//! runs inside [`holding_logs`], which keeps the thread's [`logged!`] calls until it returns.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Makes a `log` call, e.g. `logged!(warn!("a look waits: {error}"))`, catching a panic of the
/// logger; inside [`holding_logs`], later.
macro_rules! logged {
    (error!($($argument:tt)+)) => { $crate::contained_log::logged!(@ Error, $($argument)+) };
    (warn!($($argument:tt)+)) => { $crate::contained_log::logged!(@ Warn, $($argument)+) };
    (info!($($argument:tt)+)) => { $crate::contained_log::logged!(@ Info, $($argument)+) };
    (debug!($($argument:tt)+)) => { $crate::contained_log::logged!(@ Debug, $($argument)+) };
    (@ $level:ident, $($argument:tt)+) => {
        if let Err(payload) = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| {
            let level = ::log::Level::$level;
            if level <= ::log::max_level()
                && !$crate::contained_log::held(level, module_path!(), || format!($($argument)+))
            {
                ::log::log!(level, $($argument)+)
            }
        })) {
            $crate::launch::dispose_panic(payload);
        }
    };
}

pub(crate) use logged;

/// A log call held by [`holding_logs`]: its level, target and message.
type Held = (log::Level, &'static str, String);

thread_local! {
    /// The log calls held on this thread, while it runs inside [`holding_logs`].
    static HELD: RefCell<Option<Vec<Held>>> = const { RefCell::new(None) };
}

/// Runs `call`, holding the thread's [`logged!`] calls until it returned (or unwound), then
/// makes them: for code that holds a lock a logger's call back into cuda-host would take. Nested
/// calls make theirs when the outermost returns.
pub(crate) fn holding_logs<T>(call: impl FnOnce() -> T) -> T {
    let outermost = HELD
        .try_with(|held| {
            let mut held = held.borrow_mut();
            held.is_none().then(|| *held = Some(Vec::new())).is_some()
        })
        .unwrap_or(false);
    /// Makes the held calls when dropped, also on unwind.
    struct Release(bool);
    impl Drop for Release {
        fn drop(&mut self) {
            if !self.0 {
                return;
            }
            let held = HELD
                .try_with(|held| held.borrow_mut().take())
                .ok()
                .flatten();
            for (level, target, message) in held.into_iter().flatten() {
                let made = catch_unwind(AssertUnwindSafe(|| {
                    log::log!(target: target, level, "{message}");
                }));
                if let Err(payload) = made {
                    crate::launch::dispose_panic(payload);
                }
            }
        }
    }
    let _release = Release(outermost);
    call()
}

/// Holds a call at `level` from `target` whose message `message` formats, if the thread runs
/// inside [`holding_logs`]; whether it did.
pub(crate) fn held(
    level: log::Level,
    target: &'static str,
    message: impl FnOnce() -> String,
) -> bool {
    HELD.try_with(|held| {
        let Ok(mut held) = held.try_borrow_mut() else {
            return false;
        };
        let Some(calls) = held.as_mut() else {
            return false;
        };
        calls.push((level, target, message()));
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

    struct Recorder;

    impl log::Log for Recorder {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }

        fn log(&self, record: &log::Record<'_>) {
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
}
