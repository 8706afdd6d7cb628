//! [`MmapMem`]: a pool file mapped shared into a reserved virtual range.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::{CACHE_LINE, Durability, GrowError, PMem, WORD, check_word};

/// The instruction that writes a cache line back to memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FlushKind {
    /// `clwb`: writes back and may keep the line cached. Preferred.
    Clwb,
    /// `clflushopt`: writes back and evicts; weakly ordered, so cheap in batches.
    ClflushOpt,
    /// `clflush`: writes back and evicts; ordered with every other `clflush`.
    Clflush,
    /// No instruction (volatile mode, or a CPU without any of the above).
    None,
}

impl FlushKind {
    /// The best instruction this CPU offers: `clwb`, else `clflushopt`, else `clflush`.
    pub fn detect() -> FlushKind {
        Self::available().first().copied().unwrap_or(FlushKind::None)
    }

    /// Every flush instruction this CPU offers, best first.
    pub fn available() -> Vec<FlushKind> {
        let mut kinds = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::__cpuid_count;
            // CPUID leaf 7, sub-leaf 0, EBX: bit 24 is CLWB, bit 23 is CLFLUSHOPT (Intel SDM vol. 2A,
            // "CPUID"). Leaf 1, EDX bit 19 is CLFSH.
            let max_leaf = __cpuid_count(0, 0).eax;
            if max_leaf >= 7 {
                let ebx = __cpuid_count(7, 0).ebx;
                if ebx & (1 << 24) != 0 {
                    kinds.push(FlushKind::Clwb);
                }
                if ebx & (1 << 23) != 0 {
                    kinds.push(FlushKind::ClflushOpt);
                }
            }
            if __cpuid_count(1, 0).edx & (1 << 19) != 0 {
                kinds.push(FlushKind::Clflush);
            }
        }
        kinds
    }

    /// The instruction's mnemonic.
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::ClflushOpt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::None => "none",
        }
    }
}

/// How to map a pool file.
#[derive(Debug, Clone)]
pub struct MmapOptions {
    /// Bytes of address space to reserve: the most the mapping can grow to.
    pub max_len: u64,
    /// Skip flushes and fences ([`Durability::Volatile`]). For measuring, never for data.
    pub volatile: bool,
    /// Fail unless the file can be mapped with `MAP_SYNC` (persistent memory with DAX).
    pub require_dax: bool,
    /// Use this flush instruction instead of the best detected one (benchmarks compare them).
    /// Must be one of [`FlushKind::available`].
    pub flush: Option<FlushKind>,
    /// Map the file privately ([`Durability::Private`]): changes stay in this process's copy of
    /// the pages and never reach the file, which may be opened read-only.
    pub private: bool,
}

impl Default for MmapOptions {
    fn default() -> Self {
        MmapOptions { max_len: 64 << 30, volatile: false, require_dax: false, flush: None, private: false }
    }
}

/// A pool file mapped shared into a reserved range.
///
/// At open a range of `max_len` bytes of address space is reserved (`PROT_NONE`, no swap
/// reserved) and the file is mapped at its start with `MAP_FIXED`. Growing extends the file and
/// maps the new part right behind the old one, so nothing ever moves and offsets stay valid.
///
/// The mapping is first tried with `MAP_SHARED_VALIDATE | MAP_SYNC`, which the kernel grants only
/// for files on DAX-capable persistent memory: where it succeeds, flush plus fence is durable
/// across power loss ([`Durability::Dax`]); where it fails the file lives in the page cache
/// ([`Durability::PageCache`]) and [`PMem::sync`] issues `msync`, unless it is on tmpfs or ramfs
/// ([`Durability::Memory`]), where nothing survives power loss and `sync` does nothing.
///
/// This is one of the few modules with `unsafe` code: raw mapping calls, the conversion of a pool
/// offset into a reference to an atomic word, and the cache-line flush instructions.
#[derive(Debug)]
pub struct MmapMem {
    /// Start of the reservation. Bytes `[0, len)` are mapped read-write from the file.
    base: NonNull<u8>,
    /// Mapped bytes; only grows. Relaxed loads suffice for bounds checks: a thread that learns an
    /// offset beyond an old length learned it through a pool word published after the growth
    /// (Release/Acquire on that word), which orders the length too; a stale length can only make
    /// the check fail safe (panic), never admit an unmapped byte.
    len: AtomicU64,
    max_len: u64,
    flush: FlushKind,
    durability: Durability,
    /// Whether the file's pages are memory (tmpfs, ramfs or DAX): new file space is then faulted
    /// in writable at once ([`PMem::populate`]).
    in_memory: bool,
    file: File,
    /// Serialises growth: extend the file, then map the new part.
    grow_lock: Mutex<()>,
    /// Mapped privately: the file is never written, growth maps anonymous memory.
    private: bool,
}

