//! TATP's population rules: the rows of each subscriber in every table, and the specification's
//! non-uniform subscriber ids.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// The specification's non-uniform subscriber id in `1..=n`: `(rand(0, A) | rand(1, n)) % n + 1`,
/// with A = 65 535 up to a million subscribers, 1 048 575 up to ten million, 2 097 151 above.
pub(crate) fn nonuniform_s_id(rng: &mut impl Rng, n: u64) -> u64 {
    let a = match n {
        0..=1_000_000 => 65_535,
        1_000_001..=10_000_000 => 1_048_575,
        _ => 2_097_151,
    };
    (rng.random_range(0..=a) | rng.random_range(1..=n)) % n + 1
}

/// `k` letters `A` to `Z`, five bits each, the first highest.
fn letters(rng: &mut impl Rng, k: u32) -> u64 {
    (0..k).fold(0, |acc, _| acc << 5 | rng.random_range(0..26u64))
}

/// `k` distinct values of `1..=4`, `k` drawn from `1..=4`, in random order.
fn distinct_types(rng: &mut impl Rng) -> Vec<u8> {
    let mut types = vec![1, 2, 3, 4];
    types.shuffle(rng);
    types.truncate(rng.random_range(1..=4));
    types
}

/// One SUBSCRIBER row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Subscriber {
    /// bit_1 .. bit_10, bit_1 lowest.
    pub(crate) bits: u16,
    /// hex_1 .. hex_10, four bits each, hex_1 lowest.
    pub(crate) hex: u64,
    /// byte2_1 .. byte2_10.
    pub(crate) byte2: [u8; 10],
    /// msc_location.
    pub(crate) msc_location: u32,
    /// vlr_location.
    pub(crate) vlr_location: u32,
}

/// One ACCESS_INFO row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AccessInfo {
    /// ai_type, 1 to 4.
    pub(crate) ai_type: u8,
    /// data1, data2 (0 to 255), data3 (3 letters), data4 (5 letters), packed.
    pub(crate) packed: u64,
}

/// One SPECIAL_FACILITY row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpecialFacility {
    /// sf_type, 1 to 4.
    pub(crate) sf_type: u8,
    /// is_active: 1 for 85% of the rows.
    pub(crate) is_active: bool,
    /// error_cntrl, 0 to 255.
    pub(crate) error_cntrl: u8,
    /// data_a, 0 to 255.
    pub(crate) data_a: u8,
    /// data_b, 5 letters.
    pub(crate) data_b: u64,
}

/// One CALL_FORWARDING row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallForwarding {
    /// sf_type of its facility.
    pub(crate) sf_type: u8,
    /// 0, 8 or 16.
    pub(crate) start_time: u8,
    /// start_time + 1 to 8.
    pub(crate) end_time: u8,
    /// 15 digits, as a number.
    pub(crate) numberx: u64,
}

/// A subscriber's rows in every table.
#[derive(Debug, Clone)]
pub(crate) struct Rows {
    /// s_id.
    pub(crate) s_id: u64,
    /// The SUBSCRIBER row.
    pub(crate) subscriber: Subscriber,
    /// Its 1 to 4 ACCESS_INFO rows.
    pub(crate) access_info: Vec<AccessInfo>,
    /// Its 1 to 4 SPECIAL_FACILITY rows.
    pub(crate) special_facility: Vec<SpecialFacility>,
    /// 0 to 3 CALL_FORWARDING rows per facility.
    pub(crate) call_forwarding: Vec<CallForwarding>,
}

/// The rows of subscriber `s_id` by the specification's population rules.
pub(crate) fn population_rows(rng: &mut impl Rng, s_id: u64) -> Rows {
    let subscriber = Subscriber {
        bits: rng.random_range(0..1 << 10),
        hex: rng.random_range(0..1 << 40),
        byte2: rng.random(),
        msc_location: rng.random_range(1..=u32::MAX),
        vlr_location: rng.random_range(1..=u32::MAX),
    };
    let access_info = distinct_types(rng)
        .into_iter()
        .map(|ai_type| {
            let packed = rng.random_range(0..256u64) << 48
                | rng.random_range(0..256u64) << 40
                | letters(rng, 3) << 25
                | letters(rng, 5);
            AccessInfo { ai_type, packed }
        })
        .collect();
    let special_facility: Vec<SpecialFacility> = distinct_types(rng)
        .into_iter()
        .map(|sf_type| SpecialFacility {
            sf_type,
            is_active: rng.random_range(0..100) < 85,
            error_cntrl: rng.random(),
            data_a: rng.random(),
            data_b: letters(rng, 5),
        })
        .collect();
    let mut call_forwarding = Vec::new();
    for sf in &special_facility {
        let mut starts = [0u8, 8, 16];
        starts.shuffle(rng);
        for &start_time in &starts[..rng.random_range(0..=3)] {
            call_forwarding.push(CallForwarding {
                sf_type: sf.sf_type,
                start_time,
                end_time: start_time + rng.random_range(1..=8),
                numberx: rng.random_range(0..1_000_000_000_000_000),
            });
        }
    }
    Rows { s_id, subscriber, access_info, special_facility, call_forwarding }
}

