//! Log calls that never unwind. A logger is user code and may panic; a log call on a thread the
//! driver or cuda-host runs, inside a `Drop`, or in a call documented never to panic goes through
//! [`logged!`], which catches the panic and disposes of its payload as the trampolines do
//! (dropped later on a caller's thread when caught on the driver's).

/// Makes a `log` call, e.g. `logged!(warn!("a look waits: {error}"))`, catching a panic of the
/// logger.
macro_rules! logged {
    ($level:ident!($($argument:tt)+)) => {
        if let Err(payload) = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| {
            ::log::$level!($($argument)+)
        })) {
            $crate::launch::dispose_panic(payload);
        }
    };
}

pub(crate) use logged;
