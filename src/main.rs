//! The `soma-mount` command: parse options, open the store, mount, and unmount cleanly on
//! SIGINT, SIGTERM or an outside `umount`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use fuser::{MountOption, SessionACL};
use log::{error, info, warn};

use soma_mount::budget::{Budget, Budgets};
use soma_mount::fs::{describe_status, ContentCache, DataOptions, SomaFs, Tree, STATUS_NAME};
use soma_mount::s3::Front;
use soma_mount::soma::Store;

mod fuse_access;

/// How often the log (`-v`) shows the generations that have run longer than
/// [`PROGRESS_AFTER`].
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
const PROGRESS_AFTER: Duration = Duration::from_secs(2);

/// Set in the environment of the foreground process that `soma-mount` (without `-f`) starts.
const DAEMON_ENV: &str = "SOMA_MOUNT_DAEMON";

/// Mount a TileDB-SOMA store as a read-only directory tree.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// The store: a path, a file:// or s3:// URI, or any URI libtiledb reads.
    uri: String,
    /// An existing directory to mount on.
    mountpoint: PathBuf,
    /// Stay in the foreground (otherwise return once mounted, leaving a daemon).
    #[arg(short, long)]
    foreground: bool,
    /// Show everything as of this time: milliseconds since the epoch, or RFC 3339.
    #[arg(long, value_parser = parse_timestamp)]
    timestamp: Option<u64>,
    /// A libtiledb configuration parameter (repeatable), e.g. vfs.s3.region=us-west-2.
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    config: Vec<(String, String)>,
    /// Mount options: allow_other lets other users see the mount.
    #[arg(short = 'o', value_name = "OPTION", value_delimiter = ',')]
    options: Vec<String>,
    /// Log more: -v for each object opened, -vv for every request.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Write the log to this file (a daemon otherwise logs nowhere once mounted).
    #[arg(long)]
    log_file: Option<PathBuf>,
    /// Where generated files are cached [default: $XDG_CACHE_HOME/soma-mount].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// The most the cache may hold on disk (K, M, G, T suffixes are powers of 1024).
    #[arg(long, default_value = "10G", value_parser = parse_size)]
    cache_size: u64,
    /// Data files estimated below this size are generated whole when opened, so that their
    /// exact size is known to stat, mmap and tail.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    materialize_limit: u64,
    /// Generate every data file whole when opened: every size is exact, first bytes come later.
    #[arg(long)]
    exact_sizes: bool,
    /// `slices/` cuts each array into chunks of about this many stored cells.
    #[arg(long, default_value_t = 1_000_000)]
    chunk_cells: u64,
    /// Seconds a directory's metadata and listing are kept before the store is asked again;
    /// changes to the store show after this long.
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    metadata_ttl: f64,
    /// Let libtiledb send its requests to S3 itself, not through the daemon's front (which
    /// fetches the small files of each open whole, at once, and keeps them across mounts).
    #[arg(long)]
    s3_direct: bool,
    /// The memory all readers hold at once, at most; more readers wait for memory.
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    max_memory: u64,
    /// Files generated at once, at most; more wait their turn.
    #[arg(long, default_value_t = soma_mount::budget::DEFAULT_GENERATIONS)]
    max_generations: u64,
}

/// A size in bytes: a number with an optional K, M, G or T suffix (powers of 1024).
fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text
        .trim()
        .trim_end_matches(['B', 'b'])
        .trim_end_matches('i');
    let (digits, shift) = match trimmed.char_indices().last() {
        Some((i, 'K' | 'k')) => (&trimmed[..i], 10),
        Some((i, 'M' | 'm')) => (&trimmed[..i], 20),
        Some((i, 'G' | 'g')) => (&trimmed[..i], 30),
        Some((i, 'T' | 't')) => (&trimmed[..i], 40),
        _ => (trimmed, 0),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| format!("not a size: {text:?} (e.g. 512M, 10G)"))
}

