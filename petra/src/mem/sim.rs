//! [`SimMem`]: the crash simulator.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::{Mutex, RwLock};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{CACHE_LINE, Durability, GrowError, PAGE, PMem, WORD, check_word};

const PAGE_WORDS: usize = (PAGE / WORD) as usize;
const PAGE_BYTES: u64 = PAGE;
const LINE_WORDS: u64 = CACHE_LINE / WORD;

type Page = Arc<[u64; PAGE_WORDS]>;

/// An image of the pool's words, paged and copy-on-write.
#[derive(Clone)]
struct PagedImage {
    pages: Vec<Page>,
}

impl PagedImage {
    fn from_words(words: &[u64]) -> PagedImage {
        let pages = words
            .chunks(PAGE_WORDS)
            .map(|c| {
                let mut page = [0u64; PAGE_WORDS];
                page[..c.len()].copy_from_slice(c);
                Arc::new(page)
            })
            .collect();
        PagedImage { pages }
    }

    /// The first `len` bytes as words.
    fn to_words(&self, len: u64) -> Vec<u64> {
        let mut words: Vec<u64> = self.pages.iter().flat_map(|p| p.iter().copied()).collect();
        words.truncate((len / WORD) as usize);
        words
    }

    fn set(&mut self, word: u64, val: u64) {
        Arc::make_mut(&mut self.pages[word as usize / PAGE_WORDS])[word as usize % PAGE_WORDS] = val;
    }

    /// Page `page` takes the content of `words` (the working image) there.
    fn copy_page(&mut self, page: u64, words: &[u64]) {
        let from = page as usize * PAGE_WORDS;
        let to = (from + PAGE_WORDS).min(words.len());
        Arc::make_mut(&mut self.pages[page as usize])[..to - from].copy_from_slice(&words[from..to]);
    }

    fn grow(&mut self, len: u64) {
        let zero: Page = Arc::new([0; PAGE_WORDS]);
        self.pages.resize(len.div_ceil(PAGE_BYTES) as usize, zero);
    }
}

/// What survives a power loss, as a [`SimMem`] models it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MediaModel {
    /// Persistent memory mapped with DAX: a line flushed and then fenced by the flushing thread
    /// is durable, and any line may reach the media earlier, its stores in order.
    /// [`PMem::sync`] adds nothing.
    #[default]
    PersistentMemory,
    /// A file in the page cache: flush and fence make nothing durable, [`PMem::sync`] makes
    /// every store durable, and between syncs the kernel may write any [`PAGE`] back at any
    /// moment, with its content of that moment, pages in any order.
    PageCache,
}

/// One store of the page cache's log: its event number, its word (index in the pool) and value.
#[derive(Debug, Clone, Copy)]
struct PageStore {
    event: u64,
    word: u64,
    val: u64,
}

/// The stores made since a sync, oldest first. It is only appended to until the next sync,
/// which starts a new one, so the crash states taken meanwhile share it, each reading the prefix
/// that was there when it was taken.
type Window = Arc<RwLock<Vec<PageStore>>>;

/// One store waiting in a line's log: the word's index within the line and its new value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PendingStore {
    word_in_line: u8,
    val: u64,
}

/// The not-yet-persisted stores of one line, oldest first.
#[derive(Debug, Default)]
struct LineLog {
    /// Sequence number (count of stores ever made to this line) of `stores[0]`.
    first_seq: u64,
    stores: Vec<PendingStore>,
}

/// Where a crash state was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CrashPoint {
    /// Number of events (stores, flushes, fences) that had completed: the crash happens just
    /// before event number `event` (counting from 0).
    pub event: u64,
    /// The kind of the event the crash came before.
    pub kind: EventKind,
}

/// A memory event that can be a crash point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A store, successful CAS or fetch-add.
    Store,
    /// A cache-line flush.
    Flush,
    /// A fence.
    Fence,
    /// A sync ([`PMem::sync`]).
    Sync,
    /// Taken on demand by [`SimMem::crash_now`].
    Now,
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "before event {} ({:?})", self.event, self.kind)
    }
}

/// Which moments of a run become crash states.
#[derive(Debug, Clone)]
pub struct CrashPlan {
    /// Capture before every fence.
    pub every_fence: bool,
    /// Capture before every flush.
    pub every_flush: bool,
    /// Capture before every sync: under the page-cache model, the moments with the most stores
    /// that may or may not be on the disk.
    pub every_sync: bool,
    /// Capture before each store with this probability.
    pub store_probability: f64,
    /// Seed of the store sampling.
    pub seed: u64,
}

impl CrashPlan {
    /// No capture at all.
    pub fn none() -> CrashPlan {
        CrashPlan { every_fence: false, every_flush: false, every_sync: false, store_probability: 0.0, seed: 0 }
    }

    /// Every fence, every flush, and a share of stores chosen with `seed`.
    pub fn all(store_probability: f64, seed: u64) -> CrashPlan {
        CrashPlan { every_fence: true, every_flush: true, every_sync: false, store_probability, seed }
    }

    /// The same plan, capturing before every sync too.
    pub fn with_syncs(self) -> CrashPlan {
        CrashPlan { every_sync: true, ..self }
    }
}

