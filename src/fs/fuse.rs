//! The `fuser::Filesystem` implementation: it translates kernel requests into calls on the
//! [`Tree`] and its answers into replies. It decides nothing about content: every write-side
//! request is `EROFS` because the filesystem is read-only, everything else is the tree's
//! answer. What it owns is the kernel's side of FUSE passthrough: which open files the kernel
//! reads itself, through which backing file.
//!
//! Every answer goes through a callback, which the tree calls at once or from another
//! thread: the threads that take requests from the kernel never wait for the store or a
//! generation. A panic inside the tree (a bug) fails its one request with `EIO`, never the
//! thread that serves everyone: an unanswered reply answers `EIO` when it is dropped.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BackingId, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenAccMode,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use log::debug;

use crate::sync::{catch_panic, Recover};

use super::error::{FsError, FsResult};
use super::tree::{Attr, Opened, Tree};

/// How long the kernel may keep entries and attributes before asking again.
const TTL: Duration = Duration::from_secs(1);

/// The FUSE face of a [`Tree`].
pub struct SomaFs {
    tree: Arc<Tree>,
    owner: Owner,
    /// Whether the kernel reads cached files itself (FUSE passthrough, Linux 6.9 and later).
    passthrough: bool,
    /// The files the kernel reads through passthrough.
    backing: Arc<Mutex<Backing>>,
}

/// Backing files of passthrough opens. The kernel wants one backing file per inode for as
/// long as any handle of the inode reads through it.
#[derive(Default)]
struct Backing {
    /// Per inode: its backing file and how many handles read through it.
    inodes: HashMap<u64, (BackingId, usize)>,
    /// The handles that read through passthrough, and their inode.
    handles: HashMap<u64, u64>,
}

impl SomaFs {
    pub fn new(tree: Arc<Tree>) -> SomaFs {
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        SomaFs {
            tree,
            owner: Owner {
                mounted_at: SystemTime::now(),
                uid,
                gid,
            },
            passthrough: false,
            backing: Arc::default(),
        }
    }
}

impl Backing {
    /// Replies to an open through passthrough when it can, and gives the reply back when it
    /// cannot. The kernel then reads the file itself: no request per block, and `mmap` maps
    /// the cache file. An inode already read through passthrough must be opened through it
    /// again (the kernel refuses other opens), with the same backing file: its content is the
    /// same whatever this open found in the cache.
    fn open_passthrough(
        &mut self,
        tree: &Tree,
        ino: u64,
        fh: u64,
        cache_file: Option<&std::fs::File>,
        reply: ReplyOpen,
    ) -> Result<(), ReplyOpen> {
        match self.inodes.entry(ino) {
            Entry::Occupied(_) => {
                if cache_file.is_none() {
                    // This open made a stream the kernel will not read: stop it now.
                    tree.release(fh);
                }
            }
            Entry::Vacant(slot) => {
                let Some(file) = cache_file else {
                    return Err(reply);
                };
                match reply.open_backing(file) {
                    Ok(id) => {
                        slot.insert((id, 0));
                    }
                    Err(e) => {
                        debug!("no passthrough for inode {ino}: {e}");
                        return Err(reply);
                    }
                }
            }
        }
        self.handles.insert(fh, ino);
        let (id, handles) = self
            .inodes
            .get_mut(&ino)
            .expect("present or inserted above");
        *handles += 1;
        reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), id);
        Ok(())
    }
}

/// What every inode shows of its owner and times: the daemon's user, the mount's time.
#[derive(Clone, Copy)]
struct Owner {
    mounted_at: SystemTime,
    uid: u32,
    gid: u32,
}

