//! System calls outside the ring: the unpark eventfd, CPU affinity and CPU time, signals, and
//! the blocking socket set-up in [`socket`]. (Everything that may wait goes through the ring, in
//! `uring/`.) Like `uring/`, every `unsafe` block here names the rule it relies on.

pub(crate) mod socket;

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

/// A **blocking** eventfd: the ring's read on it must wait for a signal. A non-blocking one
/// would complete at once and spin the loop.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
	// SAFETY: eventfd(2) takes no pointers; a non-negative result is a new fd that we own.
	let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
	if fd < 0 {
		return Err(io::Error::last_os_error());
	}
	// SAFETY: OwnedFd::from_raw_fd requires an open fd owned by nobody else: it was just created.
	Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to the eventfd counter, which completes the worker's pending read.
pub(crate) fn signal_eventfd(fd: i32) {
	if fd < 0 {
		return;
	}
	let one: u64 = 1;
	// SAFETY: write(2) reads 8 bytes from a live local; the caller keeps `fd` open (it holds the
	// inbox lock under which the worker closes it). EAGAIN (counter saturated) still leaves the
	// eventfd readable, so the result can be ignored.
	let _ = unsafe { libc::write(fd, (&raw const one).cast(), size_of::<u64>()) };
}

/// The CPUs this thread may run on.
pub(crate) fn allowed_cpus() -> io::Result<Vec<usize>> {
	// SAFETY: cpu_set_t is a plain bit array; all-zero is a valid (empty) set.
	let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
	// SAFETY: sched_getaffinity(2) writes at most `size_of::<cpu_set_t>()` bytes into `set`.
	let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &raw mut set) };
	if rc != 0 {
		return Err(io::Error::last_os_error());
	}
	let mut cpus = Vec::new();
	for cpu in 0..libc::CPU_SETSIZE as usize {
		// SAFETY: CPU_ISSET reads a bit of an initialised set; `cpu` is below CPU_SETSIZE.
		if unsafe { libc::CPU_ISSET(cpu, &set) } {
			cpus.push(cpu);
		}
	}
	Ok(cpus)
}

/// Pins the calling thread to `cpus`.
pub(crate) fn set_affinity(cpus: &[usize]) -> io::Result<()> {
	// SAFETY: as in `allowed_cpus`.
	let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
	for &cpu in cpus {
		// SAFETY: CPU_SET writes a bit of a local set; the callers pass CPUs below CPU_SETSIZE
		// (they come from `allowed_cpus`).
		unsafe { libc::CPU_SET(cpu, &mut set) };
	}
	// SAFETY: sched_setaffinity(2) reads `size_of::<cpu_set_t>()` bytes from a live local.
	let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &raw const set) };
	if rc != 0 {
		return Err(io::Error::last_os_error());
	}
	Ok(())
}

/// The CPU time (user + system) of every thread of this process, living or exited:
/// `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`, nanosecond resolution. For benchmarks that report
/// work per CPU-second.
pub fn process_cpu_time() -> io::Result<Duration> {
	let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
	// SAFETY: clock_gettime(2) writes one timespec into a live local.
	let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &raw mut ts) };
	if rc != 0 {
		return Err(io::Error::last_os_error());
	}
	Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// Pins the calling thread to the `index`-th CPU it may run on (wrapping), as kio pins worker
/// `index`. For benchmarks that place plain threads the way kio places its workers.
#[doc(hidden)]
pub fn pin_current_thread(index: usize) -> io::Result<()> {
	let cpus = allowed_cpus()?;
	set_affinity(&[cpus[index % cpus.len()]])
}

/// A signal set of `signals`.
fn sigset(signals: &[i32]) -> io::Result<libc::sigset_t> {
	// SAFETY: sigset_t is plain data; sigemptyset initialises it before any other use.
	let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
	// SAFETY: `set` is a valid, writable sigset_t.
	if unsafe { libc::sigemptyset(&mut set) } != 0 {
		return Err(io::Error::last_os_error());
	}
	for &signal in signals {
		// SAFETY: `set` was initialised by sigemptyset; an invalid signal number is an error.
		if unsafe { libc::sigaddset(&mut set, signal) } != 0 {
			return Err(io::Error::last_os_error());
		}
	}
	Ok(set)
}

/// Blocks `signals` for the calling thread; threads it starts afterwards inherit the mask. Call
/// it before building a runtime, then [`wait_signal`] on a thread of its own.
pub fn block_signals(signals: &[i32]) -> io::Result<()> {
	let set = sigset(signals)?;
	// SAFETY: `set` is an initialised sigset_t; the old mask is not asked for (null).
	let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
	if rc != 0 {
		return Err(io::Error::from_raw_os_error(rc));
	}
	Ok(())
}

/// Blocks the calling thread until one of `signals` (blocked with [`block_signals`]) is
/// pending, takes it, and returns its number.
pub fn wait_signal(signals: &[i32]) -> io::Result<i32> {
	let set = sigset(signals)?;
	let mut signal: libc::c_int = 0;
	// SAFETY: `set` is an initialised sigset_t and `signal` a valid place for the result.
	let rc = unsafe { libc::sigwait(&set, &mut signal) };
	if rc != 0 {
		return Err(io::Error::from_raw_os_error(rc));
	}
	Ok(signal)
}