struct SimState {
    model: MediaModel,
    working: Vec<u64>,
    /// What is durable: under persistent memory every store flushed and fenced, in the page
    /// cache every store up to the last sync.
    persisted: PagedImage,
    /// Persistent memory: every line ever stored to, with its stores not yet persisted, by line
    /// number. Ordered, so that crash images are numbered the same way on every run.
    lines: BTreeMap<u64, LineLog>,
    /// Persistent memory, per thread: line number -> sequence number up to which that thread
    /// has flushed it.
    flush_marks: BTreeMap<u32, BTreeMap<u64, u64>>,
    /// Page cache: the stores since the last sync.
    window: Window,
    /// Page cache: the event number of the first event since the last sync (or since the
    /// memory was made or changed model).
    window_start: u64,
    /// Page cache: the pages stored to since the last sync, each with its count of stores in
    /// `window`. Ordered, so that crash images are numbered the same way on every run.
    dirty: BTreeMap<u64, u32>,
    /// The event number of the last sync.
    last_sync: Option<u64>,
    /// Completed events.
    events: u64,
    plan: CrashPlan,
    rng: ChaCha8Rng,
    captured: Vec<CrashState>,
}

impl SimState {
    fn maybe_capture(&mut self, kind: EventKind) {
        let take = match kind {
            EventKind::Fence => self.plan.every_fence,
            EventKind::Flush => self.plan.every_flush,
            EventKind::Sync => self.plan.every_sync,
            EventKind::Store => {
                self.plan.store_probability > 0.0 && self.rng.random_bool(self.plan.store_probability.min(1.0))
            }
            EventKind::Now => true,
        };
        if take {
            let state = self.crash_state(kind);
            self.captured.push(state);
        }
    }

    fn crash_state(&self, kind: EventKind) -> CrashState {
        let pending = match self.model {
            MediaModel::PersistentMemory => Pending::Lines(
                self.lines
                    .iter()
                    .filter(|(_, log)| !log.stores.is_empty())
                    .map(|(&line, log)| (line, log.stores.clone()))
                    .collect(),
            ),
            MediaModel::PageCache => Pending::Pages {
                window: Arc::clone(&self.window),
                upto: self.window.read().len(),
                from: self.window_start,
                pages: self.dirty.iter().map(|(&page, &stores)| (page, stores)).collect(),
            },
        };
        CrashState {
            point: CrashPoint { event: self.events, kind },
            last_sync: self.last_sync,
            persisted: self.persisted.clone(),
            len: self.working.len() as u64 * WORD,
            pending,
        }
    }

    fn store(&mut self, off: u64, val: u64) {
        self.maybe_capture(EventKind::Store);
        let word = off / WORD;
        self.working[word as usize] = val;
        match self.model {
            MediaModel::PersistentMemory => {
                let line = off / CACHE_LINE;
                let log = self.lines.entry(line).or_default();
                log.stores.push(PendingStore { word_in_line: (word % LINE_WORDS) as u8, val });
            }
            MediaModel::PageCache => {
                self.window.write().push(PageStore { event: self.events, word, val });
                *self.dirty.entry(word / PAGE_WORDS as u64).or_default() += 1;
            }
        }
        self.events += 1;
    }

    fn flush(&mut self, off: u64, thread: u32) {
        self.maybe_capture(EventKind::Flush);
        let line = off / CACHE_LINE;
        // In the page cache a flush writes nothing back (and `lines` stays empty).
        if let Some(log) = self.lines.get(&line) {
            let upto = log.first_seq + log.stores.len() as u64;
            self.flush_marks.entry(thread).or_default().insert(line, upto);
        }
        self.events += 1;
    }

    fn fence(&mut self, thread: u32) {
        self.maybe_capture(EventKind::Fence);
        if let Some(marks) = self.flush_marks.remove(&thread) {
            for (line, upto) in marks {
                let Some(log) = self.lines.get_mut(&line) else { continue };
                if upto <= log.first_seq {
                    continue; // already persisted by another thread's fence
                }
                let n = (upto - log.first_seq) as usize;
                for st in log.stores.drain(..n) {
                    self.persisted.set(line * LINE_WORDS + st.word_in_line as u64, st.val);
                }
                // The entry stays even when empty: its sequence numbers must keep counting, or a
                // stale mark of another thread would cover stores it never flushed.
                log.first_seq = upto;
            }
        }
        self.events += 1;
    }

    fn sync(&mut self) {
        self.maybe_capture(EventKind::Sync);
        if self.model == MediaModel::PageCache {
            self.write_back();
        }
        self.last_sync = Some(self.events);
        self.events += 1;
        self.window_start = self.events;
    }

    /// Page cache: every page stored to since the last sync reaches the disk with its content
    /// of now, and a new window of stores begins (crash states taken before keep the old one).
    fn write_back(&mut self) {
        for &page in self.dirty.keys() {
            self.persisted.copy_page(page, &self.working);
        }
        self.dirty.clear();
        self.window = Window::default();
    }

    /// Everything stored so far becomes durable, and `model` holds from now on.
    fn switch_model(&mut self, model: MediaModel) {
        self.persisted = PagedImage::from_words(&self.working);
        // Both go together: no flush mark is left to name a line's sequence numbers.
        self.lines.clear();
        self.flush_marks.clear();
        self.dirty.clear();
        self.window = Window::default();
        self.window_start = self.events;
        self.model = model;
    }
}