/// `$XDG_CACHE_HOME/soma-mount`, else `~/.cache/soma-mount`, else a directory in /tmp.
fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("soma-mount");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".cache").join("soma-mount");
    }
    // SAFETY: getuid cannot fail and touches no memory.
    std::env::temp_dir().join(format!("soma-mount-cache-{}", unsafe { libc::getuid() }))
}

fn parse_timestamp(text: &str) -> Result<u64, String> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let time = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|e| format!("not milliseconds since the epoch nor RFC 3339 ({e})"))?;
    u64::try_from(time.timestamp_millis()).map_err(|_| "before 1970".to_owned())
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Ok(s),
        _ => Err(format!("not a number of seconds: {text:?}")),
    }
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))?;
    Ok((key.trim().to_owned(), value.to_owned()))
}

/// A local path becomes absolute, so that what the daemon shows does not depend on its cwd.
fn absolute_uri(uri: &str) -> String {
    if uri.contains("://") {
        return uri.trim_end_matches('/').to_owned();
    }
    std::path::absolute(uri)
        .map(|p| p.to_string_lossy().trim_end_matches('/').to_owned())
        .unwrap_or_else(|_| uri.to_owned())
}

fn init_logging(cli: &Cli) {
    let level = match cli.verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        _ => log::LevelFilter::Debug,
    };
    let mut builder = env_logger::Builder::new();
    builder
        .filter_level(level)
        // When the mount is taken away by `umount` (the usual way), fuser still tries to
        // unmount it on the way out and warns that it could not: not news to anyone.
        .filter_module("fuser::mnt", log::LevelFilter::Error)
        .format_timestamp_millis()
        .parse_default_env();
    if let Some(path) = &cli.log_file {
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(file) => {
                builder.target(env_logger::Target::Pipe(Box::new(file)));
            }
            Err(e) => eprintln!("soma-mount: cannot open log file {}: {e}", path.display()),
        }
    }
    builder.init();
}

/// True when `dir` is listed as a mount point in /proc/self/mountinfo.
fn is_mounted(dir: &Path) -> bool {
    mount_id(dir).is_some()
}

/// The kernel's ID of the mount on `dir` (the top one, when several are stacked there), from
/// /proc/self/mountinfo; `None` when nothing is mounted there. A later mount on `dir` has
/// another ID.
///
/// Read from the mount table, never through `dir`: a `stat` of `dir` walks into the mount,
/// which holds it busy meanwhile (an `umount` at that moment fails: the daemon's own `stat`
/// just after mounting made `umount DIR` fail once in a while) and, on this daemon's mount,
/// waits for its own threads. The path is resolved through its parent, so that a dead mount
/// (which fails every access) is found too.
fn mount_id(dir: &Path) -> Option<u64> {
    let abs = std::path::absolute(dir).ok()?;
    let resolved = match (abs.parent().map(Path::canonicalize), abs.file_name()) {
        (Some(Ok(parent)), Some(name)) => parent.join(name),
        _ => abs,
    };
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let target = resolved.to_string_lossy();
    // Fields: mount ID, parent ID, major:minor, root, mount point, ... The table lists a
    // mount after the one it covers.
    info.lines().rev().find_map(|line| {
        let mut fields = line.split(' ');
        let id = fields.next()?;
        let point = fields.nth(3)?;
        (unescape_mountinfo(point) == target).then(|| id.parse().ok())?
    })
}

