//! The pool: a file (or any [`PMem`]) with a header, a root table, a chunk table and chunks.
//!
//! - [`Pool::create`] and [`Pool::open`] work on a file, mapped by [`MmapMem`] under an exclusive
//!   lock; [`Pool::create_in`] and [`Pool::open_in`] on any memory, such as the crash simulator's.
//! - Opening validates the header (its state line included: one of its two copies must check)
//!   before anything is mapped or written: a file that is not a pool, of another version, corrupt
//!   or truncated is refused with its own [`OpenError`] and left byte for byte as it was.
//! - Opening writes nothing: [`was_clean`](Pool::was_clean) tells whether the last user closed it
//!   with [`close`](Pool::close), [`same_boot`](Pool::same_boot) whether it was last in use in
//!   this boot of the machine. The pool is marked in use (its state line: not clean, this boot;
//!   persisted and synced) by [`mark_in_use`](Pool::mark_in_use) before the first change, which
//!   the engine calls once it has accepted the pool, and which the pool's own writers call too.
//!   Dropping a pool marked in use without `close` leaves it so, and the next open knows to
//!   recover.
//!
//! The byte layout is documented in [`header`].

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

pub mod alloc;
pub mod header;
mod offset;

pub use alloc::{AllocCache, ChunkCounts, Ledger, Local, RECORD_BYTES, RebuildReport};
pub use header::{Family, Header, Layout, RootEntry};
pub use offset::POff;

use crate::error::{CreateError, OpenError};
use crate::mem::{CACHE_LINE, Durability, FlushKind, MmapMem, MmapOptions, PMem, WORD};
use alloc::Allocator;
use header::{
    ChunkUse, HEADER_SIZE, MAGIC, MAX_CHUNK, MIN_CHUNK, ROOT_ENTRIES, ROOT_ENTRY_SIZE, ROOT_TABLE_OFF, STATE_COPIES,
    State,
};

/// How a pool file is mapped.
#[derive(Debug, Clone, Default)]
pub struct Mapping {
    /// Skip flushes and fences: [`Durability::Volatile`]. Only for measuring what durability
    /// costs.
    pub volatile: bool,
    /// Refuse to open unless the file is on persistent memory with DAX.
    pub require_dax: bool,
    /// Force a flush instruction (benchmarks); by default the best one the CPU has.
    pub flush: Option<FlushKind>,
    /// Open the file read-only and map it privately ([`Durability::Private`]): the pool works
    /// as usual, recovery included, on this process's copy, and the file is never written a
    /// byte. Other readers may open it so too; a writer holding it refuses them (and they it).
    pub private: bool,
}

/// How to create a pool.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Bytes the file starts with (rounded up to whole chunks).
    pub initial_size: u64,
    /// Bytes the file may grow to; fixed at creation.
    pub max_size: u64,
    /// Bytes per chunk: a power of two from 64 KiB to 1 GiB.
    pub chunk_size: u64,
    /// How the file is mapped.
    pub mapping: Mapping,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig { initial_size: 8 << 20, max_size: 64 << 30, chunk_size: 1 << 20, mapping: Mapping::default() }
    }
}

impl PoolConfig {
    fn layout(&self) -> Result<Layout, CreateError> {
        let bad = |why: String| Err(CreateError::InvalidConfig(why));
        if !self.chunk_size.is_power_of_two() || !(MIN_CHUNK..=MAX_CHUNK).contains(&self.chunk_size) {
            return bad(format!("chunk size {} is not a power of two in [{MIN_CHUNK}, {MAX_CHUNK}]", self.chunk_size));
        }
        let layout = Layout::for_max_size(self.chunk_size, self.max_size, HEADER_SIZE)
            .ok_or_else(|| CreateError::InvalidConfig(format!("maximum size {} holds no chunk", self.max_size)))?;
        if self.initial_size > layout.max_len() {
            return bad(format!("initial size {} exceeds the maximum {}", self.initial_size, layout.max_len()));
        }
        Ok(layout)
    }
}