/// The crash simulator.
///
/// It keeps two images of the pool: the *working* image that loads see, and the *persisted* image
/// that would survive a crash now. Every store (including a successful CAS or fetch-add) is
/// appended to the log of its 64-byte line, tagged with its thread. A flush by thread T marks the
/// stores of that line so far as flushed by T; a fence by T moves every line T has flushed into
/// the persisted image, up to T's mark. Nothing else ever becomes persisted on its own.
///
/// A crash at a given moment may leave any line in any state between the persisted one and the
/// working one, as long as the line's stores arrived in order: hardware evicts lines whenever it
/// likes, but the stores to one line reach the media in program order. So a [`CrashState`] is the
/// persisted image plus, for every line, the list of its not-yet-persisted stores, and a
/// [`CrashImage`] picks a prefix of each list. [`CrashState::images`] enumerates every combination
/// when their number is at most a bound, and samples them with a seeded generator otherwise.
///
/// Crash states are captured at the points a [`CrashPlan`] selects: before every fence, before
/// every flush, and before a random share of stores. The persisted image is paged and shared
/// copy-on-write between captures, so capturing costs one pointer copy per 4 KiB page.
///
/// That is the persistent-memory model ([`MediaModel::PersistentMemory`], the default). In the
/// page-cache model ([`MediaModel::PageCache`], see [`with_model`](SimMem::with_model)) the
/// persisted image is the content at the last [`sync`](PMem::sync), which makes every store
/// durable; flushes and fences make nothing durable. Every store since the last sync is logged
/// with its event number, and the pages (4 KiB, [`PAGE`]) it dirtied are counted; a sync writes
/// them back and starts a new log (crash states taken before keep theirs, which is never changed
/// again). Between syncs the kernel may write any page back at any moment, with its content of
/// that moment: so a crash image gives each dirty page its content at a moment of its own between
/// the last sync and the crash, that is the page's content at the sync plus a prefix of its
/// logged stores, pages independently of each other. Sampled images draw that moment uniformly
/// from the events of the window, per page.
///
/// Crash images, under either model, restart as a new boot of the machine
/// ([`boot`](PMem::boot)): a power loss.
///
/// Every operation takes one lock, so accesses are sequentially consistent; this is slower than
/// real memory and stronger than x86-TSO. It is a stand-in for persistence, not for weak memory
/// (loom covers that).
pub struct SimMem {
    state: Mutex<SimState>,
    max_len: u64,
    /// The simulated machine boot: each new memory, crash image and restart from bytes is a boot
    /// of its own; the same memory reopened after its users were dropped (a process death) is
    /// the same boot.
    boot: u128,
}

impl fmt::Debug for SimMem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state.lock();
        f.debug_struct("SimMem")
            .field("model", &st.model)
            .field("len", &(st.working.len() as u64 * WORD))
            .field("events", &st.events)
            .field("unpersisted_lines", &st.lines.len())
            .field("dirty_pages", &st.dirty.len())
            .field("captured", &st.captured.len())
            .finish()
    }
}

/// A boot id no other simulated memory of this process has.
fn new_boot() -> u128 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    // Relaxed: only uniqueness matters. A process id in the high bits keeps ids of two test
    // processes apart too.
    (std::process::id() as u128) << 64 | NEXT.fetch_add(1, Ordering::Relaxed) as u128
}

thread_local! {
    static THREAD_ID: u32 = {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        // Relaxed: only uniqueness matters, which the atomic read-modify-write gives.
        NEXT.fetch_add(1, Ordering::Relaxed)
    };
}

fn thread_id() -> u32 {
    THREAD_ID.with(|id| *id)
}

impl SimMem {
    /// Zeroed memory of `len` bytes (rounded up to a cache line) that may grow to `max_len`, with
    /// no crash capture.
    pub fn new(len: u64, max_len: u64) -> SimMem {
        let len = len.next_multiple_of(CACHE_LINE);
        SimMem::from_words(vec![0; (len / WORD) as usize], max_len.max(len))
    }

    fn from_words(words: Vec<u64>, max_len: u64) -> SimMem {
        let persisted = PagedImage::from_words(&words);
        SimMem::from_images(words, persisted, max_len)
    }

    fn from_images(words: Vec<u64>, persisted: PagedImage, max_len: u64) -> SimMem {
        SimMem {
            state: Mutex::new(SimState {
                model: MediaModel::PersistentMemory,
                working: words,
                persisted,
                lines: BTreeMap::new(),
                flush_marks: BTreeMap::new(),
                window: Window::default(),
                window_start: 0,
                dirty: BTreeMap::new(),
                last_sync: None,
                events: 0,
                plan: CrashPlan::none(),
                rng: ChaCha8Rng::seed_from_u64(0),
                captured: Vec::new(),
            }),
            max_len,
            boot: new_boot(),
        }
    }

