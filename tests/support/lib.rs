//! The test harness of the integration tests. The examples do without it; the `stream_points`
//! benchmark takes from it only its pinned words ([`MappedWords`]) and [`thread_cpu_time`].
//!
//! - [`test_driver`] is the driver a test binary runs on, as cuda-host-testing's published
//!   selector (`select_driver`) picks it from `CUDA_TEST_DRIVER`: `real` (NVIDIA's `libcuda`,
//!   which must load and have a device), `software` (the software driver of cuda-host-testing,
//!   `cuda-host-testing/driver/`) or `auto` (the default: the real driver when it loads and has a
//!   device, else the software one). It also becomes the process-wide driver of
//!   `cuda-host-sys`, and the choice is printed once; when none can be chosen, the binary says
//!   why once and exits.
//! - [`ok`] panics with the driver's typed error unless a raw driver call succeeded.
//! - [`capture`] has raw stream capture and graph handles that end or destroy themselves on drop,
//!   and [`host_function`] closures as raw host functions, for tests that call the driver directly.
//! - [`engine_graphs`] has the streams, one-node graphs and taken launches of the polled engine's
//!   graph-node tests.
//! - [`software`] reaches the software driver's fault-injection controls (cuda-host-testing's,
//!   failing the test where they return an error).
//! - [`wait_until`] is the only way tests wait: every wait has a bound and fails with a message.
//! - [`run_in_child`] (in one line: [`alone_in_child!`]) runs one test in a child process, for
//!   what poisons a process (a sticky context error, a changed driver version).
//! - [`Tally`] counts the runs and drops of launched closures.
//! - [`kernels`] loads the PTX kernels of `kernels/` (which the examples load too) on the real
//!   driver.
//! - [`memory`] has host memory the device reaches and stream gates, to order work in tests on
//!   either driver without kernels, and [`hold_and_release`], the shape of a test of what waits
//!   behind a gate.
//! - [`quiet`] keeps the tests' deliberate panics out of their output; [`test_driver`] installs
//!   it.
//! - [`calling_back_logger`] is a logger that calls cuda-host back, once or on every record;
//!   [`panicking_logger`] one that panics.

pub mod allocations;
pub mod calling_back_logger;
pub mod capture;
pub mod child;
pub mod cpu_time;
pub mod engine_graphs;
pub mod exclusive;
pub mod host_function;
pub mod kernels;
pub mod memory;
pub mod panicking_logger;
pub mod per_thread;
pub mod quiet;
pub mod recording_logger;
pub mod repository;
pub mod selection;
pub mod software;
pub mod tally;
pub mod wait;

pub use child::{figure, in_child_process, run_in_child, runs_here_with_libcuda};
#[cfg(target_os = "linux")]
pub use cpu_time::set_own_timer_slack;
pub use cpu_time::{started_thread_cpu_time, thread_cpu_time, thread_sleeps, thread_timer_slack};
pub use exclusive::capture_lock;
pub use memory::{Gate, MappedWords, hold_and_release};
pub use selection::{
    DriverKind, TestDriver, context, host_engine, ok, skip, skip_unless_real, test_driver,
};
pub use tally::{DropProbe, Tally};
pub use wait::{TIMEOUT, wait_until, wait_until_done};
