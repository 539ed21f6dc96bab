//! The family of the other launch forms: host copies in a scope (its body panicking or not),
//! raw launches of a C function (no data, a pass-through pointer, copied bytes) and launches in
//! each sync mode of the driver's host-function thread.
//!
//! What it checks: a scope ends only once no copy of it can write (a destination is never
//! written after the scope returned or unwound), each destination holds its source whole or
//! nothing, the copies that ran are the first ones launched, all of them once the scope ended
//! well; a raw function runs at most once, sees the bytes copied as they were when launched,
//! and runs exactly once where the launch was accepted and its context never failed; a launch in
//! a sync mode keeps every rule of `host_launch` (its witness) and is refused on a polled stream.

use crate::execute::Env;
use crate::witness::{self, Witness, violated};
use crate::world::ContextKind;
use crate::world::{ContextEntry, StreamEntry};
use cuda_host::{Error, UserData, options::HostTaskSyncMode, options::LaunchOptions};
use proptest::prelude::*;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// An operation of the family.
#[derive(Debug, Clone)]
pub enum CopyOp {
    /// A host-copy scope on a stream: `copies` copies of `len` bytes, then its body panics or
    /// returns.
    Scope {
        stream: u8,
        copies: u8,
        len: u16,
        panic_in_body: bool,
    },
    /// A raw launch of a C function; with `capture_at_call`, other code begins a capture of the
    /// stream at the launch's driver call (between cuda-host's check and the launch).
    Raw {
        stream: u8,
        data: RawData,
        capture_at_call: Option<crate::plan::Mode>,
    },
    /// A launch with a sync mode.
    SyncMode {
        stream: u8,
        spin: bool,
        panic_in_run: bool,
    },
    /// `host_copy_fn` called directly on the worker, as a library's CPU fallback would, with
    /// buffers that overlap or not: the worker's own code, logger included.
    Direct { overlapping: bool },
}

/// The user data of a raw launch.
#[derive(Debug, Clone, Copy)]
pub enum RawData {
    None,
    /// The launch's number, passed as the pointer.
    PassThrough,
    /// The launch's number and a pattern, `len` bytes in all.
    Copied(u8),
}

impl CopyOp {
    /// Whether it must run with no other step beside it: a scope waits for its copies, which a
    /// capture begun meanwhile by a step beside it could take for good.
    pub fn runs_alone(&self) -> bool {
        matches!(
            self,
            CopyOp::Scope { .. }
                | CopyOp::Raw {
                    capture_at_call: Some(_),
                    ..
                }
        )
    }
}

/// Any operation of the family.
pub fn op() -> impl Strategy<Value = CopyOp> {
    let index = any::<u8>;
    let data = prop_oneof![
        Just(RawData::None),
        Just(RawData::PassThrough),
        (8..96u8).prop_map(RawData::Copied),
    ];
    prop_oneof![
        3 => (index(), 1..5u8, 1..5000u16, prop::bool::weighted(0.15)).prop_map(
            |(stream, copies, len, panic_in_body)| CopyOp::Scope { stream, copies, len, panic_in_body }
        ),
        3 => (index(), data, prop::option::weighted(0.25, crate::plan::mode())).prop_map(
            |(stream, data, capture_at_call)| CopyOp::Raw { stream, data, capture_at_call }
        ),
        3 => (index(), any::<bool>(), prop::bool::weighted(0.1)).prop_map(
            |(stream, spin, panic_in_run)| CopyOp::SyncMode { stream, spin, panic_in_run }
        ),
        1 => any::<bool>().prop_map(|overlapping| CopyOp::Direct { overlapping }),
    ]
}

/// What the family did over the run, for the figures printed at its end.
static SCOPES_WELL: AtomicU64 = AtomicU64::new(0);
static SCOPES_NOT_WELL: AtomicU64 = AtomicU64::new(0);
static RAW_ACCEPTED: AtomicU64 = AtomicU64::new(0);
static SYNC_MODE_ACCEPTED: AtomicU64 = AtomicU64::new(0);

/// The family's figures over the run.
pub fn figures() -> String {
    let load = |count: &AtomicU64| count.load(Ordering::Relaxed);
    format!(
        "{} host-copy scopes ended well, {} with a failure or a panic; {} raw launches and {} \
         launches in a sync mode accepted",
        load(&SCOPES_WELL),
        load(&SCOPES_NOT_WELL),
        load(&RAW_ACCEPTED),
        load(&SYNC_MODE_ACCEPTED)
    )
}

/// The message of the panic a scope's body is asked for ("deliberate": the suite's quiet panic
/// hook keeps it out of the output).
const PANIC_IN_BODY: &str = "deliberate chaos panic in a host-copy scope's body";