/// A pool of persistent memory. See the [module docs](self).
#[derive(Debug)]
pub struct Pool<M: PMem = MmapMem> {
    mem: M,
    header: Header,
    alloc: Allocator,
    /// What the state line said at open: the last user closed the pool cleanly.
    was_clean: bool,
    /// What the state line said at open: the boot the pool was last in use in.
    last_boot: u128,
    /// The boot the mark "in use" names: this one, unless the pool was left in use in another
    /// boot (a power loss may have come between), when it keeps naming that boot until
    /// [`claim_boot`](Pool::claim_boot): a process that dies while recovery goes back to the last
    /// power-safe point leaves a pool that is recovered again the same way, not taken whole.
    mark_boot: u128,
    /// Whether the state line says "in use" now; the lock orders its first write before any
    /// other change.
    in_use: parking_lot::Mutex<bool>,
    path: Option<PathBuf>,
    /// The salt of blob checks, of the uuid.
    salt: u64,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
    move |source| OpenError::Io { path: path.to_owned(), source }
}

impl Pool<MmapMem> {
    /// Creates a pool file at `path`, which must not exist.
    pub fn create(path: impl AsRef<Path>, config: &PoolConfig) -> Result<Pool<MmapMem>, CreateError> {
        let path = path.as_ref();
        let layout = config.layout()?;
        let io = |source| CreateError::Io { path: path.to_owned(), source };
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists { CreateError::Exists { path: path.to_owned() } } else { io(e) }
        })?;
        let made = (|| {
            file.try_lock().map_err(|e| io(e.into()))?;
            let len = initial_len(&layout, config.initial_size);
            crate::mem::reserve_space(&file, 0, len).map_err(io)?;
            let mem = MmapMem::map(file, &mmap_options(&config.mapping, layout.max_len())).map_err(io)?;
            mem.populate(0, len);
            let mut pool = Pool::format(mem, layout)?;
            pool.path = Some(path.to_owned());
            Ok(pool)
        })();
        if made.is_err() {
            // Never leave a half-made file behind: it was ours (create_new).
            let _ = std::fs::remove_file(path);
        }
        made
    }

    /// Opens the pool file at `path`, exclusively. Nothing is written unless every check passes;
    /// the file's blocks are reserved (its bytes unchanged) once the pool's own checks have.
    pub fn open(path: impl AsRef<Path>, mapping: &Mapping) -> Result<Pool<MmapMem>, OpenError> {
        let path = path.as_ref();
        let file = OpenOptions::new().read(true).write(!mapping.private).open(path).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                OpenError::NotFound { path: path.to_owned() }
            } else {
                io_err(path)(e)
            }
        })?;
        let locked = if mapping.private { file.try_lock_shared() } else { file.try_lock() };
        locked.map_err(|e| match e {
            std::fs::TryLockError::WouldBlock => OpenError::Locked { path: path.to_owned() },
            std::fs::TryLockError::Error(e) => io_err(path)(e),
        })?;
        let len = file.metadata().map_err(io_err(path))?.len();
        if len < HEADER_SIZE {
            return Err(OpenError::TooSmall { len, min: HEADER_SIZE });
        }
        let mut page = vec![0u8; HEADER_SIZE as usize];
        file.read_exact_at(&mut page, 0).map_err(io_err(path))?;
        let header = Header::decode(&page)?;
        let state = State::decode(&page, &header.uuid)?;
        check_len(&header.layout, len)?;
        let whole = is_whole(&state, crate::mem::machine_boot());
        check_table(&header, len, whole, |off, buf| file.read_exact_at(buf, off)).map_err(io_err(path))??;
        if !mapping.private {
            // Every byte of the file gets its blocks before it is mapped, changing none of them:
            // in a file with holes (a sparse copy, or one grown where blocks could not be
            // reserved) a store into a hole, or on a file system whose files are memory (tmpfs)
            // even a load, meets a full file system with a SIGBUS. Growth reserves the blocks it
            // adds, so from here on running out of room is an error returned by a call. (A
            // private mapping opens the file read-only and never writes it.)
            crate::mem::reserve_existing(&file, len).map_err(io_err(path))?;
        }
        let mem = MmapMem::map(file, &mmap_options(mapping, header.layout.max_len())).map_err(io_err(path))?;
        let mut pool = Pool::attach(mem, header, state, false);
        pool.path = Some(path.to_owned());
        Ok(pool)
    }

    /// The flush instruction in use.
    pub fn flush_kind(&self) -> FlushKind {
        self.mem.flush_kind()
    }
}