/// Subscriber `s_id`'s rows in the population of `seed`: the same whichever thread makes them.
pub(crate) fn rows_of(seed: u64, s_id: u64) -> Rows {
    population_rows(&mut StdRng::seed_from_u64(seed ^ s_id.wrapping_mul(0x9E37_79B9_7F4A_7C15)), s_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_population_follows_the_cardinality_rules() {
        let mut rng = StdRng::seed_from_u64(3);
        let n = 20_000u64;
        let (mut ai, mut sf, mut cf, mut active) = (0usize, 0usize, 0usize, 0usize);
        let mut per_count = [0u64; 5];
        for s in 1..=n {
            let r = population_rows(&mut rng, s);
            // 1 to 4 rows of distinct types in 1..=4.
            for types in [
                r.access_info.iter().map(|a| a.ai_type).collect::<Vec<_>>(),
                r.special_facility.iter().map(|f| f.sf_type).collect(),
            ] {
                assert!((1..=4).contains(&types.len()), "{types:?}");
                let mut sorted = types.clone();
                sorted.sort();
                sorted.dedup();
                assert_eq!(sorted.len(), types.len());
                assert!(types.iter().all(|t| (1..=4).contains(t)));
            }
            per_count[r.access_info.len()] += 1;
            // 0 to 3 forwardings per facility, distinct start times of 0, 8, 16, ending 1 to 8
            // hours after they start, 15-digit numbers.
            for f in &r.special_facility {
                let starts: Vec<u8> =
                    r.call_forwarding.iter().filter(|c| c.sf_type == f.sf_type).map(|c| c.start_time).collect();
                assert!(starts.len() <= 3);
                let mut sorted = starts.clone();
                sorted.sort();
                sorted.dedup();
                assert_eq!(sorted.len(), starts.len());
                assert!(starts.iter().all(|s| [0, 8, 16].contains(s)));
            }
            for c in &r.call_forwarding {
                assert!(r.special_facility.iter().any(|f| f.sf_type == c.sf_type));
                assert!((c.start_time + 1..=c.start_time + 8).contains(&c.end_time));
                assert!(c.numberx < 1_000_000_000_000_000);
            }
            assert!(r.subscriber.msc_location >= 1 && r.subscriber.vlr_location >= 1);
            assert!(r.subscriber.hex < 1 << 40 && r.subscriber.bits < 1 << 10);
            ai += r.access_info.len();
            sf += r.special_facility.len();
            cf += r.call_forwarding.len();
            active += r.special_facility.iter().filter(|f| f.is_active).count();
        }
        // Means: 2.5 access infos and facilities per subscriber, 1.5 forwardings per facility,
        // 85% of facilities active; the count of rows uniform over 1..=4.
        let per = |x: usize| x as f64 / n as f64;
        assert!((per(ai) - 2.5).abs() < 0.03 && (per(sf) - 2.5).abs() < 0.03, "{ai} {sf}");
        assert!((cf as f64 / sf as f64 - 1.5).abs() < 0.03, "{cf} / {sf}");
        assert!((active as f64 / sf as f64 - 0.85).abs() < 0.01, "{active} / {sf}");
        assert!(per_count[1..].iter().all(|&c| (4_700..=5_300).contains(&c)), "{per_count:?}");
    }

    #[test]
    fn nonuniform_ids_stay_in_range_and_favour_some() {
        let mut rng = StdRng::seed_from_u64(5);
        let n = 100_000;
        let mut hits = vec![0u32; n as usize + 1];
        for _ in 0..1_000_000 {
            let s = nonuniform_s_id(&mut rng, n);
            assert!((1..=n).contains(&s));
            hits[s as usize] += 1;
        }
        // The OR with a 16-bit draw skews the ids: the most drawn is drawn far above the mean of 10.
        let max = *hits.iter().max().unwrap();
        assert!(max > 30, "{max}");
        assert_eq!(hits[0], 0);
    }
}