/// Runs an operation of the family on the calling worker: its outcome, for the log.
pub fn execute(env: &Env, op: &CopyOp) -> String {
    match *op {
        CopyOp::Direct { overlapping } => direct(overlapping),
        CopyOp::Scope {
            stream,
            copies,
            len,
            panic_in_body,
        } => scope(env, stream, copies, len, panic_in_body),
        CopyOp::Raw {
            stream,
            data,
            capture_at_call,
        } => raw(env, stream, data, capture_at_call),
        CopyOp::SyncMode {
            stream,
            spin,
            panic_in_run,
        } => sync_mode(env, stream, spin, panic_in_run),
    }
}

fn scope(env: &Env, stream: u8, copies: u8, len: u16, panic_in_body: bool) -> String {
    let world = &env.world;
    let Some(stream) = world.stream(stream) else {
        return "no stream".to_owned();
    };
    // A scope waits for its copies: not behind a gate or a timeline's wait, nor where a capture
    // armed at a call could take a copy for good.
    if stream.held(world) || crate::timelines::holds(&stream) {
        return format!("{} is held: no scope", stream.name);
    }
    if world.armed.lock().unwrap().is_some() {
        return "a capture is armed at a call: no scope".to_owned();
    }
    let len = usize::from(len);
    let sources: Vec<Vec<u8>> = (0..copies)
        .map(|copy| vec![copy.wrapping_mul(37) | 1; len])
        .collect();
    let mut destinations: Vec<Vec<u8>> = vec![vec![0; len]; usize::from(copies)];
    // Which copies were accepted, known also when the body panics.
    let accepted = std::cell::RefCell::new(Vec::new());
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        cuda_host::host_copy::host_copy_scope(&stream.stream, |scope| {
            let mut accepted = accepted.borrow_mut();
            for (source, destination) in sources.iter().zip(destinations.iter_mut()) {
                match scope.copy(source, destination) {
                    Ok(()) => accepted.push(true),
                    Err(error) => {
                        env.check_refusal("HostCopyScope::copy", Some(&stream), &error);
                        accepted.push(false);
                    }
                }
            }
            drop(accepted);
            if panic_in_body {
                panic!("{PANIC_IN_BODY}");
            }
        })
    }));
    let accepted = accepted.into_inner();
    // Whatever the outcome, no copy writes once the scope ended.
    let ended: Vec<Vec<u8>> = destinations.clone();
    let name = format!(
        "a scope of {copies} copies of {len} bytes on {}",
        stream.name
    );
    let well = match outcome {
        Ok(Ok(())) => true,
        Ok(Err(failed)) => {
            env.check_refusal("host_copy_scope", Some(&stream), &failed.error);
            false
        }
        Err(_) => false,
    };
    if well { &SCOPES_WELL } else { &SCOPES_NOT_WELL }.fetch_add(1, Ordering::Relaxed);
    let mut ran_after_one_did_not = false;
    let mut missing = false;
    for (at, (source, destination)) in sources.iter().zip(&ended).enumerate() {
        let copied = destination == source;
        if !copied && destination.iter().any(|&byte| byte != 0) {
            violated(format!("{name}: copy {at} wrote part of its source"));
        }
        let was_accepted = accepted.get(at).copied().unwrap_or(false);
        if copied && !was_accepted {
            violated(format!("{name}: copy {at} was refused, and wrote"));
        }
        if copied && missing {
            ran_after_one_did_not = true;
        }
        if was_accepted && !copied {
            missing = true;
            if well {
                violated(format!(
                    "{name}: copy {at} was accepted and the scope ended well, but did not copy"
                ));
            }
        }
    }
    if ran_after_one_did_not && accepted.iter().all(|&a| a) {
        violated(format!(
            "{name}: a copy ran after one launched before it never did"
        ));
    }
    std::thread::sleep(Duration::from_micros(300));
    if destinations != ended {
        violated(format!("{name}: a copy wrote after its scope ended"));
    }
    format!(
        "{name}: {}",
        if well {
            "ended well".to_owned()
        } else {
            format!("ended with a failure or a panic, accepted {accepted:?}")
        }
    )
}

/// A raw launch of the sequence, checked once every stream is synchronized at its end.
struct RawLaunch {
    what: String,
    number: usize,
    context: Weak<ContextEntry>,
    may_fail: bool,
    /// Whether it must run: not a pass-through launch while a worker's capture was open, which
    /// may take it past cuda-host's look (another node added after it before the look: the
    /// launch is a node of that graph, with no record to abandon, and the call answers `Ok`). A
    /// capture begun at the launch's own call is seen.
    must_run: bool,
}