// SAFETY: the mapping is shared memory accessed only through atomic operations and flush
// instructions, which any thread may issue; `base` is never handed out as a reference.
unsafe impl Send for MmapMem {}
// SAFETY: as for `Send`: every access through `&MmapMem` is an atomic word operation, a flush, or
// growth serialised by `grow_lock`.
unsafe impl Sync for MmapMem {}

impl MmapMem {
    /// Maps the first `file.metadata().len()` bytes of `file`, which must be a non-zero multiple of
    /// the page size, into a fresh reservation of `options.max_len` bytes. The caller holds
    /// whatever lock guards the file against other writers.
    pub fn map(file: File, options: &MmapOptions) -> io::Result<MmapMem> {
        let len = file.metadata()?.len();
        let page = page_size();
        let max_len = options.max_len.max(len).next_multiple_of(page);
        if len == 0 || len % page != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a mapped pool must be a non-zero multiple of {page} bytes, not {len}"),
            ));
        }
        let reserve_len = usize::try_from(max_len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "maximum pool size exceeds the address space"))?;
        // SAFETY: a fresh anonymous PROT_NONE mapping at an address the kernel chooses; it aliases
        // nothing. MAP_NORESERVE: address space only, no memory or swap committed.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve_len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>()).expect("mmap returned null");
        let mut mem = MmapMem {
            base,
            len: AtomicU64::new(0),
            max_len,
            flush: FlushKind::None,
            durability: Durability::PageCache,
            in_memory: false,
            file,
            grow_lock: Mutex::new(()),
            private: false,
        };
        // From here on, dropping `mem` releases the reservation.
        mem.private = options.private;
        let dax = !options.private && mem.probe_sync();
        if options.require_dax && !dax {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the pool file is not on persistent memory with DAX (MAP_SYNC was refused)",
            ));
        }
        // MAP_SYNC exactly when the mode is dax, as growth maps (a volatile pool needs none).
        mem.map_range(0, len, dax && !options.volatile)?;
        mem.len.store(len, Ordering::Relaxed);
        let memory_fs = in_memory_fs(&mem.file);
        mem.in_memory = dax || memory_fs;
        mem.durability = match (options.private, options.volatile, dax, memory_fs) {
            (true, ..) => Durability::Private,
            (false, true, ..) => Durability::Volatile,
            (false, false, true, _) => Durability::Dax,
            (false, false, false, true) => Durability::Memory,
            (false, false, false, false) => Durability::PageCache,
        };
        mem.flush = match (options.volatile || options.private, options.flush) {
            (true, _) => FlushKind::None,
            (false, Some(kind)) => {
                if kind != FlushKind::None && !FlushKind::available().contains(&kind) {
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!("this CPU has no {} instruction", kind.name()),
                    ));
                }
                kind
            }
            (false, None) => FlushKind::detect(),
        };
        Ok(mem)
    }

    /// Whether the kernel maps this file with `MAP_SYNC` (it does only for files on DAX). Probed
    /// with a mapping at an address of the kernel's choosing, never over the reservation: a
    /// refused `MAP_FIXED` request can unmap the range it was to replace before it fails.
    fn probe_sync(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            let page = page_size() as usize;
            // SAFETY: a fresh shared mapping of the file's first page at an address the kernel
            // chooses; it aliases nothing of ours and is unmapped right away, untouched.
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                    self.file.as_raw_fd(),
                    0,
                )
            };
            if addr == libc::MAP_FAILED {
                return false;
            }
            // SAFETY: `addr` is the mapping just made, of `page` bytes, referenced by nothing.
            unsafe { libc::munmap(addr, page) };
            true
        }
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// Maps file bytes `[from, to)` at the same offsets of the reservation, with `MAP_SYNC` if
    /// `sync`. On failure the range is reserved again, so that no other mapping can take it.
    fn map_range(&self, from: u64, to: u64, sync: bool) -> io::Result<()> {
        debug_assert!(from < to && to <= self.max_len);
        let length = (to - from) as usize;
        let offset = libc::off_t::try_from(from).map_err(|_| io::Error::other("offset too large"))?;
        #[cfg(target_os = "linux")]
        let flags = if self.private {
            libc::MAP_PRIVATE
        } else if sync {
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC
        } else {
            libc::MAP_SHARED
        };
        #[cfg(not(target_os = "linux"))]
        let flags = {
            let _ = sync;
            if self.private { libc::MAP_PRIVATE } else { libc::MAP_SHARED }
        };
        // SAFETY: the target range lies inside our own reservation (`to <= max_len`) and is still
        // PROT_NONE; MAP_FIXED replaces it, which can invalidate no reference because no
        // reference into `[from, to)` exists yet: `len` is published only after this returns.
        let addr = unsafe {
            libc::mmap(
                self.base.as_ptr().add(from as usize).cast(),
                length,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_FIXED,
                self.file.as_raw_fd(),
                offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(self.restore_reservation(from, length as u64));
        }
        Ok(())
    }

    /// Puts the reservation back over bytes `[from, from + length)`, which a failed `MAP_FIXED`
    /// request may have unmapped before failing, and returns that request's error. Panics if it
    /// cannot: a hole in the reservation could be given to another mapping, which a later growth
    /// would map over.
    fn restore_reservation(&self, from: u64, length: u64) -> io::Error {
        let err = io::Error::last_os_error();
        // SAFETY: the range lies inside our own reservation, beyond `len`, so nothing references
        // it; MAP_FIXED over it with a fresh PROT_NONE anonymous mapping aliases nothing.
        let restored = unsafe {
            libc::mmap(
                self.base.as_ptr().add(from as usize).cast(),
                length as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        assert!(restored != libc::MAP_FAILED, "cannot restore the pool's address reservation: {err}");
        err
    }

    /// Maps fresh zeroed private memory at bytes `[from, to)` of the reservation: the growth of a
    /// private mapping, which never extends its file.
    fn map_anonymous(&self, from: u64, to: u64) -> io::Result<()> {
        debug_assert!(self.private && from < to && to <= self.max_len);
        // SAFETY: the target range lies inside our own reservation and is still PROT_NONE;
        // MAP_FIXED replaces it, which invalidates no reference: `len` is published only after
        // this returns. A failure may have unmapped the range: it is restored below.
        let addr = unsafe {
            libc::mmap(
                self.base.as_ptr().add(from as usize).cast(),
                (to - from) as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(self.restore_reservation(from, to - from));
        }
        Ok(())
    }

    /// The flush instruction in use.
    pub fn flush_kind(&self) -> FlushKind {
        self.flush
    }

    /// The mapped file.
    pub fn file(&self) -> &File {
        &self.file
    }

    #[inline]
    fn word(&self, off: u64) -> &AtomicU64 {
        check_word(off, self.len.load(Ordering::Relaxed));
        // SAFETY: `check_word` proved `off` 8-aligned with `off + 8 <= len`, and `[0, len)` stays
        // mapped read-write until `self` drops (growth only maps more behind it), so the pointer
        // is valid and aligned for `AtomicU64`, which has the layout of `u64`. All access to
        // mapped bytes goes through atomics, so no non-atomic access can race with this one.
        unsafe { &*self.base.as_ptr().add(off as usize).cast::<AtomicU64>() }
    }

    /// The `n` words from `off` on, bounds checked once for all of them.
    #[inline]
    fn words(&self, off: u64, n: usize) -> &[AtomicU64] {
        // Relaxed: as for `len` (a stale length only makes the check fail safe).
        let len = self.len.load(Ordering::Relaxed);
        let bytes = (n as u64).checked_mul(WORD);
        assert!(
            off.is_multiple_of(WORD) && bytes.and_then(|b| b.checked_add(off)).is_some_and(|end| end <= len),
            "pool access of {n} words at offset {off:#x} is misaligned or beyond the pool's {len} bytes"
        );
        // SAFETY: as in `word`, for each of the `n` words: `off` is 8-aligned and `off + 8n <=
        // len` (checked above, without overflow), and `[0, len)` stays mapped until `self` drops,
        // so the `n` consecutive `AtomicU64`s are valid and aligned; all access to mapped bytes
        // goes through atomics.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off as usize).cast::<AtomicU64>(), n) }
    }
}

impl PMem for MmapMem {
    #[inline]
    fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    #[inline]
    fn load(&self, off: u64, order: Ordering) -> u64 {
        self.word(off).load(order)
    }

    #[inline]
    fn store(&self, off: u64, val: u64, order: Ordering) {
        self.word(off).store(val, order)
    }

    #[inline]
    fn compare_exchange(
        &self,
        off: u64,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.word(off).compare_exchange(current, new, success, failure)
    }

    #[inline]
    fn fetch_add(&self, off: u64, val: u64, order: Ordering) -> u64 {
        self.word(off).fetch_add(val, order)
    }

    /// One bounds check for the whole range, not one per word: a byte value is read a word at a
    /// time, as the default does, without the per-word checks and calls, four words a step (one
    /// loop test per 32 bytes: 57 ns for 1 160 bytes against 125 a word a step, in a loop of
    /// reads of one buffer; the compiler does as well for `write_bytes` unaided).
    fn read_bytes(&self, off: u64, buf: &mut [u8]) {
        if !off.is_multiple_of(WORD) {
            return super::read_bytes_by_words(self, off, buf);
        }
        let words = self.words(off, buf.len().div_ceil(WORD as usize));
        let n = buf.len() / WORD as usize;
        let (whole, tail) = buf.split_at_mut(n * WORD as usize);
        let (body, last) = words.split_at(n);
        let mut out = whole.chunks_exact_mut(4 * WORD as usize);
        let mut src = body.chunks_exact(4);
        // Relaxed (all): as the default's loads; the caller knows no thread writes the range.
        for (o, w) in (&mut out).zip(&mut src) {
            let v = [
                w[0].load(Ordering::Relaxed),
                w[1].load(Ordering::Relaxed),
                w[2].load(Ordering::Relaxed),
                w[3].load(Ordering::Relaxed),
            ];
            for (o, v) in o.chunks_exact_mut(WORD as usize).zip(v) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        for (o, w) in out.into_remainder().chunks_exact_mut(WORD as usize).zip(src.remainder()) {
            o.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        if let Some(w) = last.first() {
            let n = tail.len();
            tail.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes()[..n]);
        }
    }

    /// As `read_bytes`: one bounds check for the whole range.
    fn write_bytes(&self, off: u64, data: &[u8]) {
        if !off.is_multiple_of(WORD) {
            return super::write_bytes_by_words(self, off, data);
        }
        let words = self.words(off, data.len().div_ceil(WORD as usize));
        let chunks = data.chunks_exact(WORD as usize);
        let tail = chunks.remainder();
        // Relaxed: as the default's stores; the caller owns the range, and publishes it later
        // with an ordering of its own.
        for (chunk, word) in chunks.zip(words) {
            word.store(u64::from_le_bytes(chunk.try_into().expect("8 bytes")), Ordering::Relaxed);
        }
        if let Some(last) = words.last().filter(|_| !tail.is_empty()) {
            // The last, partial word keeps its other bytes.
            let mut bytes = last.load(Ordering::Relaxed).to_le_bytes();
            bytes[..tail.len()].copy_from_slice(tail);
            last.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
        }
    }

    #[inline]
    fn prefetch(&self, off: u64) {
        // A hint: an offset outside the mapping is ignored, not refused; any byte of a word will do.
        let off = off & !(WORD - 1);
        if off.checked_add(WORD).is_none_or(|end| end > self.len()) {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let word: *const AtomicU64 = self.word(off);
            // SAFETY: `word` checked `off` against the mapped length; a prefetch neither reads
            // nor writes the bytes architecturally and never faults. SSE is baseline on x86_64.
            unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(word.cast()) }
        }
    }

    #[inline]
    fn flush(&self, off: u64) {
        let len = self.len.load(Ordering::Relaxed);
        assert!(off < len, "flush at offset {off:#x} beyond the pool's {len} bytes");
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `off < len`, so the address is inside the mapped range; each instruction
            // only writes the line back and neither reads nor writes its bytes architecturally.
            // The kind was checked against CPUID when the mapping was made.
            let line = unsafe { self.base.as_ptr().add(off as usize) };
            match self.flush {
                // SAFETY: see above; clwb is present (CPUID leaf 7 EBX bit 24).
                FlushKind::Clwb => unsafe {
                    core::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
                },
                // SAFETY: see above; clflushopt is present (CPUID leaf 7 EBX bit 23).
                FlushKind::ClflushOpt => unsafe {
                    core::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
                },
                // SAFETY: see above; clflush is present (CPUID leaf 1 EDX bit 19).
                FlushKind::Clflush => unsafe {
                    core::arch::asm!("clflush [{0}]", in(reg) line, options(nostack, preserves_flags))
                },
                FlushKind::None => {}
            }
        }
    }

    #[inline]
    fn fence(&self) {
        if self.durability == Durability::Volatile {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: sfence has no operands and only orders this thread's stores and flushes.
        unsafe {
            core::arch::asm!("sfence", options(nostack, preserves_flags))
        };
        #[cfg(not(target_arch = "x86_64"))]
        // SeqCst: the strongest ordering the language offers, the portable stand-in for a
        // store fence where no flush instruction exists (durability then rests on msync).
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    fn grow(&self, new_len: u64) -> Result<(), GrowError> {
        let _guard = self.grow_lock.lock();
        let old_len = self.len.load(Ordering::Relaxed);
        if new_len <= old_len {
            return Ok(());
        }
        if new_len > self.max_len {
            return Err(GrowError::AboveMaximum { requested: new_len, max: self.max_len });
        }
        let page = page_size();
        if !new_len.is_multiple_of(page) || !new_len.is_multiple_of(CACHE_LINE) {
            return Err(GrowError::Unaligned { requested: new_len, granule: page });
        }
        if self.private {
            self.map_anonymous(old_len, new_len)?;
            // Release: as below.
            self.len.store(new_len, Ordering::Release);
            return Ok(());
        }
        reserve_space(&self.file, old_len, new_len)?;
        if let Err(e) = self.map_range(old_len, new_len, self.durability == Durability::Dax) {
            // Leave the file as it was; the extension was never mapped or used.
            let _ = self.file.set_len(old_len);
            return Err(e.into());
        }
        // Release is not needed for correctness of the mapping itself (mmap is a syscall, a full
        // barrier), only for documentation: later loads of `len` see the new value.
        self.len.store(new_len, Ordering::Release);
        Ok(())
    }

    /// Faults mapped bytes `[from, to)` in writable now, if the file's pages are memory (tmpfs or
    /// DAX), so that the first store to each page does not take a page fault of its own: one
    /// call for the range costs a fraction of a fault per page. The pool calls it for new file
    /// space (at creation, and after growth once its locks are released), never for an existing
    /// file's, which it may never touch.
    /// A file system's file is left alone: its pages would all be dirtied and written back.
    /// Best effort: a kernel without `MADV_POPULATE_WRITE` (before 5.14) faults lazily.
    fn populate(&self, from: u64, to: u64) {
        #[cfg(target_os = "linux")]
        {
            // Acquire: pairs with growth's Release, so `[0, len)` is mapped.
            let len = self.len.load(Ordering::Acquire);
            let to = to.min(len);
            if !self.in_memory || from >= to {
                return;
            }
            // SAFETY: `[from, to)` lies inside the mapped range `[0, len)`; MADV_POPULATE_WRITE
            // only installs page table entries as a write fault would, without storing to the
            // memory, so no byte of it changes and no reference is affected.
            unsafe {
                libc::madvise(
                    self.base.as_ptr().add(from as usize).cast(),
                    (to - from) as usize,
                    libc::MADV_POPULATE_WRITE,
                )
            };
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (from, to);
    }

    fn max_len(&self) -> u64 {
        self.max_len
    }

    fn durability(&self) -> Durability {
        self.durability
    }

    fn boot(&self) -> u128 {
        machine_boot()
    }

    fn sync(&self) -> io::Result<()> {
        if self.durability != Durability::PageCache {
            return Ok(());
        }
        // Acquire: pairs with growth's Release, so the whole mapped length is synced.
        let len = self.len.load(Ordering::Acquire) as usize;
        // SAFETY: `[base, base + len)` is mapped from the file; msync only writes dirty pages
        // back and changes no memory.
        let rc = unsafe { libc::msync(self.base.as_ptr().cast(), len, libc::MS_SYNC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for MmapMem {
    fn drop(&mut self) {
        // SAFETY: the reservation `[base, base + max_len)` was made by `map` and is released once,
        // here; `&mut self` proves that no reference into it (all of which borrow `self`) lives.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.max_len as usize);
        }
    }
}

/// Whether `file` lives on a file system in memory: tmpfs (`/dev/shm`, the usual stand-in for
/// persistent memory) or ramfs. (A file of an overlay whose upper layer is in memory is not
/// recognised: it is taken for a file on a disk, and synced for nothing.)
fn in_memory_fs(file: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        // ramfs's magic number (linux/magic.h), which the libc crate does not define.
        const RAMFS_MAGIC: i64 = 0x8584_58f6;
        // SAFETY: `statfs` is a struct of integers, for which all zeroes is a valid value.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: fstatfs writes only into the struct we pass, about a descriptor we own.
        let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
        // Both sides widened: the field's and the constant's C types differ between targets
        // (both i64 on x86-64 glibc, not on musl or s390x).
        #[allow(clippy::unnecessary_cast)]
        let memory = [libc::TMPFS_MAGIC as i64, RAMFS_MAGIC].contains(&(st.f_type as i64));
        rc == 0 && memory
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        false
    }
}

/// The system page size.
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as u64 } else { 4096 }
}

/// Extends `file` from `old_len` to `new_len` bytes with its blocks reserved, so that a full file
/// system is an error now (ENOSPC) rather than a SIGBUS at the first store to a page of a hole.
/// A file system that cannot reserve (no `fallocate`) gets the new bytes written as zeroes, which
/// takes their blocks just as well. On failure the file is left at `old_len`.
pub(crate) fn reserve_space(file: &File, old_len: u64, new_len: u64) -> io::Result<()> {
    reserve_space_with(file, old_len, new_len, fallocate)
}

/// [`reserve_space`], with `alloc` in place of `posix_fallocate` (an errno, 0 for success).
fn reserve_space_with(
    file: &File,
    old_len: u64,
    new_len: u64,
    alloc: impl FnOnce(&File, u64, u64) -> i32,
) -> io::Result<()> {
    let done = match alloc(file, old_len, new_len - old_len) {
        0 => return Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => write_zeroes(file, old_len, new_len),
        errno => Err(io::Error::from_raw_os_error(errno)),
    };
    if done.is_err() {
        // Blocks reserved before the failure are given back with the length.
        let _ = file.set_len(old_len);
    }
    done
}

/// Makes sure every byte of the first `len` bytes of `file` has its blocks, changing none of
/// them: `posix_fallocate` over them (which leaves allocated blocks as they are), or, where it
/// cannot, zeroes written into each hole (a hole reads as zeroes already).
pub(crate) fn reserve_existing(file: &File, len: u64) -> io::Result<()> {
    reserve_existing_with(file, len, fallocate)
}

/// [`reserve_existing`], with `alloc` in place of `posix_fallocate`.
fn reserve_existing_with(file: &File, len: u64, alloc: impl FnOnce(&File, u64, u64) -> i32) -> io::Result<()> {
    match alloc(file, 0, len) {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => {
            let mut at = 0;
            while let Some((hole, end)) = next_hole(file, at, len)? {
                write_zeroes(file, hole, end)?;
                at = end;
            }
            Ok(())
        }
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// `posix_fallocate(file, off, len)`: 0 or an errno.
fn fallocate(file: &File, off: u64, len: u64) -> i32 {
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(off), libc::off_t::try_from(len)) else {
        return libc::EFBIG;
    };
    if len == 0 {
        return 0;
    }
    // SAFETY: posix_fallocate only changes the file behind the descriptor, which `file` keeps
    // open for the call; no memory is passed.
    unsafe { libc::posix_fallocate(file.as_raw_fd(), off, len) }
}

/// The first hole of `file` at or after `from` and before `len`, as `[start, end)`; `None` if
/// there is none (or the file system does not say: then it reports no holes).
fn next_hole(file: &File, from: u64, len: u64) -> io::Result<Option<(u64, u64)>> {
    let seek = |off: u64, whence: i32| -> io::Result<Option<u64>> {
        let Ok(off) = libc::off_t::try_from(off) else { return Ok(None) };
        // SAFETY: lseek only moves the descriptor's offset; every read and write of the file
        // here is positioned (pread, pwrite), so nothing uses the offset.
        let r = unsafe { libc::lseek(file.as_raw_fd(), off, whence) };
        if r >= 0 {
            return Ok(Some(r as u64));
        }
        match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
            e => Err(e),
        }
    };
    if from >= len {
        return Ok(None);
    }
    let Some(hole) = seek(from, libc::SEEK_HOLE)?.filter(|&h| h < len) else { return Ok(None) };
    let end = seek(hole, libc::SEEK_DATA)?.unwrap_or(len).min(len);
    Ok(Some((hole, end)))
}

/// Writes zeroes over `[from, to)` of `file`.
fn write_zeroes(file: &File, from: u64, to: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let zeroes = vec![0u8; 64 << 10];
    let mut at = from;
    while at < to {
        let n = (to - at).min(zeroes.len() as u64) as usize;
        file.write_all_at(&zeroes[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// The id of the running boot of the machine (Linux's `/proc/sys/kernel/random/boot_id`), or 0
/// where it is unknown.
pub(crate) fn machine_boot() -> u128 {
    static BOOT: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    *BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .and_then(|s| u128::from_str_radix(&s.trim().replace('-', ""), 16).ok())
            .unwrap_or(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::SimMem;

    /// The bytes of blocks a file has.
    fn allocated(file: &File) -> u64 {
        use std::os::unix::fs::MetadataExt;
        file.metadata().unwrap().blocks() * 512
    }

    /// Where `posix_fallocate` cannot reserve, growth writes zeroes: the new bytes have their
    /// blocks (a sparse extension would leave a full file system to a SIGBUS at the first store).
    #[test]
    fn growth_without_fallocate_takes_its_blocks_all_the_same() {
        let file = tempfile::tempfile().unwrap();
        let page = page_size();
        for errno in [libc::EOPNOTSUPP, libc::EINVAL] {
            file.set_len(0).unwrap();
            reserve_space_with(&file, 0, 64 * page, |_, _, _| errno).unwrap();
            assert_eq!(file.metadata().unwrap().len(), 64 * page);
            assert!(allocated(&file) >= 64 * page, "errno {errno}: {} bytes of blocks", allocated(&file));
        }
        // Any other failure leaves the file as it was.
        file.set_len(page).unwrap();
        let err = reserve_space_with(&file, page, 4 * page, |_, _, _| libc::ENOSPC).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(file.metadata().unwrap().len(), page);
    }

    /// A file with holes (a sparse copy) gets blocks for them, its bytes unchanged, with
    /// `posix_fallocate` and without.
    #[test]
    fn the_holes_of_an_existing_file_are_filled_and_its_bytes_kept() {
        use std::os::unix::fs::FileExt;
        let page = page_size();
        let len = 64 * page;
        for with_fallocate in [true, false] {
            let file = tempfile::tempfile().unwrap();
            file.set_len(len).unwrap();
            // Data in every fourth page; the rest is holes.
            for p in (0..64u64).step_by(4) {
                file.write_all_at(&vec![p as u8 + 1; page as usize], p * page).unwrap();
            }
            let mut before = vec![0u8; len as usize];
            file.read_exact_at(&mut before, 0).unwrap();
            assert!(allocated(&file) < len, "the file has holes to begin with");
            if with_fallocate {
                reserve_existing_with(&file, len, fallocate).unwrap();
            } else {
                reserve_existing_with(&file, len, |_, _, _| libc::EOPNOTSUPP).unwrap();
            }
            assert!(allocated(&file) >= len, "fallocate {with_fallocate}: {} bytes of blocks", allocated(&file));
            assert_eq!(next_hole(&file, 0, len).unwrap(), None, "fallocate {with_fallocate}");
            let mut after = vec![0u8; len as usize];
            file.read_exact_at(&mut after, 0).unwrap();
            assert!(after == before, "fallocate {with_fallocate}: bytes changed");
        }
    }

    /// The bulk byte copies (one bounds check per call) agree with the word-at-a-time default
    /// (on a `SimMem`) at every offset and length around a few words, keeping the bytes around
    /// the range, and refuse a range that ends past the mapping.
    #[test]
    fn byte_copies_agree_with_the_word_at_a_time_default() {
        let page = page_size();
        let file = tempfile::tempfile().expect("a temporary file");
        file.set_len(page).expect("room");
        let mmap = MmapMem::map(file, &MmapOptions { max_len: page, volatile: true, ..MmapOptions::default() })
            .expect("mapped");
        let sim = SimMem::new(page, page);
        let fill: Vec<u8> = (0..page).map(|i| (i * 7 + 3) as u8).collect();
        for off in 0..24u64 {
            // Up to two steps of four words and a remainder of whole words and bytes.
            for len in 0..80usize {
                mmap.write_bytes(0, &fill);
                sim.write_bytes(0, &fill);
                let data: Vec<u8> = (0..len).map(|i| 0xA0 ^ i as u8).collect();
                mmap.write_bytes(off, &data);
                sim.write_bytes(off, &data);
                let (mut a, mut b) = (vec![0u8; 120], vec![0u8; 120]);
                mmap.read_bytes(0, &mut a);
                sim.read_bytes(0, &mut b);
                assert_eq!(a, b, "after writing {len} bytes at {off}");
                let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
                mmap.read_bytes(off, &mut a);
                sim.read_bytes(off, &mut b);
                assert_eq!((&a, &b), (&data, &data), "reading {len} bytes at {off}");
            }
        }
        let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mmap.read_bytes(page - 8, &mut [0u8; 9])));
        assert!(past.is_err(), "a read past the mapping is refused");
        let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mmap.write_bytes(page - 16, &[0u8; 17])));
        assert!(past.is_err(), "a write past the mapping is refused");
    }
}