    /// Memory whose working and persisted images are both `bytes` (zero-padded to a cache line),
    /// as after a clean restart from that image.
    pub fn from_bytes(bytes: &[u8], max_len: u64) -> SimMem {
        let len = (bytes.len() as u64).next_multiple_of(CACHE_LINE);
        let mut words = vec![0u64; (len / WORD) as usize];
        for (i, chunk) in bytes.chunks(WORD as usize).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            words[i] = u64::from_le_bytes(w);
        }
        SimMem::from_words(words, max_len.max(len))
    }

    /// The same memory as in the boot of `other`: what a process that was killed, not a machine
    /// that lost power, leaves to the next process (see [`boot`](PMem::boot)).
    pub fn in_boot_of(mut self, other: &SimMem) -> SimMem {
        self.boot = other.boot;
        self
    }

    /// The same memory under `model` from now on. When the model changes, everything stored so
    /// far counts as durable (as after a sync of both), so a pool prepared under one model runs
    /// under the other from a clean start; under the same model nothing changes.
    pub fn with_model(self, model: MediaModel) -> SimMem {
        {
            let mut st = self.state.lock();
            if st.model != model {
                st.switch_model(model);
            }
        }
        self
    }

    /// The media model in force.
    pub fn model(&self) -> MediaModel {
        self.state.lock().model
    }

    /// Starts capturing crash states as `plan` says, from now on.
    pub fn set_plan(&self, plan: CrashPlan) {
        let mut st = self.state.lock();
        st.rng = ChaCha8Rng::seed_from_u64(plan.seed);
        st.plan = plan;
    }

    /// Events (stores, flushes, fences) completed so far. A workload records this when it
    /// acknowledges something, to compare with a [`CrashPoint`] later.
    pub fn events(&self) -> u64 {
        self.state.lock().events
    }

    /// Captures the crash state of this moment, regardless of the plan.
    pub fn crash_now(&self) -> CrashState {
        self.state.lock().crash_state(EventKind::Now)
    }

    /// Captures the crash state of this moment, whatever the plan: a crash point the workload
    /// chooses, which [`take_crash_states`](SimMem::take_crash_states) returns with the plan's.
    pub fn capture_now(&self) {
        let mut st = self.state.lock();
        let state = st.crash_state(EventKind::Now);
        st.captured.push(state);
    }

    /// Removes and returns the crash states captured so far.
    pub fn take_crash_states(&self) -> Vec<CrashState> {
        std::mem::take(&mut self.state.lock().captured)
    }

    /// Bytes of the working image (what loads see now).
    pub fn working_bytes(&self) -> Vec<u8> {
        self.state.lock().working.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Bytes of the persisted image (what would survive if every unpersisted store were lost).
    pub fn persisted_bytes(&self) -> Vec<u8> {
        let st = self.state.lock();
        st.persisted.to_words(st.working.len() as u64 * WORD).iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Number of lines holding stores that are not yet persisted (the persistent-memory model;
    /// always 0 in the page cache, see [`dirty_pages`](SimMem::dirty_pages)).
    pub fn unpersisted_lines(&self) -> usize {
        self.state.lock().lines.values().filter(|l| !l.stores.is_empty()).count()
    }

    /// Number of pages stored to since the last sync (the page-cache model; always 0 under
    /// persistent memory).
    pub fn dirty_pages(&self) -> usize {
        self.state.lock().dirty.len()
    }
}

impl PMem for SimMem {
    fn len(&self) -> u64 {
        self.state.lock().working.len() as u64 * WORD
    }

    fn load(&self, off: u64, _order: Ordering) -> u64 {
        let st = self.state.lock();
        check_word(off, st.working.len() as u64 * WORD);
        st.working[(off / WORD) as usize]
    }

    fn store(&self, off: u64, val: u64, _order: Ordering) {
        let mut st = self.state.lock();
        check_word(off, st.working.len() as u64 * WORD);
        st.store(off, val);
    }

    fn compare_exchange(&self, off: u64, current: u64, new: u64, _s: Ordering, _f: Ordering) -> Result<u64, u64> {
        let mut st = self.state.lock();
        check_word(off, st.working.len() as u64 * WORD);
        let old = st.working[(off / WORD) as usize];
        if old != current {
            return Err(old);
        }
        st.store(off, new);
        Ok(old)
    }

    fn fetch_add(&self, off: u64, val: u64, _order: Ordering) -> u64 {
        let mut st = self.state.lock();
        check_word(off, st.working.len() as u64 * WORD);
        let old = st.working[(off / WORD) as usize];
        st.store(off, old.wrapping_add(val));
        old
    }

    fn flush(&self, off: u64) {
        let mut st = self.state.lock();
        let len = st.working.len() as u64 * WORD;
        assert!(off < len, "flush at offset {off:#x} beyond the pool's {len} bytes");
        st.flush(off, thread_id());
    }

    fn fence(&self) {
        self.state.lock().fence(thread_id());
    }

    fn grow(&self, new_len: u64) -> Result<(), GrowError> {
        let mut st = self.state.lock();
        let old = st.working.len() as u64 * WORD;
        if new_len <= old {
            return Ok(());
        }
        if new_len > self.max_len {
            return Err(GrowError::AboveMaximum { requested: new_len, max: self.max_len });
        }
        if !new_len.is_multiple_of(CACHE_LINE) {
            return Err(GrowError::Unaligned { requested: new_len, granule: CACHE_LINE });
        }
        st.working.resize((new_len / WORD) as usize, 0);
        st.persisted.grow(new_len);
        Ok(())
    }

    fn max_len(&self) -> u64 {
        self.max_len
    }

    fn durability(&self) -> Durability {
        match self.state.lock().model {
            MediaModel::PersistentMemory => Durability::Simulated,
            // What the code under test would see on a page-cache file.
            MediaModel::PageCache => Durability::PageCache,
        }
    }

    fn boot(&self) -> u128 {
        self.boot
    }

    fn sync(&self) -> io::Result<()> {
        self.state.lock().sync();
        Ok(())
    }
}

/// The durable state at a crash point: the persisted image plus, per line (persistent memory) or
/// per page (page cache), the stores that may or may not have reached the media.
#[derive(Clone)]
pub struct CrashState {
    /// Where it was taken.
    pub point: CrashPoint,
    /// The event number of the last sync before it.
    pub last_sync: Option<u64>,
    persisted: PagedImage,
    len: u64,
    pending: Pending,
}

/// The stores of a crash state that may or may not have reached the media.
#[derive(Clone)]
enum Pending {
    /// Persistent memory: (line number, its unpersisted stores oldest first), in line order.
    Lines(Vec<(u64, Vec<PendingStore>)>),
    /// Page cache: the first `upto` stores of `window` were made since the last sync (the first
    /// of them at or after event `from`); `pages` are the pages they dirtied, in page order, each
    /// with its count of them.
    Pages { window: Window, upto: usize, from: u64, pages: Vec<(u64, u32)> },
}

impl fmt::Debug for CrashState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrashState")
            .field("point", &self.point)
            .field("last_sync", &self.last_sync)
            .field("len", &self.len)
            .field("pending", &self.pending())
            .field("choices", &self.choices())
            .finish()
    }
}

