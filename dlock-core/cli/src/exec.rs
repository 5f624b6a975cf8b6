//! How `dlock run` starts its command: as `dlock __exec PARENT -- COMMAND…`, a copy of itself
//! that asks the kernel to SIGKILL it when its parent dies (Linux's `PR_SET_PDEATHSIG`),
//! checks that the `dlock run` that started it is still its parent, then becomes the command
//! (`exec`, same pid). A `dlock` that is itself SIGKILLed — and so can neither stop its
//! command nor keep renewing the lease — thereby never leaves the command running
//! unprotected past the ttl. (Processes the command started are not covered: they would
//! need their own parent-death signal.)

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt as _;
use std::process::Command;

use crate::args::ExecArgs;
use crate::exit;

/// Becomes the command; returns only when that failed, with the status shells give then.
pub(crate) fn exec(args: &ExecArgs) -> u8 {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{Pid, Signal, getppid, set_parent_process_death_signal};
        if let Err(e) = set_parent_process_death_signal(Some(Signal::KILL)) {
            eprintln!("dlock: cannot ask to end with dlock (PR_SET_PDEATHSIG): {e}");
            return exit::CANNOT_RUN;
        }
        // Asked too late: dlock died before, and this process now has another parent.
        if getppid() != Pid::from_raw(args.parent) {
            eprintln!("dlock: dlock ended before its command started; not running it");
            return exit::LOST;
        }
    }
    let words: &[OsString] = &args.command;
    let error = Command::new(&words[0]).args(&words[1..]).exec();
    let shown = words[0].to_string_lossy();
    match error.kind() {
        io::ErrorKind::NotFound => {
            eprintln!("dlock: `{shown}`: command not found");
            exit::NOT_FOUND
        }
        _ => {
            eprintln!("dlock: cannot run `{shown}`: {error}");
            exit::CANNOT_RUN
        }
    }
}