impl Owner {
    fn file_attr(&self, attr: &Attr) -> FileAttr {
        FileAttr {
            ino: INodeNo(attr.ino),
            size: attr.size,
            blocks: attr.size.div_ceil(512),
            atime: self.mounted_at,
            mtime: self.mounted_at,
            ctime: self.mounted_at,
            crtime: self.mounted_at,
            kind: if attr.is_dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            },
            perm: if attr.is_dir { 0o555 } else { 0o444 },
            nlink: if attr.is_dir { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

/// Attributes of a file whose size is not known yet are never cached: the next `stat` must
/// see the exact size as soon as the file has been generated. (Its name is cached as any.)
fn ttl(attr: &Attr) -> Duration {
    if attr.size_known {
        TTL
    } else {
        Duration::ZERO
    }
}

/// Runs a call on the tree; a panic inside it is an `EIO` for this request alone.
fn guarded<T>(call: impl FnOnce() -> FsResult<T>) -> FsResult<T> {
    catch_panic(call).unwrap_or_else(|panic| Err(FsError::Io(panic)))
}

/// The errno a failure is answered with. A backend failure is logged here, once, where it
/// leaves the daemon.
fn errno(e: &FsError) -> Errno {
    if let FsError::Io(message) = e {
        log::error!("{message}");
    }
    match e {
        FsError::NotFound => Errno::ENOENT,
        FsError::NotADirectory => Errno::ENOTDIR,
        FsError::IsADirectory => Errno::EISDIR,
        FsError::Io(_) => Errno::EIO,
    }
}

impl Filesystem for SomaFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.passthrough = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(1).is_ok();
        debug!("FUSE passthrough: {}", self.passthrough);
        // Looks into one directory may run at once: otherwise the kernel holds an `ls` of a
        // directory while a look into it waits for a file to be generated.
        let parallel = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        debug!("parallel directory operations: {}", parallel.is_ok());
        // Files read with direct I/O (sizes not known yet) can still be mapped: polars maps
        // what it reads.
        let mmap = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        debug!("mmap of direct I/O files: {}", mmap.is_ok());
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        let owner = self.owner;
        let answer = Box::new(move |attr: FsResult<Attr>| match attr {
            // The name stands for its inode as long as any (TTL); only a size not known
            // yet must be asked for again at every stat.
            Ok(attr) => {
                reply.entry_with_ttls(&ttl(&attr), &TTL, &owner.file_attr(&attr), Generation(0))
            }
            Err(e) => reply.error(errno(&e)),
        });
        let _ = guarded(|| {
            self.tree.lookup(parent.0, name, answer);
            Ok(())
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let owner = self.owner;
        let answer = Box::new(move |attr: FsResult<Attr>| match attr {
            Ok(attr) => reply.attr(&ttl(&attr), &owner.file_attr(&attr)),
            Err(e) => reply.error(errno(&e)),
        });
        let _ = guarded(|| {
            self.tree.stat(ino.0, answer);
            Ok(())
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
            return reply.error(Errno::EROFS);
        }
        let (tree, backing, passthrough) =
            (self.tree.clone(), self.backing.clone(), self.passthrough);
        let answer = Box::new(move |opened: FsResult<Opened>| {
            let opened = match opened {
                Ok(opened) => opened,
                Err(e) => return reply.error(errno(&e)),
            };
            let fh = opened.fh;
            let reply = if passthrough {
                let mut backing = backing.lock().recover();
                let cache_file = opened.cache_file.as_ref();
                match backing.open_passthrough(&tree, ino.0, fh, cache_file, reply) {
                    Ok(()) => return,
                    Err(reply) => reply,
                }
            } else {
                reply
            };
            if opened.direct_io {
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
            } else {
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE)
            }
        });
        let _ = guarded(|| {
            self.tree.open(ino.0, answer);
            Ok(())
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.tree.forget(ino.0, nlookup);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.tree.release(fh.0);
        let mut backing = self.backing.lock().recover();
        if let Some(ino) = backing.handles.remove(&fh.0) {
            if let Some((_, handles)) = backing.inodes.get_mut(&ino) {
                *handles -= 1;
                if *handles == 0 {
                    backing.inodes.remove(&ino);
                }
            }
        }
        drop(backing);
        reply.ok();
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let answer = Box::new(move |bytes: std::io::Result<Vec<u8>>| match bytes {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(errno(&FsError::io("read failed", e))),
        });
        let _ = guarded(|| {
            self.tree.read(fh.0, offset, size, answer);
            Ok(())
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let answer = Box::new(move |entries: FsResult<Vec<(u64, bool, String)>>| {
            let entries = match entries {
                Ok(entries) => entries,
                Err(e) => return reply.error(errno(&e)),
            };
            let dots = [
                (ino.0, true, ".".to_owned()),
                (ino.0, true, "..".to_owned()),
            ];
            let all = dots.into_iter().chain(entries);
            for (i, (child, is_dir, name)) in all.enumerate().skip(offset as usize) {
                let kind = if is_dir {
                    FileType::Directory
                } else {
                    FileType::RegularFile
                };
                // The offset given with an entry is where the next readdir starts.
                if reply.add(INodeNo(child), (i + 1) as u64, kind, &name) {
                    break;
                }
            }
            reply.ok();
        });
        let _ = guarded(|| {
            self.tree.readdir(ino.0, answer);
            Ok(())
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        // Not a terminal, nor anything else ioctl asks about.
        reply.error(Errno::ENOTTY);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        // No file has extended attributes. ENOSYS, once, makes the kernel answer every later
        // getxattr itself ("not supported"): `ls -l` asks two per file (SELinux label, ACL),
        // which were two round trips per file with ENODATA.
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) {
            return reply.error(Errno::EROFS);
        }
        match guarded(|| self.tree.attr(ino.0)) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    // Everything below would change the store: the filesystem is read-only.

    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(Errno::EROFS);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }
}