/// mountinfo writes space, tab, newline and backslash in paths as `\ooo` octal escapes.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Without `-f`: run the same command in the foreground as a detached child, and return once
/// it says it has mounted (0) or has failed (its exit code; it has said why on stderr).
///
/// The child's stdout is a pipe to this process: it writes one line there once mounted, and
/// its end closes when it exits, so this waits on the pipe alone.
fn daemonize() -> ExitCode {
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("soma-mount: cannot find my own executable");
        return ExitCode::FAILURE;
    };
    let (mut ready, ready_writer) = match std::io::pipe() {
        Ok(pipe) => pipe,
        Err(e) => {
            eprintln!("soma-mount: cannot start the daemon: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = Command::new(exe);
    command
        .args(std::env::args_os().skip(1))
        .arg("--foreground")
        .env(DAEMON_ENV, "1")
        .stdin(Stdio::null())
        .stdout(ready_writer);
    // SAFETY: `setsid` is async-signal-safe and is the only call made between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("soma-mount: cannot start the daemon: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Drop our copy of the writer (moved into `command`), so EOF means the child is gone.
    drop(command);
    let mut line = String::new();
    use std::io::Read;
    let _ = ready.read_to_string(&mut line);
    if line.starts_with(READY) {
        return ExitCode::SUCCESS;
    }
    match child.wait() {
        Ok(status) => ExitCode::from(status.code().unwrap_or(1).clamp(1, 255) as u8),
        Err(e) => {
            eprintln!("soma-mount: cannot watch the daemon: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a daemon writes to its parent once mounted.
const READY: &str = "mounted";

/// Once mounted, a daemon tells its parent, then lets go of the caller's stdout and stderr
/// (to /dev/null; the log goes to --log-file), so no terminal or pipe is held open by it.
fn detach_from_parent() {
    use std::io::Write;
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{READY}");
    let _ = stdout.flush();
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptors are valid; dup2 atomically replaces fds 1 and 2, which
        // closes the parent's pipe (it sees EOF after the line above).
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}

/// Unmounts `dir`; a busy mount (files open on it) is detached instead.
fn unmount(dir: &Path) {
    if let Err(e) = umount2(dir, 0) {
        warn!("unmount failed ({e}); detaching the mount instead");
        lazy_unmount(dir);
    }
}

/// Detaches the mount on `dir`: it goes once the last user leaves.
fn lazy_unmount(dir: &Path) {
    if let Err(e) = umount2(dir, libc::MNT_DETACH) {
        warn!("cannot unmount {}: {e}", dir.display());
    }
}

fn umount2(dir: &Path, flags: libc::c_int) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
    match unsafe { libc::umount2(path.as_ptr(), flags) } {
        0 => Ok(()),
        _ => match std::io::Error::last_os_error() {
            // A user who is not root unmounts through the setuid helper.
            e if e.raw_os_error() == Some(libc::EPERM) => {
                fuse_access::fusermount_unmount(dir, flags & libc::MNT_DETACH != 0)
            }
            e => Err(e),
        },
    }
}

/// Mounts and serves until a signal or an outside `umount`, then shuts down: each stage a
/// function of its own. A failure before the mount is up is one line on stderr.
fn run(cli: Cli) -> ExitCode {
    match mount(&cli) {
        Ok((tree, session, stop)) => serve(&cli, &tree, session, &stop),
        Err(message) => {
            eprintln!("soma-mount: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Everything before serving: signals, the store, the mount point, the cache, the mount.
fn mount(cli: &Cli) -> Result<(Arc<Tree>, fuser::BackgroundSession, Arc<AtomicBool>), String> {
    let stop = stop_on_signals()?;
    let uri = absolute_uri(&cli.uri);
    let metadata_ttl = metadata_ttl(cli);
    let data = data_options(cli, metadata_ttl)?;
    let front = s3_front(cli, &uri, &data.cache);
    let budgets = Budgets::new(cli.max_memory, cli.max_generations.max(1));
    let store = open_store(cli, &uri, front, metadata_ttl, budgets.memory.clone())?;
    prepare_mountpoint(&cli.mountpoint)?;
    let config = fuse_config(cli, &uri)?;
    fuse_access::check(config.acl != SessionACL::Owner)?;
    let tree = Tree::new(store, &uri, data, budgets);
    let fs = SomaFs::new(tree.clone());
    let session = fuser::Session::new(fs, &cli.mountpoint, &config)
        .and_then(|s| s.spawn())
        .map_err(|e| format!("cannot mount on {}: {e}", cli.mountpoint.display()))?;
    info!("mounted {uri} on {}", cli.mountpoint.display());
    Ok((tree, session, stop))
}

/// How long listings and metadata are kept before the store is asked again: the TTL, or
/// the life of the mount for a store shown as of a time already past, which cannot change.
fn metadata_ttl(cli: &Cli) -> Duration {
    if soma_mount::soma::shows_the_past(cli.timestamp) {
        Duration::MAX
    } else {
        Duration::from_secs_f64(cli.metadata_ttl)
    }
}

/// A flag that SIGINT and SIGTERM raise.
fn stop_on_signals() -> Result<Arc<AtomicBool>, String> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, stop.clone())
            .map_err(|e| format!("cannot handle signal {signal}: {e}"))?;
    }
    Ok(stop)
}

/// For a store on S3, the daemon's front that libtiledb's requests go through
/// ([`soma_mount::s3`]), unless `--s3-direct` or the front cannot reach the store as
/// libtiledb would (then the log says why).
fn s3_front(cli: &Cli, uri: &str, cache: &Arc<ContentCache>) -> Option<Front> {
    if !uri.starts_with("s3://") || cli.s3_direct {
        return None;
    }
    Front::start(uri, &cli.config, cache.clone())
        .inspect_err(|why| info!("libtiledb talks to S3 itself, without the daemon's front: {why}"))
        .ok()
}

/// The store, with the root opened once: a URI with no TileDB object fails here, before
/// anything is mounted. The store keeps what it opened for the metadata TTL, so the first
/// look into the root within it does not open the root again.
fn open_store(
    cli: &Cli,
    uri: &str,
    front: Option<Front>,
    metadata_ttl: Duration,
    memory: Arc<Budget>,
) -> Result<Store, String> {
    let store = Store::new(uri, &cli.config, front, cli.timestamp, metadata_ttl, memory)
        .map_err(|e| format!("bad libtiledb configuration: {e}"))?;
    store
        .open(uri, None)
        .map_err(|e| format!("cannot open {uri}: {e}"))?;
    Ok(store)
}

/// Checks the mount point: a directory, not mounted on, except by a dead mount (after a
/// SIGKILL the kernel keeps one: every access says "transport endpoint is not connected"),
/// which is detached and mounted over.
fn prepare_mountpoint(mountpoint: &Path) -> Result<(), String> {
    if is_mounted(mountpoint) {
        // Opening the directory asks the daemon behind it; a `stat` may be answered from
        // attributes the kernel still holds for a second.
        match std::fs::read_dir(mountpoint) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                warn!(
                    "{} holds a dead mount (its daemon was killed): detaching it",
                    mountpoint.display()
                );
                lazy_unmount(mountpoint);
            }
            _ => {
                return Err(format!(
                    "{} is already mounted; unmount it first: umount {}",
                    mountpoint.display(),
                    mountpoint.display()
                ))
            }
        }
    }
    if !mountpoint.is_dir() {
        return Err(format!(
            "mount point {} is not a directory",
            mountpoint.display()
        ));
    }
    Ok(())
}

/// The FUSE mount: read-only, with the `-o` options.
fn fuse_config(cli: &Cli, uri: &str) -> Result<fuser::Config, String> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::RO,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::DefaultPermissions,
        MountOption::FSName(uri.to_owned()),
        MountOption::Subtype("soma-mount".into()),
    ];
    for option in &cli.options {
        match option.as_str() {
            "allow_other" => config.acl = SessionACL::All,
            "allow_root" => config.acl = SessionACL::RootAndOwner,
            "ro" | "default_permissions" => {}
            other => return Err(format!("unknown mount option {other:?}")),
        }
    }
    if config.acl != SessionACL::Owner {
        config
            .mount_options
            .push(MountOption::CUSTOM("allow_other".into()));
    }
    config.n_threads = Some(4);
    Ok(config)
}

/// How data files are generated and cached.
fn data_options(cli: &Cli, metadata_ttl: Duration) -> Result<DataOptions, String> {
    let cache_dir = cli.cache_dir.clone().unwrap_or_else(default_cache_dir);
    let cache = ContentCache::open(&cache_dir, cli.cache_size)
        .map_err(|e| format!("cannot use cache directory {}: {e}", cache_dir.display()))?;
    Ok(DataOptions {
        cache: Arc::new(cache),
        materialize_limit: cli.materialize_limit,
        exact_sizes: cli.exact_sizes,
        chunk_cells: cli.chunk_cells.max(1),
        metadata_ttl,
    })
}

/// Serves until a signal or an outside `umount`, then shuts down.
fn serve(cli: &Cli, tree: &Tree, session: fuser::BackgroundSession, stop: &AtomicBool) -> ExitCode {
    if std::env::var_os(DAEMON_ENV).is_some() {
        detach_from_parent();
    }
    warm_heap();
    // What identifies this daemon's mount: its ID in the mount table. Whatever is mounted at
    // the path later (a new mount after an outside `umount`) has another.
    let own_mount = mount_id(&cli.mountpoint);
    let mut progress_logged = Instant::now();
    let signalled = loop {
        if stop.load(Ordering::Relaxed) {
            break true;
        }
        if session.guard.is_finished() {
            break false; // unmounted from outside (`umount DIR`): the session loop has ended
        }
        if progress_logged.elapsed() >= PROGRESS_EVERY {
            tree.activity().log_long_running(PROGRESS_AFTER);
            progress_logged = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if signalled {
        info!("signal received: unmounting {}", cli.mountpoint.display());
        // Only this daemon's own mount: it may have gone meanwhile, and the directory may
        // hold another mount by now.
        if !session.guard.is_finished() && mount_id(&cli.mountpoint) == own_mount {
            unmount(&cli.mountpoint);
        }
    } else {
        info!("{} was unmounted", cli.mountpoint.display());
    }
    shut_down(tree, session)
}

/// Ends the daemon once unmounted: background work first (files still being generated stop,
/// and their readers, given an error, let go of a detached mount), then the session, once
/// the kernel lets go of the mount: at once after an unmount, when its last open file is
/// closed after a detach.
fn shut_down(tree: &Tree, session: fuser::BackgroundSession) -> ExitCode {
    if !tree.stop_background_work(BACKGROUND_WAIT) {
        warn!(
            "background work (member opens, file generation) still ran {}s after the unmount: exiting anyway",
            BACKGROUND_WAIT.as_secs()
        );
    }
    let deadline = Instant::now() + SESSION_WAIT;
    while !session.guard.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if !session.guard.is_finished() {
        warn!(
            "files on the detached mount were still open {}s after the unmount: exiting without them",
            SESSION_WAIT.as_secs()
        );
        // SAFETY: `_exit` ends the process at once. It skips the exit handlers on purpose:
        // they would tear down libtiledb's static state while the session's threads still
        // serve those files (the log has no buffer to lose).
        unsafe { libc::_exit(0) }
    }
    // The session's thread is joined on its own and the rest of the session forgotten: when
    // dropped, fuser unmounts whatever is mounted at the path, and once an outside `umount`
    // has taken this daemon's mount away, that may be a new mount of someone else's.
    let mut session = session;
    let guard = std::mem::replace(&mut session.guard, std::thread::spawn(|| Ok(())));
    std::mem::forget(session);
    let ended = guard
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the FUSE session's thread panicked")));
    match ended {
        Ok(()) => ExitCode::SUCCESS,
        // After an unmount the session's last read of the FUSE device fails: with ENODEV,
        // which fuser takes as the end, or, when it meets the kernel tearing down a detached
        // mount, with ECONNABORTED. Both are the end of an unmounted session.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => ExitCode::SUCCESS,
        Err(e) => {
            error!("the FUSE session failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How long an ending daemon waits for the kernel to let go of a detached mount: its files
/// still open then read as errors from then on.
const SESSION_WAIT: Duration = Duration::from_secs(5);

/// How long an ending daemon waits for its background work: member objects still being
/// opened (a round of metadata requests each; a store that stopped answering fails them
/// within libtiledb's timeouts) and files still being generated (stopped, they end with the
/// batch their query reads).
const BACKGROUND_WAIT: Duration = Duration::from_secs(20);

/// Keeps freed memory for reuse rather than handing it back to the system at once, and in
/// one place where every thread finds it.
///
/// A read frees batches of tens of megabytes again and again; glibc's defaults returned each
/// to the system and took it back at the next batch, one page fault per page: a fifth of a
/// read's time went to faulting in memory it had just freed. Memory above `TRIM_BYTES` of
/// free space still goes back.
///
/// Every file a read serves runs on threads of its own (a reader, encoders, a writer), and
/// glibc gives threads arenas of their own: the memory one read freed sat in arenas the next
/// read's threads did not use, and was faulted in afresh. Reading obs's 100,000 rows took
/// 2,500 page faults every time, and 14-18 ms; with one arena only the first read does, and
/// later ones take 10 ms. The allocations are few and large (buffers, tiles), so the one
/// arena's lock costs nothing measurable.
fn tune_allocator() {
    const MMAP_BYTES: i32 = 32 << 20; // glibc's largest allowed threshold
    const TRIM_BYTES: i32 = 256 << 20;
    // SAFETY: mallopt only sets allocator parameters; it is called before any other thread
    // exists, and an unsupported value is refused (returns 0), which leaves the default.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_BYTES);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_BYTES);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// How much heap `warm_heap` faults in: about what reading a small array holds at once
/// (its TileDB buffers, the tiles they come from, the text in flight).
const WARM_HEAP_BYTES: usize = 32 << 20;

/// Faults in `WARM_HEAP_BYTES` of heap and frees it again, kept (see `tune_allocator`) for
/// the reads to come.
///
/// Memory is faulted in the first time it is touched, a page at a time (about 2.6 µs each on
/// a small VM). Without this, the daemon's first read of an array bigger than any before it
/// paid for that: obs's 100,000 rows took 2,400 faults and 8 ms more than the same read once
/// the memory had been used. Called once the session runs: its threads take their request
/// buffers from this heap as they start, and memory warmed before them went to those
/// buffers (a thread that starts later still takes its buffer from the warm memory, which
/// costs only warmth).
fn warm_heap() {
    const PIECE_BYTES: usize = 1 << 20; // under the mmap threshold: carved from the heap
    let pieces: Vec<Vec<u8>> = (0..WARM_HEAP_BYTES / PIECE_BYTES)
        .map(|_| vec![1u8; PIECE_BYTES])
        .collect();
    // Freed side by side, the pieces merge back into one free block at the top of the heap.
    drop(std::hint::black_box(pieces));
}

/// `soma-mount status`: what the daemon behind a mount is doing now.
#[derive(Parser, Debug)]
#[command(name = "soma-mount status")]
struct StatusCli {
    /// Print the daemon's JSON as it is, rather than a summary.
    #[arg(long)]
    json: bool,
    /// The mount point.
    mountpoint: PathBuf,
}

/// Prints what the daemon behind a mount is doing: it reads the mount's status file.
fn status(cli: StatusCli) -> ExitCode {
    let path = cli.mountpoint.join(STATUS_NAME);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!(
                "soma-mount: {} is not a soma-mount mount ({}: {e})",
                cli.mountpoint.display(),
                path.display()
            );
            return ExitCode::FAILURE;
        }
    };
    if cli.json {
        print!("{}", String::from_utf8_lossy(&text));
        return ExitCode::SUCCESS;
    }
    match serde_json::from_slice(&text) {
        Ok(status) => {
            print!("{}", describe_status(&status));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("soma-mount: unreadable status in {}: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|first| first == "status") {
        let rest = std::env::args_os().skip(2);
        let cli = StatusCli::parse_from(std::iter::once("soma-mount status".into()).chain(rest));
        return status(cli);
    }
    let cli = Cli::parse();
    if !cli.foreground {
        return daemonize();
    }
    keep_files_private();
    tune_allocator();
    init_logging(&cli);
    run(cli)
}

/// Every file the daemon or libtiledb creates is readable by its user only (umask 077): the
/// cache's copies of the store's objects and generated files, a `--log-file`, and libtiledb's
/// own logs (`vfs.s3.logging_level` writes `tiledb_s3_*.log` in the working directory).
fn keep_files_private() {
    // SAFETY: umask only sets the process's file mode mask; it cannot fail.
    unsafe { libc::umask(0o077) };
}