impl CrashState {
    /// The media model it was taken under.
    pub fn model(&self) -> MediaModel {
        match self.pending {
            Pending::Lines(_) => MediaModel::PersistentMemory,
            Pending::Pages { .. } => MediaModel::PageCache,
        }
    }

    /// Per pending line or page, in order, its count of stores that may or may not be durable:
    /// the choice of [`every_store`](CrashState::every_store).
    pub fn counts(&self) -> Vec<u32> {
        match &self.pending {
            Pending::Lines(lines) => lines.iter().map(|(_, s)| s.len() as u32).collect(),
            Pending::Pages { pages, .. } => pages.iter().map(|&(_, n)| n).collect(),
        }
    }

    /// Number of distinct images (product over pending lines or pages of their stores + 1),
    /// saturating.
    pub fn choices(&self) -> u128 {
        self.counts().iter().fold(1u128, |acc, &n| acc.saturating_mul(n as u128 + 1))
    }

    /// Under the page-cache model, the pages whose content in an image is a choice, in the
    /// order of a choice vector: each page's offset in the pool and its count of stores since
    /// the last sync (an image keeps a prefix of them). Empty under persistent memory.
    pub fn pages(&self) -> Vec<(u64, u32)> {
        match &self.pending {
            Pending::Lines(_) => Vec::new(),
            Pending::Pages { pages, .. } => pages.iter().map(|&(page, n)| (page * PAGE_BYTES, n)).collect(),
        }
    }

    /// The lines (persistent memory) or pages (page cache) whose content in an image is a
    /// choice: one entry of each choice vector per each.
    pub fn pending(&self) -> usize {
        match &self.pending {
            Pending::Lines(lines) => lines.len(),
            Pending::Pages { pages, .. } => pages.len(),
        }
    }

    /// The image that keeps, for the i-th pending line or page (in order), the first `choice[i]`
    /// of its stores that may or may not be durable: under the page-cache model, the page as it
    /// was just after its `choice[i]`-th store since the last sync. `choice` must have one entry
    /// per pending line or page, each at most its count.
    pub fn image(&self, choice: &[u32]) -> CrashImage {
        assert_eq!(choice.len(), self.pending(), "one choice per pending line or page");
        let mut image = self.persisted.clone();
        match &self.pending {
            Pending::Lines(lines) => {
                for ((line, stores), &keep) in lines.iter().zip(choice) {
                    assert!(keep as usize <= stores.len(), "choice beyond the line's stores");
                    for st in &stores[..keep as usize] {
                        image.set(line * LINE_WORDS + st.word_in_line as u64, st.val);
                    }
                }
            }
            Pending::Pages { window, upto, pages, .. } => {
                for (&(_, n), &keep) in pages.iter().zip(choice) {
                    assert!(keep <= n, "choice beyond the page's stores");
                }
                let mut seen = vec![0u32; pages.len()];
                for st in &window.read()[..*upto] {
                    let page = st.word / PAGE_WORDS as u64;
                    let i = pages.binary_search_by_key(&page, |&(p, _)| p).expect("a page of the window");
                    if seen[i] < choice[i] {
                        image.set(st.word, st.val);
                    }
                    seen[i] += 1;
                }
            }
        }
        CrashImage {
            point: self.point,
            last_sync: self.last_sync,
            choice: choice.to_vec(),
            model: self.model(),
            image,
            len: self.len,
        }
    }

    /// The image that keeps every store made: what a process killed at this point leaves (in
    /// the same boot, see [`SimMem::in_boot_of`]), or a power loss after which every pending
    /// line or page had reached the media.
    pub fn every_store(&self) -> CrashImage {
        self.image(&self.counts())
    }