fn mmap_options(mapping: &Mapping, max_len: u64) -> MmapOptions {
    MmapOptions {
        max_len,
        volatile: mapping.volatile,
        require_dax: mapping.require_dax,
        flush: mapping.flush,
        private: mapping.private,
    }
}

fn initial_len(layout: &Layout, initial_size: u64) -> u64 {
    let chunks = initial_size.saturating_sub(layout.data_off).div_ceil(layout.chunk_size).min(layout.chunk_capacity);
    layout.chunk_off(chunks)
}

/// A pool's file always ends on a chunk boundary at or after the data offset.
fn check_len(layout: &Layout, len: u64) -> Result<(), OpenError> {
    if len < layout.data_off {
        return Err(OpenError::Truncated { len, expected: layout.data_off });
    }
    if !(len - layout.data_off).is_multiple_of(layout.chunk_size) {
        let expected = layout.chunk_off(layout.chunks_in(len) + 1);
        return Err(OpenError::Truncated { len, expected });
    }
    if len > layout.max_len() {
        return Err(OpenError::BadLayout(format!("file of {len} bytes exceeds the maximum {}", layout.max_len())));
    }
    Ok(())
}

/// Whether the pool's memory is as its last run left it, by its state line: closed cleanly (and
/// synced), or last in use in the running boot `boot` (only a process died; 0: boots unknown).
fn is_whole(state: &State, boot: u128) -> bool {
    state.is_clean() || (boot != 0 && state.boot == boot)
}

/// Every chunk table entry of a chunk in the file must decode (a single 8-byte store writes each,
/// so only corruption makes one that does not; zero, never written, is damage there if the
/// memory is `whole`, see [`header`]), and every entry past the file's end must be zero or free:
/// a used one means the file was cut.
fn check_table(
    header: &Header,
    len: u64,
    whole: bool,
    read: impl Fn(u64, &mut [u8]) -> io::Result<()>,
) -> io::Result<Result<(), OpenError>> {
    let (layout, uuid) = (&header.layout, &header.uuid);
    let in_file = layout.chunks_in(len);
    let mut buf = vec![0u8; 64 << 10];
    let mut i = 0;
    while i < layout.chunk_capacity {
        let n = ((layout.chunk_capacity - i) as usize).min(buf.len() / 8);
        read(layout.entry_off(i), &mut buf[..n * 8])?;
        for (k, w) in buf[..n * 8].chunks(8).enumerate() {
            let (entry, word) = (i + k as u64, u64::from_le_bytes(w.try_into().expect("8 bytes")));
            if word == 0 {
                if whole && entry < in_file {
                    return Ok(Err(OpenError::BadLayout(format!(
                        "chunk table entry {entry} is zero, never written, inside the file"
                    ))));
                }
                continue;
            }
            match alloc::valid_entry(word, entry, uuid) {
                None => {
                    return Ok(Err(OpenError::BadLayout(format!("chunk table entry {entry} is corrupt ({word:#x})"))));
                }
                Some(ChunkUse::Free) => {}
                Some(_) if entry >= in_file => {
                    return Ok(Err(OpenError::Truncated { len, expected: layout.chunk_off(entry + 1) }));
                }
                Some(_) => {}
            }
        }
        i += n as u64;
    }
    Ok(Ok(()))
}