/// How often each raw launch's function ran, by its number (taken round the table).
static RAW_RUNS: [AtomicU32; RAW_SLOTS] = [const { AtomicU32::new(0) }; RAW_SLOTS];
const RAW_SLOTS: usize = 1 << 12;
static RAW_NEXT: AtomicU64 = AtomicU64::new(0);
/// Copied bytes a raw function found other than as launched.
static RAW_TORN: AtomicU32 = AtomicU32::new(0);
/// The raw launches of the sequence under way that must run.
static RAW_LAUNCHES: Mutex<Vec<RawLaunch>> = Mutex::new(Vec::new());

/// The pattern byte of launch `number`'s copied bytes.
fn pattern(number: usize) -> u8 {
    (number as u8) ^ 0x5a
}

/// Counts a run of the launch its pointer names (its number, as the pointer's address).
///
/// # Safety
/// None: the pointer is a number, never read.
unsafe extern "C" fn run_numbered(data: *mut c_void) {
    RAW_RUNS[data.addr() % RAW_SLOTS].fetch_add(1, Ordering::SeqCst);
}

/// Checks the copied bytes (the pattern after the number and the length) and counts a run.
///
/// # Safety
/// `data` points at the bytes copied by a `Copied` launch of [`raw`]: the launch's number (8
/// bytes), its length (1 byte), then that many bytes in all.
unsafe extern "C" fn run_patterned(data: *mut c_void) {
    // SAFETY: the copy's first 9 bytes (the caller's promise).
    let head = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), 9) };
    let number = u64::from_le_bytes(head[..8].try_into().unwrap_or([0; 8])) as usize;
    let len = usize::from(head[8]);
    // SAFETY: the copy holds `len` bytes (the caller's promise).
    let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
    if bytes[9..].iter().any(|&byte| byte != pattern(number)) {
        RAW_TORN.fetch_add(1, Ordering::SeqCst);
    }
    RAW_RUNS[number % RAW_SLOTS].fetch_add(1, Ordering::SeqCst);
}

/// Does nothing: the function of a launch with no data.
///
/// # Safety
/// None.
unsafe extern "C" fn run_nothing(_: *mut c_void) {}

fn raw(env: &Env, stream: u8, data: RawData, capture_at_call: Option<crate::plan::Mode>) -> String {
    let world = &env.world;
    let Some(stream) = world.stream(stream) else {
        return "no stream".to_owned();
    };
    // Armed as `CaptureAtNextCall` arms one: the runner ends it after the step.
    let armed = capture_at_call.filter(|_| {
        matches!(
            stream.kind,
            crate::world::StreamKind::NonBlocking | crate::world::StreamKind::Blocking
        ) && matches!(stream.stream.capture_state(), Ok(None))
            && world.armed.lock().unwrap().is_none()
    });
    if let Some(mode) = armed {
        world.arm_capture(true);
        *world.armed.lock().unwrap() = Some(Arc::clone(&stream));
        env.controls.begin_capture_at_next_call(
            c"cuLaunchHostFunc",
            &stream.stream,
            crate::execute::raw_mode(mode),
        );
    }
    let number = RAW_NEXT.fetch_add(1, Ordering::SeqCst) as usize;
    RAW_RUNS[number % RAW_SLOTS].store(0, Ordering::SeqCst);
    let what = format!(
        "raw launch {number} ({data:?}{}) on {}",
        if armed.is_some() {
            ", a capture begins at its call"
        } else {
            ""
        },
        stream.name
    );
    let open_before = world.captures_open.load(Ordering::SeqCst) != 0;
    let launched = match data {
        // SAFETY: the function does nothing.
        RawData::None => unsafe {
            cuda_host::host_launch_raw(&stream.stream, run_nothing, UserData::None)
        },
        // SAFETY: the function uses the pointer as a number, never reads it.
        RawData::PassThrough => unsafe {
            cuda_host::host_launch_raw(
                &stream.stream,
                run_numbered,
                UserData::PassThrough(std::ptr::without_provenance_mut(number)),
            )
        },
        RawData::Copied(len) => {
            let len = usize::from(len).max(9);
            let mut bytes = vec![pattern(number); len];
            bytes[..8].copy_from_slice(&(number as u64).to_le_bytes());
            bytes[8] = len as u8;
            // SAFETY: the function reads the copy's `len` bytes during its call, as laid out
            // above, and keeps nothing.
            let launched = unsafe {
                cuda_host::host_launch_raw(&stream.stream, run_patterned, UserData::Copied(&bytes))
            };
            // The caller may change or free its buffer at once.
            bytes.fill(0);
            drop(bytes);
            launched
        }
    };
    let captured = open_before || world.captures_open.load(Ordering::SeqCst) != 0;
    match launched {
        Ok(()) => {
            RAW_ACCEPTED.fetch_add(1, Ordering::Relaxed);
            if !matches!(data, RawData::None) && !stream.context_failed() {
                RAW_LAUNCHES.lock().unwrap().push(RawLaunch {
                    what: what.clone(),
                    number,
                    context: Arc::downgrade(&stream.context),
                    may_fail: stream.context.kind == ContextKind::Fresh,
                    must_run: !(captured && matches!(data, RawData::PassThrough)),
                });
            }
            format!("{what} launched")
        }
        Err(error) => {
            env.check_refusal("host_launch_raw", Some(&stream), &error);
            format!("{what} refused: {error}")
        }
    }
}