    /// The image that keeps none of the pending stores: a power loss before any of them reached
    /// the media.
    pub fn no_store(&self) -> CrashImage {
        self.image(&vec![0; self.pending()])
    }

    /// The images of this state: all of them if there are at most `exhaustive_bound`; otherwise
    /// the two extremes (nothing more durable, everything durable) and `samples` random ones
    /// drawn with `seed`. Under persistent memory a random image keeps a prefix of each line's
    /// stores, of a length drawn uniformly; in the page cache each page takes its content at a
    /// moment drawn uniformly, for each page on its own, from the events between the last sync
    /// and the crash.
    pub fn images(&self, exhaustive_bound: u64, samples: usize, seed: u64) -> Vec<Vec<u32>> {
        let counts = self.counts();
        if self.choices() <= exhaustive_bound as u128 {
            // Mixed-radix counter over every line's or page's prefix length.
            let mut out = Vec::new();
            let mut cur = vec![0u32; counts.len()];
            loop {
                out.push(cur.clone());
                let mut i = 0;
                loop {
                    if i == cur.len() {
                        return out;
                    }
                    if cur[i] < counts[i] {
                        cur[i] += 1;
                        break;
                    }
                    cur[i] = 0;
                    i += 1;
                }
            }
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ self.point.event.rotate_left(17));
        let mut out = vec![vec![0; counts.len()], counts.clone()];
        match &self.pending {
            Pending::Lines(_) => {
                for _ in 0..samples {
                    out.push(counts.iter().map(|&c| rng.random_range(0..=c)).collect());
                }
            }
            Pending::Pages { window, upto, from, pages } => {
                // The events of each page's stores, to turn a moment into a prefix.
                let mut events: Vec<Vec<u64>> = pages.iter().map(|&(_, n)| Vec::with_capacity(n as usize)).collect();
                for st in &window.read()[..*upto] {
                    let page = st.word / PAGE_WORDS as u64;
                    let i = pages.binary_search_by_key(&page, |&(p, _)| p).expect("a page of the window");
                    events[i].push(st.event);
                }
                // A page written back just before event `m` holds the stores of events below it:
                // `from` keeps none of the window's, the crash's own event all of them.
                let (from, to) = (*from, self.point.event);
                for _ in 0..samples {
                    out.push(
                        events
                            .iter()
                            .map(|ev| {
                                let m = rng.random_range(from..=to.max(from));
                                ev.partition_point(|&e| e < m) as u32
                            })
                            .collect(),
                    );
                }
            }
        }
        out
    }
}

/// One possible content of the pool after a crash.
#[derive(Clone)]
pub struct CrashImage {
    /// The crash point it belongs to.
    pub point: CrashPoint,
    /// The event number of the last sync before the crash.
    pub last_sync: Option<u64>,
    /// The prefix length kept per pending line or page, in order: with the seed and point,
    /// enough to rebuild the image.
    pub choice: Vec<u32>,
    model: MediaModel,
    image: PagedImage,
    len: u64,
}

impl fmt::Debug for CrashImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrashImage")
            .field("point", &self.point)
            .field("last_sync", &self.last_sync)
            .field("model", &self.model)
            .field("choice", &self.choice)
            .finish()
    }
}

impl CrashImage {
    /// The image's bytes, as a pool file would hold them.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.image.to_words(self.len).iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Fresh simulated memory holding this image as both working and persisted state, under the
    /// model it was taken under, as after a restart: a new boot of the machine. It may grow to
    /// `max_len`.
    pub fn to_mem(&self, max_len: u64) -> SimMem {
        let mem = SimMem::from_images(self.image.to_words(self.len), self.image.clone(), max_len.max(self.len));
        mem.state.lock().model = self.model;
        mem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: Ordering = Ordering::Relaxed;

    #[test]
    fn nothing_is_persisted_without_flush_and_fence() {
        let m = SimMem::new(256, 256);
        m.store(0, 1, R);
        m.store(64, 2, R);
        m.fence(); // no flush: nothing persists
        assert_eq!(m.crash_now().choices(), 4);
        m.flush(0);
        assert_eq!(m.persisted_bytes()[0], 0, "flush alone persists nothing");
        m.fence();
        let persisted = m.persisted_bytes();
        assert_eq!(persisted[0], 1);
        assert_eq!(persisted[64], 0, "line 1 was never flushed");
        assert_eq!(m.unpersisted_lines(), 1);
    }

    #[test]
    fn a_fence_persists_only_its_own_threads_flushes_up_to_the_mark() {
        let m = Arc::new(SimMem::new(128, 128));
        m.store(0, 1, R);
        m.flush(0);
        m.store(8, 2, R); // after the flush: not covered by it
        let m2 = Arc::clone(&m);
        std::thread::spawn(move || m2.fence()).join().unwrap();
        assert_eq!(m.unpersisted_lines(), 1, "another thread's fence persists nothing of ours");
        m.fence();
        let p = m.persisted_bytes();
        assert_eq!((p[0], p[8]), (1, 0));
        let state = m.crash_now();
        assert_eq!(state.choices(), 2);
    }

    #[test]
    fn a_stale_flush_mark_covers_no_later_store() {
        let m = Arc::new(SimMem::new(64, 64));
        let m2 = Arc::clone(&m);
        // Another thread flushes the line while it holds one store, but does not fence yet.
        m.store(0, 1, R);
        let (flushed_tx, flushed_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            m2.flush(0);
            flushed_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            m2.fence();
        });
        flushed_rx.recv().unwrap();
        // This thread persists the line itself, then stores again without flushing.
        m.flush(0);
        m.fence();
        m.store(8, 2, R);
        // The other thread's fence must not persist the new store: it never flushed it.
        go_tx.send(()).unwrap();
        other.join().unwrap();
        assert_eq!(m.persisted_bytes()[8], 0);
        assert_eq!(m.crash_now().choices(), 2);
    }