impl<M: PMem> Pool<M> {
    /// Formats `mem`, which must be zeroed (its header page is checked), as a new pool.
    pub fn create_in(mem: M, config: &PoolConfig) -> Result<Pool<M>, CreateError> {
        let layout = config.layout()?;
        if layout.max_len() > mem.max_len() {
            return Err(CreateError::InvalidConfig(format!(
                "maximum size {} exceeds what the memory can grow to ({})",
                layout.max_len(),
                mem.max_len()
            )));
        }
        mem.grow(initial_len(&layout, config.initial_size))
            .map_err(|e| CreateError::InvalidConfig(format!("cannot size the memory: {e}")))?;
        Pool::format(mem, layout)
    }

    /// Opens the pool in `mem` (a crash image, say), with the checks of [`Pool::open`].
    pub fn open_in(mem: M) -> Result<Pool<M>, OpenError> {
        let len = mem.len();
        if len < HEADER_SIZE {
            return Err(OpenError::TooSmall { len, min: HEADER_SIZE });
        }
        let mut page = vec![0u8; HEADER_SIZE as usize];
        mem.read_bytes(0, &mut page);
        let header = Header::decode(&page)?;
        let state = State::decode(&page, &header.uuid)?;
        check_len(&header.layout, len)?;
        check_table(&header, len, is_whole(&state, mem.boot()), |off, buf| {
            mem.read_bytes(off, buf);
            Ok(())
        })
        .expect("reading memory cannot fail")?;
        Ok(Pool::attach(mem, header, state, false))
    }

    fn format(mem: M, layout: Layout) -> Result<Pool<M>, CreateError> {
        let mut page = vec![0u8; HEADER_SIZE as usize];
        mem.read_bytes(0, &mut page);
        if page.iter().any(|&b| b != 0) {
            return Err(CreateError::InvalidConfig("the memory to format is not zeroed".into()));
        }
        let created =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let header = Header { layout, uuid: *uuid::Uuid::new_v4().as_bytes(), created };
        let bytes = header.encode();
        // Everything but the magic first, so that an interrupted create leaves no magic; both
        // copies of the state line say in use, this boot.
        mem.write_bytes(MAGIC.len() as u64, &bytes[MAGIC.len()..]);
        // The chunks the file holds are free, and their entries say so: a zero entry inside the
        // file is damage.
        let chunks = layout.chunks_in(mem.len());
        for i in 0..chunks {
            // Relaxed: nothing else sees the memory before the magic is written.
            mem.store(layout.entry_off(i), ChunkUse::Free.encode(i, &header.uuid), Ordering::Relaxed);
        }
        mem.flush_range(layout.table_off, chunks * WORD);
        let state = State::in_use(mem.boot());
        for (copy, &off) in STATE_COPIES.iter().enumerate() {
            store_state_copy(&mem, off, state.encode(copy, &header.uuid));
            mem.flush(off);
        }
        mem.flush_range(0, bytes.len() as u64);
        // Fence: the header is durable before the magic claims it is a pool.
        mem.fence();
        mem.write_bytes(0, &bytes[..MAGIC.len()]);
        mem.flush(0);
        // Fence: the pool exists once the magic is durable.
        mem.fence();
        mem.sync().map_err(|source| CreateError::Io { path: PathBuf::new(), source })?;
        Ok(Pool::attach(mem, header, state, true))
    }

    /// Takes a validated pool and what its state line says, writing nothing.
    fn attach(mem: M, header: Header, state: State, fresh: bool) -> Pool<M> {
        let alloc = Allocator::attach(&mem, &header, fresh);
        let salt = alloc::blob_salt(&header.uuid);
        let boot = mem.boot();
        let mark_boot = if fresh || state.is_clean() || state.boot == boot { boot } else { state.boot };
        Pool {
            mem,
            header,
            alloc,
            was_clean: state.is_clean(),
            last_boot: state.boot,
            mark_boot,
            in_use: parking_lot::Mutex::new(fresh),
            path: None,
            salt,
        }
    }

