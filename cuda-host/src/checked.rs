//! Driver calls whose errors name the call, taking the name from the call itself (as cudarc's
//! `result` layer does with one function per entry point), so that it cannot drift from it.

/// Calls the entry point `$entry` of the driver `$driver` with its arguments, and turns the
/// `CUresult` into a `Result<(), cuda_host_sys::Error>` whose error names `$entry`. The call is
/// unsafe like the entry point: write it inside an `unsafe` block whose `SAFETY` comment covers
/// the arguments.
macro_rules! checked {
    ($driver:expr, $entry:ident($($argument:expr),* $(,)?)) => {{
        let driver: &cuda_host_sys::Driver = $driver;
        driver.check(stringify!($entry), driver.$entry($($argument),*))
    }};
}

pub(crate) use checked;