    #[test]
    fn images_are_prefixes_of_each_lines_stores() {
        let m = SimMem::new(128, 128);
        m.store(0, 1, R);
        m.store(0, 2, R);
        m.store(64, 7, R);
        let state = m.crash_now();
        assert_eq!(state.choices(), 3 * 2);
        let all = state.images(100, 0, 1);
        assert_eq!(all.len(), 6);
        let mut seen: Vec<(u8, u8)> = all
            .iter()
            .map(|c| {
                let b = state.image(c).to_bytes();
                (b[0], b[64])
            })
            .collect();
        seen.sort();
        assert_eq!(seen, vec![(0, 0), (0, 7), (1, 0), (1, 7), (2, 0), (2, 7)]);
    }

    #[test]
    fn sampling_keeps_the_extremes_and_respects_bounds() {
        let m = SimMem::new(64 * 20, 64 * 20);
        for line in 0..20u64 {
            m.store(line * 64, line + 1, R);
            m.store(line * 64 + 8, line + 1, R);
        }
        let state = m.crash_now();
        assert_eq!(state.choices(), 3u128.pow(20));
        let picks = state.images(1000, 50, 9);
        assert_eq!(picks.len(), 52);
        assert!(picks[0].iter().all(|&c| c == 0));
        assert!(picks[1].iter().all(|&c| c == 2));
        assert!(picks.iter().flatten().all(|&c| c <= 2));
        assert_eq!(picks, state.images(1000, 50, 9), "same seed, same images");
    }

    #[test]
    fn plan_captures_before_each_selected_event() {
        let m = SimMem::new(64, 64);
        m.set_plan(CrashPlan::all(0.0, 0));
        m.store(0, 5, R);
        m.flush(0);
        m.fence();
        let states = m.take_crash_states();
        let points: Vec<_> = states.iter().map(|s| (s.point.event, s.point.kind)).collect();
        assert_eq!(points, vec![(1, EventKind::Flush), (2, EventKind::Fence)]);
        assert_eq!(states[1].choices(), 2, "before the fence the store may or may not be durable");
        assert_eq!(m.crash_now().choices(), 1, "after it, it is");
    }

    #[test]
    fn a_workload_captures_the_moments_it_chooses_among_the_plans() {
        let m = page_cache(1);
        m.set_plan(CrashPlan::none().with_syncs());
        m.store(0, 1, R);
        m.capture_now();
        m.sync().unwrap();
        m.store(8, 2, R);
        let states = m.take_crash_states();
        let points: Vec<_> = states.iter().map(|s| (s.point.event, s.point.kind, s.last_sync)).collect();
        assert_eq!(points, vec![(1, EventKind::Now, None), (1, EventKind::Sync, None)]);
        assert_eq!(m.crash_now().last_sync, Some(1));
    }

    #[test]
    fn growth_keeps_contents_and_respects_the_maximum() {
        let m = SimMem::new(64, 256);
        m.store(0, 3, R);
        m.grow(192).unwrap();
        assert_eq!(m.len(), 192);
        assert_eq!(m.load(0, R), 3);
        assert_eq!(m.load(128, R), 0);
        assert!(matches!(m.grow(320), Err(GrowError::AboveMaximum { .. })));
    }

    fn page_cache(pages: u64) -> SimMem {
        SimMem::new(pages * PAGE, pages * PAGE).with_model(MediaModel::PageCache)
    }

    /// The word at byte `off` of an image.
    fn word_at(bytes: &[u8], off: u64) -> u64 {
        u64::from_le_bytes(bytes[off as usize..off as usize + 8].try_into().unwrap())
    }

    #[test]
    fn in_the_page_cache_only_a_sync_makes_stores_durable() {
        let m = page_cache(2);
        assert_eq!(m.durability(), Durability::PageCache);
        m.store(0, 1, R);
        m.flush(0);
        m.fence();
        assert_eq!(word_at(&m.persisted_bytes(), 0), 0, "a flush and a fence write nothing back");
        let state = m.crash_now();
        assert_eq!(state.choices(), 2, "the page may or may not have been written back");
        assert_eq!(state.last_sync, None);
        m.store(PAGE, 2, R);
        let sync = m.events();
        m.sync().unwrap();
        let p = m.persisted_bytes();
        assert_eq!((word_at(&p, 0), word_at(&p, PAGE)), (1, 2), "a sync writes every page back");
        assert_eq!(m.dirty_pages(), 0);
        let after = m.crash_now();
        assert_eq!(after.last_sync, Some(sync));
        assert_eq!(after.choices(), 1, "nothing is left to choose");
        assert_eq!(after.image(&[]).to_bytes(), m.working_bytes());
    }

