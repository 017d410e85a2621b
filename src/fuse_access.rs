//! What this user needs to mount, checked before mounting so that a missing piece is named
//! in one line rather than met as "Permission denied": `/dev/fuse` readable and writable;
//! for a user who is not root, the setuid helper `fusermount3` (Debian's `fuse3` package),
//! found where the fuser crate looks for it; for such a user's `-o allow_other`,
//! `user_allow_other` in `/etc/fuse.conf`. Such a user's daemon also unmounts through
//! `fusermount3 -u`, since the kernel lets only root unmount.

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const DEV_FUSE: &str = "/dev/fuse";
const FUSE_CONF: &str = "/etc/fuse.conf";

/// Fails with what is missing for this user to mount; `allow_other` is whether the mount
/// lets other users in (`-o allow_other` or `-o allow_root`).
pub fn check(allow_other: bool) -> Result<(), String> {
    if !Path::new(DEV_FUSE).exists() {
        return Err(format!(
            "cannot mount: {DEV_FUSE} is missing (this machine or container has no FUSE)"
        ));
    }
    if !readable_and_writable(DEV_FUSE) {
        return Err(format!(
            "cannot mount: {DEV_FUSE} is not readable and writable by this user \
             (a stock system has it at mode 0666)"
        ));
    }
    // SAFETY: geteuid only reads the process's effective user ID; it cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    if fusermount().is_none() {
        return Err(
            "cannot mount: fusermount3 is not on the PATH (install the fuse3 package)".into(),
        );
    }
    if allow_other && !user_allow_other() {
        return Err(format!(
            "cannot mount with -o allow_other: {FUSE_CONF} lacks the line user_allow_other"
        ));
    }
    Ok(())
}

fn readable_and_writable(path: &str) -> bool {
    let Ok(path) = CString::new(path) else {
        return false;
    };
    // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
    unsafe { libc::access(path.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
}

/// The mount helper the fuser crate would run: `FUSERMOUNT_PATH`, else `fusermount3` or
/// `fusermount` on the PATH, else in /sbin or /bin.
fn fusermount() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("FUSERMOUNT_PATH") {
        return Some(PathBuf::from(path));
    }
    let names = ["fusermount3", "fusermount"];
    let path_dirs = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    let dirs = path_dirs
        .into_iter()
        .chain(["/sbin", "/bin"].map(PathBuf::from));
    dirs.flat_map(|dir| names.map(|name| dir.join(name)))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether /etc/fuse.conf has an uncommented `user_allow_other` line.
fn user_allow_other() -> bool {
    std::fs::read_to_string(FUSE_CONF).is_ok_and(|text| {
        text.lines()
            .any(|line| line.split('#').next().unwrap_or("").trim() == "user_allow_other")
    })
}

/// Unmounts `dir` with `fusermount3 -u` (`-z` to detach a busy mount), for a user who is
/// not root.
pub fn fusermount_unmount(dir: &Path, detach: bool) -> std::io::Result<()> {
    let helper = fusermount().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "fusermount3 is not on the PATH",
        )
    })?;
    let mut command = Command::new(&helper);
    command.arg("-u").arg("-q");
    if detach {
        command.arg("-z");
    }
    let status = command
        .arg("--")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{} -u failed ({status})",
            helper.display()
        )))
    }
}
