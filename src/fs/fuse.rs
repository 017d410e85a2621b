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
    backing: Arc<Mutex<Backing<BackingId>>>,
}

/// How the kernel reads each open inode (with passthrough): through a backing file, or by
/// asking the daemon. The kernel fails an open with `EIO` when it does not match how the
/// inode's other handles read: a plain open of an inode read through a backing file, or a
/// passthrough open of an inode it caches pages of. And it settles that in the opener's
/// thread, after the reply, so two opens answered at once may settle in either order. So
/// an inode's open handles either all read through one backing file or none does: how the
/// first is opened decides, until the last is released.
struct Backing<Id> {
    /// Per open inode: its backing file (`None`: read plainly) and its open handles.
    inodes: HashMap<u64, (Option<Id>, usize)>,
    /// Every open handle tracked here, and its inode.
    handles: HashMap<u64, u64>,
}

impl<Id> Default for Backing<Id> {
    fn default() -> Self {
        Backing {
            inodes: HashMap::new(),
            handles: HashMap::new(),
        }
    }
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

impl<Id> Backing<Id> {
    /// Counts the open handle `fh` of inode `ino` and says how it is read: through the
    /// inode's backing file (`Some`), or plainly. An inode with no other open handle reads
    /// through the backing file `new_backing` makes, if it makes one (for a file in the
    /// cache); one with open handles reads as they do.
    fn open(&mut self, ino: u64, fh: u64, new_backing: impl FnOnce() -> Option<Id>) -> Option<&Id> {
        self.handles.insert(fh, ino);
        let (backing, handles) = match self.inodes.entry(ino) {
            Entry::Occupied(opens) => opens.into_mut(),
            Entry::Vacant(slot) => slot.insert((new_backing(), 0)),
        };
        *handles += 1;
        backing.as_ref()
    }

    /// The handle `fh` is released; its inode's backing file goes with its last handle.
    fn release(&mut self, fh: u64) {
        let Some(ino) = self.handles.remove(&fh) else {
            return;
        };
        if let Entry::Occupied(mut opens) = self.inodes.entry(ino) {
            opens.get_mut().1 -= 1;
            if opens.get().1 == 0 {
                opens.remove();
            }
        }
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
            if passthrough {
                // The kernel then reads the file itself: no request per block, and `mmap`
                // maps the cache file.
                let mut backing = backing.lock().recover();
                let cache_file = opened.cache_file.as_ref();
                let new_backing = || {
                    reply
                        .open_backing(cache_file?)
                        .map_err(|e| debug!("no passthrough for inode {}: {e}", ino.0))
                        .ok()
                };
                if let Some(id) = backing.open(ino.0, fh, new_backing) {
                    if cache_file.is_none() {
                        // This open made a stream the kernel will not read: stop it now.
                        // The backing file holds the same content.
                        tree.release(fh);
                    }
                    return reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), id);
                }
            }
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
        self.backing.lock().recover().release(fh.0);
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

#[cfg(test)]
mod tests {
    use super::Backing;

    #[test]
    fn an_inodes_handles_all_read_through_its_backing_file_or_none_does() {
        let mut backing: Backing<u32> = Backing::default();
        // Opened first while its file is generated: plain, and so are its other opens, even
        // one that finds the file in the cache (the kernel would fail it).
        assert_eq!(backing.open(1, 10, || None), None);
        assert_eq!(backing.open(1, 11, || panic!("no new backing file")), None);
        backing.release(10);
        assert_eq!(backing.open(1, 12, || panic!("no new backing file")), None);
        backing.release(11);
        backing.release(12);
        // Every handle released: the next open from the cache reads through a backing file,
        // which the opens after it share, whatever they found.
        assert_eq!(backing.open(1, 13, || Some(7)), Some(&7));
        assert_eq!(backing.open(1, 14, || None), Some(&7));
        assert_eq!(backing.open(2, 15, || None), None);
        backing.release(13);
        assert_eq!(backing.open(1, 16, || Some(8)), Some(&7));
        backing.release(14);
        backing.release(16);
        backing.release(16);
        assert_eq!(backing.open(1, 17, || Some(8)), Some(&8));
    }
}