    #[test]
    fn a_pages_image_content_is_one_it_really_had_since_the_last_sync() {
        let m = page_cache(2);
        // Before the sync: a value no image may show again.
        m.store(0, 9, R);
        m.sync().unwrap();
        // Two lines of page 0 and a word of page 1, interleaved with flushes and fences: the
        // contents page 0 really had since the sync.
        let mut had = vec![(9, 0)];
        for (off, val) in [(0, 1), (64, 1), (PAGE, 5), (0, 2), (64, 2), (8, 3)] {
            m.store(off, val, R);
            m.flush(off);
            m.fence();
            if off < PAGE {
                let w = m.working_bytes();
                had.push((word_at(&w, 0), word_at(&w, 64)));
            }
        }
        had.dedup();
        let state = m.crash_now();
        assert_eq!(state.pending(), 2);
        let mut seen = Vec::new();
        // Every image (there are 6 * 2), then sampled ones.
        for choice in state.images(1 << 10, 0, 1).into_iter().chain(state.images(0, 200, 1)) {
            let b = state.image(&choice).to_bytes();
            let page0 = (word_at(&b, 0), word_at(&b, 64));
            assert!(had.contains(&page0), "page 0 holds {page0:?}, which it never had since the sync");
            assert!([0, 5].contains(&word_at(&b, PAGE)));
            seen.push(page0);
        }
        seen.sort();
        seen.dedup();
        had.sort();
        assert_eq!(seen, had, "every content the page had is an image");
    }

    #[test]
    fn two_pages_reach_the_disk_in_either_order() {
        let m = page_cache(2);
        m.store(0, 1, R); // page 0 first
        m.fence();
        m.fence();
        m.store(PAGE, 1, R); // then page 1
        m.fence();
        m.fence();
        let state = m.crash_now();
        let orders = |choices: Vec<Vec<u32>>| {
            let mut got: Vec<(u64, u64)> = choices
                .iter()
                .map(|c| {
                    let b = state.image(c).to_bytes();
                    (word_at(&b, 0), word_at(&b, PAGE))
                })
                .collect();
            got.sort();
            got.dedup();
            got
        };
        let all = vec![(0, 0), (0, 1), (1, 0), (1, 1)];
        assert_eq!(orders(state.images(4, 0, 3)), all, "the later page alone, and the earlier alone");
        assert_eq!(orders(state.images(0, 64, 3)), all, "the sampled moments give both orders too");
    }

    /// Stores over `pages` pages, some synced, as the same run would make them every time.
    fn run_of_stores(pages: u64) -> SimMem {
        let m = page_cache(pages);
        for round in 0..3u64 {
            for page in 0..pages {
                m.store(page * PAGE + (round * 72) % PAGE, page << 8 | round, R);
                m.fence();
            }
            if round == 0 {
                m.sync().unwrap();
            }
        }
        m
    }

    #[test]
    fn page_cache_images_are_reproducible_by_seed() {
        let (a, b) = (run_of_stores(20).crash_now(), run_of_stores(20).crash_now());
        assert_eq!(a.choices(), 3u128.pow(20));
        let picks = a.images(1000, 50, 9);
        assert_eq!(picks.len(), 52);
        assert!(picks.iter().flatten().all(|&c| c <= 2));
        assert_eq!(picks, b.images(1000, 50, 9), "the same run and seed, the same images");
        for c in &picks {
            assert_eq!(a.image(c).to_bytes(), b.image(c).to_bytes());
        }
        assert_ne!(picks, a.images(1000, 50, 10), "another seed, other images");
    }

    #[test]
    fn a_crash_image_restarts_as_a_new_boot_under_its_model() {
        let m = page_cache(1);
        m.store(0, 1, R);
        let image = m.crash_now().image(&[1]);
        let (first, second) = (image.to_mem(PAGE), image.to_mem(PAGE));
        assert_ne!(first.boot(), m.boot(), "a power loss is a new boot");
        assert_ne!(first.boot(), second.boot(), "each restart is a boot of its own");
        assert_eq!(first.model(), MediaModel::PageCache);
        assert_eq!(first.load(0, R), 1);
        let pm = SimMem::new(64, 64);
        assert_ne!(pm.crash_now().image(&[]).to_mem(64).boot(), pm.boot());
    }

    #[test]
    fn changing_the_model_makes_what_was_stored_durable() {
        let m = SimMem::new(PAGE, PAGE);
        m.store(0, 7, R); // never flushed
        let m = m.with_model(MediaModel::PageCache);
        assert_eq!(word_at(&m.persisted_bytes(), 0), 7);
        assert_eq!(m.crash_now().choices(), 1);
        m.store(8, 8, R);
        let m = m.with_model(MediaModel::PageCache); // the same model: nothing changes
        assert_eq!(m.dirty_pages(), 1);
        let m = m.with_model(MediaModel::PersistentMemory);
        assert_eq!(word_at(&m.persisted_bytes(), 8), 8);
        assert_eq!((m.dirty_pages(), m.unpersisted_lines()), (0, 0));
    }
}