    /// Writes the state line, a double write (see [`header`]): the first copy, flushed and
    /// fenced, then the second, flushed and fenced. A crash tears at most one copy; the other is
    /// whole and says the line before this write or this one.
    fn write_state(&self, state: State) {
        for (copy, &off) in STATE_COPIES.iter().enumerate() {
            store_state_copy(&self.mem, off, state.encode(copy, &self.header.uuid));
            self.mem.flush(off);
            // Fence: this copy is durable before the next one is touched (and, after the second,
            // the line before what it vouches for changes). On a page-cache file the two copies
            // share a page, which the kernel writes back with its content of one moment: a prefix
            // of these stores, in program order.
            self.mem.fence();
        }
    }

    /// Marks the pool in use durably (persisted and synced), unless it is already: before the
    /// pool's first change after an open. The engine calls it once it has accepted the pool; the
    /// pool's own writers (the chunk and root tables) call it too. The mark names this boot,
    /// unless the pool was left in use in another (see [`claim_boot`](Pool::claim_boot)).
    pub fn mark_in_use(&self) -> io::Result<()> {
        let mut in_use = self.in_use.lock();
        if !*in_use {
            self.write_unwritten_entries();
            self.write_state(State::in_use(self.mark_boot));
            // On a page-cache file, pages written after this may reach the disk first: the mark
            // must be there before them.
            self.mem.sync()?;
            *in_use = true;
        }
        Ok(())
    }

    /// Writes free the chunk table entries of the file's chunks that were never written (zero,
    /// accepted as free after a power loss, see [`header`]), flushed and fenced: from the first
    /// change on, every entry inside the file is written, as an open where the memory is whole
    /// requires. The caller holds the in-use lock, before any chunk is taken.
    fn write_unwritten_entries(&self) {
        let layout = self.header.layout;
        let n = layout.chunks_in(self.mem.len());
        let mut wrote = false;
        for i in 0..n {
            // Relaxed: no chunk is taken or freed before the pool is marked in use, and this
            // thread holds the in-use lock; the fence below orders the stores for the media.
            if self.mem.load(layout.entry_off(i), Ordering::Relaxed) == 0 {
                let free = ChunkUse::Free.encode(i, &self.header.uuid);
                self.mem.store(layout.entry_off(i), free, Ordering::Relaxed);
                self.mem.flush(layout.entry_off(i));
                wrote = true;
            }
        }
        if wrote {
            // Fence: the entries are durable before the state line says the pool is in use.
            self.mem.fence();
        }
    }

    /// Once a recovery after another boot has made that boot's last run void (its rewrite
    /// committed): the mark "in use" names this boot from now on, so that a process that dies
    /// later in this boot is recovered whole, with everything it left in the memory. Until then
    /// it named the boot the pool was left in use in, so that a process that died during that
    /// recovery left it to be done again from the last power-safe point. Synced.
    pub fn claim_boot(&mut self) -> io::Result<()> {
        let boot = self.mem.boot();
        if self.mark_boot == boot {
            return Ok(());
        }
        self.mark_boot = boot;
        self.last_boot = boot;
        if *self.in_use.lock() {
            self.write_state(State::in_use(boot));
            self.mem.sync()?;
        }
        Ok(())
    }

    /// Makes everything durable, marks the pool cleanly closed, and releases it. A pool that was
    /// never marked in use is left as it was.
    pub fn close(self) -> io::Result<()> {
        if !*self.in_use.lock() {
            return Ok(());
        }
        self.mem.sync()?;
        // The clean mark is durable before the lock is released (and synced after everything).
        self.write_state(State::clean(self.mem.boot()));
        self.mem.sync()
    }

    /// Writes everything written so far to the storage (`msync` in page-cache mode). Pages
    /// written after it reach the storage in any order: it is not a power-safe point of a pool
    /// in use, only the last step of [`close`](Pool::close).
    pub fn sync(&self) -> io::Result<()> {
        self.mem.sync()
    }