/// Once every stream was synchronized at the end of a sequence: each accepted raw launch of a
/// context that never failed ran exactly once, none more than once, and none saw its bytes torn.
pub fn check_raw_launches() -> String {
    let launches = std::mem::take(&mut *RAW_LAUNCHES.lock().unwrap());
    for launch in &launches {
        let runs = RAW_RUNS[launch.number % RAW_SLOTS].load(Ordering::SeqCst);
        let failed = match launch.context.upgrade() {
            Some(context) => context.failed.load(Ordering::SeqCst),
            None => launch.may_fail,
        };
        if runs > 1 || (runs == 0 && !failed && launch.must_run) {
            violated(format!("{} ran {runs} times", launch.what));
        }
    }
    let torn = RAW_TORN.swap(0, Ordering::SeqCst);
    if torn != 0 {
        violated(format!(
            "{torn} raw functions found their copied bytes changed"
        ));
    }
    format!("{} raw launches checked", launches.len())
}

fn sync_mode(env: &Env, stream: u8, spin: bool, panic_in_run: bool) -> String {
    let world = &env.world;
    let Some(stream) = world.stream(stream) else {
        return "no stream".to_owned();
    };
    let mode = if spin {
        HostTaskSyncMode::SpinWait
    } else {
        HostTaskSyncMode::Blocking
    };
    let witness = Witness::new(
        format!(
            "host_launch_with {mode:?} {} on {}",
            world.number(),
            stream.name
        ),
        panic_in_run,
        false,
        true,
    );
    env.note(&stream, &witness, true);
    let probe = witness.probe();
    let globals = witness::global_changes();
    let options = LaunchOptions::default().sync_mode(mode);
    match cuda_host::options::host_launch_with(&stream.stream, options, move || probe.ran()) {
        Ok(()) => {
            if polled(&stream) {
                violated(format!(
                    "{}: accepted with a sync mode on a polled stream",
                    witness.what
                ));
            }
            SYNC_MODE_ACCEPTED.fetch_add(1, Ordering::Relaxed);
            if !stream.context_failed() {
                witness.must_run.store(true, Ordering::SeqCst);
            }
            witness.accepted_at.store(witness::tick(), Ordering::SeqCst);
            format!("{} launched", witness.what)
        }
        Err(error) => {
            if !(polled(&stream) && matches!(error, Error::InvalidArgument { .. })) {
                env.check_refusal("host_launch_with", Some(&stream), &error);
            }
            crate::execute::check_dropped_at_once(&witness, globals, &error);
            format!("{} refused: {error}", witness.what)
        }
    }
}

/// Whether the stream runs its host functions on the polled engine.
fn polled(stream: &StreamEntry) -> bool {
    stream.name.contains(", polled")
}

/// Calls `host_copy_fn` on the calling worker: 16 bytes copied within one buffer, 8 bytes apart
/// or (overlapping) 4, where it logs an error and copies nothing.
fn direct(overlapping: bool) -> String {
    let mut buffer: [u8; 32] = std::array::from_fn(|at| at as u8);
    let base = buffer.as_mut_ptr();
    let offset = if overlapping { 4 } else { 16 };
    let copy = cuda_host::host_copy::HostCopy {
        source: base.cast::<std::ffi::c_void>().cast_const(),
        // SAFETY: within the buffer.
        destination: unsafe { base.add(offset) }.cast(),
        length: 16,
    };
    let mut description = copy;
    // SAFETY: the description names readable and writable memory of this frame, which nothing
    // else touches during the call.
    unsafe { cuda_host::host_copy::host_copy_fn((&raw mut description).cast()) };
    let copied = buffer[offset..offset + 16]
        .iter()
        .enumerate()
        .all(|(at, &byte)| usize::from(byte) == at);
    match (overlapping, copied) {
        (true, true) => {
            crate::witness::violated("host_copy_fn copied overlapping buffers".to_owned())
        }
        (false, false) => {
            crate::witness::violated("host_copy_fn called directly did not copy".to_owned())
        }
        _ => {}
    }
    format!(
        "host_copy_fn called directly ({}): {}",
        if overlapping { "overlapping" } else { "apart" },
        if copied { "copied" } else { "copied nothing" }
    )
}
