//! [`SimMem`]: the crash simulator.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{CACHE_LINE, Durability, GrowError, PMem, WORD, check_word};

const PAGE_WORDS: usize = 512;
const PAGE_BYTES: u64 = PAGE_WORDS as u64 * WORD;
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

    fn grow(&mut self, len: u64) {
        let zero: Page = Arc::new([0; PAGE_WORDS]);
        self.pages.resize(len.div_ceil(PAGE_BYTES) as usize, zero);
    }
}

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
    /// Capture before each store with this probability.
    pub store_probability: f64,
    /// Seed of the store sampling.
    pub seed: u64,
}

impl CrashPlan {
    /// No capture at all.
    pub fn none() -> CrashPlan {
        CrashPlan { every_fence: false, every_flush: false, store_probability: 0.0, seed: 0 }
    }

    /// Every fence, every flush, and a share of stores chosen with `seed`.
    pub fn all(store_probability: f64, seed: u64) -> CrashPlan {
        CrashPlan { every_fence: true, every_flush: true, store_probability, seed }
    }
}

struct SimState {
    working: Vec<u64>,
    persisted: PagedImage,
    /// Every line ever stored to, with its stores not yet persisted, by line number. Ordered, so
    /// that crash images are numbered the same way on every run.
    lines: BTreeMap<u64, LineLog>,
    /// Per thread: line number -> sequence number up to which that thread has flushed it.
    flush_marks: BTreeMap<u32, BTreeMap<u64, u64>>,
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
        CrashState {
            point: CrashPoint { event: self.events, kind },
            persisted: self.persisted.clone(),
            len: self.working.len() as u64 * WORD,
            pending: self
                .lines
                .iter()
                .filter(|(_, log)| !log.stores.is_empty())
                .map(|(&line, log)| (line, log.stores.clone()))
                .collect(),
        }
    }

    fn store(&mut self, off: u64, val: u64) {
        self.maybe_capture(EventKind::Store);
        let word = off / WORD;
        self.working[word as usize] = val;
        let line = off / CACHE_LINE;
        let log = self.lines.entry(line).or_default();
        log.stores.push(PendingStore { word_in_line: (word % LINE_WORDS) as u8, val });
        self.events += 1;
    }

    fn flush(&mut self, off: u64, thread: u32) {
        self.maybe_capture(EventKind::Flush);
        let line = off / CACHE_LINE;
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
            .field("len", &(st.working.len() as u64 * WORD))
            .field("events", &st.events)
            .field("unpersisted_lines", &st.lines.len())
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
                working: words,
                persisted,
                lines: BTreeMap::new(),
                flush_marks: BTreeMap::new(),
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

    /// Number of lines holding stores that are not yet persisted.
    pub fn unpersisted_lines(&self) -> usize {
        self.state.lock().lines.values().filter(|l| !l.stores.is_empty()).count()
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
        Durability::Simulated
    }

    fn boot(&self) -> u128 {
        self.boot
    }
}

/// The durable state at a crash point: the persisted image plus, per line, the stores that may or
/// may not have reached the media.
#[derive(Clone)]
pub struct CrashState {
    /// Where it was taken.
    pub point: CrashPoint,
    persisted: PagedImage,
    len: u64,
    /// (line number, its unpersisted stores oldest first), in line order.
    pending: Vec<(u64, Vec<PendingStore>)>,
}

impl fmt::Debug for CrashState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrashState")
            .field("point", &self.point)
            .field("len", &self.len)
            .field("pending_lines", &self.pending.len())
            .field("choices", &self.choices())
            .finish()
    }
}

impl CrashState {
    /// Number of distinct images (product over lines of unpersisted stores + 1), saturating.
    pub fn choices(&self) -> u128 {
        self.pending.iter().fold(1u128, |acc, (_, st)| acc.saturating_mul(st.len() as u128 + 1))
    }

    /// Lines with unpersisted stores.
    pub fn pending_lines(&self) -> usize {
        self.pending.len()
    }

    /// The image that keeps, for the i-th pending line (in line order), the first `choice[i]` of
    /// its unpersisted stores. `choice` must have one entry per pending line, each at most that
    /// line's count.
    pub fn image(&self, choice: &[u32]) -> CrashImage {
        assert_eq!(choice.len(), self.pending.len(), "one choice per pending line");
        let mut image = self.persisted.clone();
        for ((line, stores), &keep) in self.pending.iter().zip(choice) {
            assert!(keep as usize <= stores.len(), "choice beyond the line's stores");
            for st in &stores[..keep as usize] {
                image.set(line * LINE_WORDS + st.word_in_line as u64, st.val);
            }
        }
        CrashImage { point: self.point, choice: choice.to_vec(), image, len: self.len }
    }

    /// The images of this state: all of them if there are at most `exhaustive_bound`; otherwise
    /// the two extremes (nothing more persisted, everything persisted) and `samples` random ones
    /// drawn with `seed`.
    pub fn images(&self, exhaustive_bound: u64, samples: usize, seed: u64) -> Vec<Vec<u32>> {
        let counts: Vec<u32> = self.pending.iter().map(|(_, s)| s.len() as u32).collect();
        if self.choices() <= exhaustive_bound as u128 {
            // Mixed-radix counter over every line's prefix length.
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
        for _ in 0..samples {
            out.push(counts.iter().map(|&c| rng.random_range(0..=c)).collect());
        }
        out
    }
}

/// One possible content of the pool after a crash.
#[derive(Clone)]
pub struct CrashImage {
    /// The crash point it belongs to.
    pub point: CrashPoint,
    /// The prefix length kept per pending line, in line order: with the seed and point, enough
    /// to rebuild the image.
    pub choice: Vec<u32>,
    image: PagedImage,
    len: u64,
}

impl fmt::Debug for CrashImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrashImage").field("point", &self.point).field("choice", &self.choice).finish()
    }
}

impl CrashImage {
    /// The image's bytes, as a pool file would hold them.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.image.to_words(self.len).iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Fresh simulated memory holding this image as both working and persisted state, as after
    /// a restart; it may grow to `max_len`.
    pub fn to_mem(&self, max_len: u64) -> SimMem {
        SimMem::from_images(self.image.to_words(self.len), self.image.clone(), max_len.max(self.len))
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
    fn growth_keeps_contents_and_respects_the_maximum() {
        let m = SimMem::new(64, 256);
        m.store(0, 3, R);
        m.grow(192).unwrap();
        assert_eq!(m.len(), 192);
        assert_eq!(m.load(0, R), 3);
        assert_eq!(m.load(128, R), 0);
        assert!(matches!(m.grow(320), Err(GrowError::AboveMaximum { .. })));
    }
}