    /// The pool's memory: the seam every access goes through.
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// The same pool seen through another seam over the same memory (for example
    /// [`Counting`](crate::mem::Counting) around the mapping), keeping the allocator's state: the
    /// pool is not attached again.
    pub fn map_mem<N: PMem>(self, f: impl FnOnce(M) -> N) -> Pool<N> {
        let Pool { mem, header, alloc, was_clean, last_boot, mark_boot, in_use, path, salt } = self;
        Pool { mem: f(mem), header, alloc, was_clean, last_boot, mark_boot, in_use, path, salt }
    }

    /// The durability in force.
    pub fn durability(&self) -> Durability {
        self.mem.durability()
    }

    /// The header: layout, uuid, creation time.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Whether the last user closed the pool cleanly (false for a new pool's first open after a
    /// crash, true after [`close`](Pool::close)).
    pub fn was_clean(&self) -> bool {
        self.was_clean
    }

    /// Whether the pool was last in use in this boot of the machine, as its state line says (and
    /// the memory knows its boot): then only its process can have died since, never the
    /// machine, and every store of its last run is in the memory.
    pub fn same_boot(&self) -> bool {
        let boot = self.mem.boot();
        boot != 0 && self.last_boot == boot
    }

    /// The file's path, for a pool opened from a file.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Bytes in use by the file now.
    pub fn len(&self) -> u64 {
        self.mem.len()
    }

    /// Whether the pool is empty (never: it always has a header).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Bytes the file may grow to.
    pub fn max_len(&self) -> u64 {
        self.header.layout.max_len()
    }

    /// An allocation handle for the calling thread.
    pub fn local(&self) -> Local<'_, M> {
        Local::new(self)
    }

    /// The root table entry in slot `slot`, if that slot is in use.
    pub fn root(&self, slot: usize) -> Option<RootEntry> {
        assert!(slot < ROOT_ENTRIES, "root slot {slot} out of range");
        let mut b = [0u8; ROOT_ENTRY_SIZE as usize];
        self.mem.read_bytes(ROOT_TABLE_OFF + slot as u64 * ROOT_ENTRY_SIZE, &mut b);
        RootEntry::decode(&b)
    }

    /// Writes `entry` into root slot `slot` (whatever it held) and persists it. Root entries are
    /// written by one thread at a time (the caller serialises).
    pub fn set_root(&self, slot: usize, entry: RootEntry) -> io::Result<()> {
        assert!(slot < ROOT_ENTRIES, "root slot {slot} out of range");
        assert!(entry.kind != 0, "root kind 0 means an empty slot");
        self.mark_in_use()?;
        let off = ROOT_TABLE_OFF + slot as u64 * ROOT_ENTRY_SIZE;
        self.mem.write_bytes(off, &entry.encode());
        self.mem.flush_range(off, ROOT_ENTRY_SIZE);
        // Fence: the entry is durable before the caller relies on it.
        self.mem.fence();
        Ok(())
    }
}
/// Stores one copy of the state line at `off`, its check word last, so that a crash in the middle
/// leaves a copy that fails it. The caller flushes and fences.
fn store_state_copy<M: PMem>(mem: &M, off: u64, words: [u64; 4]) {
    for (i, w) in words.into_iter().enumerate() {
        // Relaxed: the state line is written by one thread (under the `in_use` lock, or while
        // formatting, alone); the caller's fence orders it for the media, and the copy lies in
        // one line, whose stores reach the media in order.
        mem.store(off + i as u64 * WORD, w, Ordering::Relaxed);
    }
}

const _: () = assert!(
    ROOT_TABLE_OFF.is_multiple_of(CACHE_LINE)
        && STATE_COPIES[0].is_multiple_of(CACHE_LINE)
        && STATE_COPIES[1].is_multiple_of(CACHE_LINE)
        && STATE_COPIES[0] + CACHE_LINE <= STATE_COPIES[1]
        && STATE_COPIES[1] + CACHE_LINE <= ROOT_TABLE_OFF
        && header::STATE_COPY_SIZE <= CACHE_LINE
);
