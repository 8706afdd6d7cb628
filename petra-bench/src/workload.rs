//! Workload generators: the dissertation's operation mixes over a uniform key range, and the
//! prefills that come before them.

use petra::OpKind;
use rand::Rng;

use crate::error::{BenchError, Result};

/// Shares of each operation kind, in percent (they add up to 100).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mix {
    /// Inserts.
    pub(crate) insert: u32,
    /// Deletes.
    pub(crate) delete: u32,
    /// Updates (maps only).
    pub(crate) update: u32,
    /// Finds: the rest.
    pub(crate) find: u32,
}

impl Mix {
    /// A mix from insert, delete and update percentages; finds take the rest.
    pub(crate) fn new(insert: u32, delete: u32, update: u32) -> Result<Mix> {
        let writes = insert + delete + update;
        if writes > 100 {
            return Err(BenchError::InvalidArgument(format!(
                "insert {insert}% + delete {delete}% + update {update}% exceeds 100%"
            )));
        }
        Ok(Mix { insert, delete, update, find: 100 - writes })
    }

    /// Parses "40/40/20" (insert/delete/find) or "40/30/10/20" (insert/delete/update/find).
    pub(crate) fn parse(s: &str) -> Result<Mix> {
        let parts: Vec<u32> = s
            .split('/')
            .map(|p| p.trim().parse::<u32>())
            .collect::<Result<_, _>>()
            .map_err(|e| BenchError::InvalidArgument(format!("bad mix {s:?}: {e}")))?;
        let mix = match parts[..] {
            [i, d, f] => Mix { insert: i, delete: d, update: 0, find: f },
            [i, d, u, f] => Mix { insert: i, delete: d, update: u, find: f },
            _ => {
                return Err(BenchError::InvalidArgument(format!(
                    "bad mix {s:?}: give insert/delete/find or insert/delete/update/find"
                )));
            }
        };
        if mix.insert + mix.delete + mix.update + mix.find != 100 {
            return Err(BenchError::InvalidArgument(format!("bad mix {s:?}: the shares must add up to 100")));
        }
        Ok(mix)
    }

    /// Draws an op kind.
    pub(crate) fn draw(&self, rng: &mut impl Rng) -> OpKind {
        let r = rng.random_range(0..100);
        if r < self.insert {
            OpKind::Insert
        } else if r < self.insert + self.delete {
            OpKind::Delete
        } else if r < self.insert + self.delete + self.update {
            OpKind::Update
        } else {
            OpKind::Find
        }
    }
}

impl std::fmt::Display for Mix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.update == 0 {
            write!(f, "{}/{}/{}", self.insert, self.delete, self.find)
        } else {
            write!(f, "{}/{}/{}/{}", self.insert, self.delete, self.update, self.find)
        }
    }
}

/// What a structure holds before timing starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Prefill {
    /// As the C++ harness of the dissertation (`bench/main.cc` of PETRA and of LFTT) does it:
    /// KEY_RANGE transactions of one strict Insert each, of a key uniform in the range, run one
    /// after the other on one thread; an Insert of a key already present fails its transaction.
    /// The keys present number KEY_RANGE * (1 - (1 - 1/KEY_RANGE)^KEY_RANGE), about 1 - 1/e =
    /// 63.2% of the range.
    Harness,
    /// Puts of uniform keys, 16 to a transaction, until this share of the range is present.
    Share(f64),
}

impl Prefill {
    /// The share of the key range a prefill of `key_range` leaves present: exact for
    /// [`Prefill::Share`], the expectation for [`Prefill::Harness`].
    pub(crate) fn expected_share(self, key_range: u64) -> f64 {
        match self {
            Prefill::Share(s) => s,
            Prefill::Harness => 1.0 - (1.0 - 1.0 / key_range.max(1) as f64).powf(key_range as f64),
        }
    }
}

/// `harness`, or a share of the key range from 0 to 1.
impl std::str::FromStr for Prefill {
    type Err = String;

    fn from_str(s: &str) -> Result<Prefill, String> {
        if s == "harness" {
            return Ok(Prefill::Harness);
        }
        match s.parse::<f64>() {
            Ok(share) if (0.0..=1.0).contains(&share) => Ok(Prefill::Share(share)),
            Ok(share) => Err(format!("prefill {share} is outside 0 to 1")),
            Err(_) => Err(format!("prefill {s:?}: give harness or a share of the key range from 0 to 1")),
        }
    }
}

/// As the command line spells it.
impl std::fmt::Display for Prefill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Prefill::Harness => f.write_str("harness"),
            Prefill::Share(s) => write!(f, "{s}"),
        }
    }
}

/// One operation of a generated transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GenOp {
    /// The kind.
    pub(crate) kind: OpKind,
    /// The key, uniform in `[0, key_range)`.
    pub(crate) key: u64,
    /// The value written, if any.
    pub(crate) value: u64,
}

/// Generates transactions of `tx_size` ops drawn from `mix` over `[0, key_range)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Workload {
    /// Keys are uniform in `[0, key_range)`.
    pub(crate) key_range: u64,
    /// The mix.
    pub(crate) mix: Mix,
    /// Ops per transaction.
    pub(crate) tx_size: usize,
}

impl Workload {
    /// The next transaction.
    pub(crate) fn next_tx(&self, rng: &mut impl Rng, out: &mut Vec<GenOp>) {
        out.clear();
        for _ in 0..self.tx_size {
            out.push(GenOp { kind: self.mix.draw(rng), key: rng.random_range(0..self.key_range), value: rng.random() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn the_mix_and_key_distribution_are_as_specified() {
        let w = Workload { key_range: 100, mix: Mix::parse("40/30/10/20").unwrap(), tx_size: 4 };
        let mut rng = StdRng::seed_from_u64(1);
        let (mut counts, mut keys) = ([0u32; 8], vec![0u32; 100]);
        let mut tx = Vec::new();
        for _ in 0..50_000 {
            w.next_tx(&mut rng, &mut tx);
            assert_eq!(tx.len(), 4);
            for op in &tx {
                counts[op.kind as usize] += 1;
                keys[op.key as usize] += 1;
            }
        }
        let n = 200_000.0;
        for (kind, share) in [(OpKind::Insert, 0.4), (OpKind::Delete, 0.3), (OpKind::Update, 0.1), (OpKind::Find, 0.2)]
        {
            let got = counts[kind as usize] as f64 / n;
            assert!((got - share).abs() < 0.01, "{kind:?}: {got}");
        }
        // Uniform keys: every key within 10% of its expected 2000 draws.
        assert!(keys.iter().all(|&k| (1800..=2200).contains(&k)), "{keys:?}");
    }

    #[test]
    fn prefills_parse_and_the_harness_expects_one_minus_one_over_e() {
        assert_eq!("harness".parse::<Prefill>(), Ok(Prefill::Harness));
        assert_eq!("0.25".parse::<Prefill>(), Ok(Prefill::Share(0.25)));
        assert!("1.5".parse::<Prefill>().unwrap_err().contains("outside 0 to 1"));
        assert!("most".parse::<Prefill>().is_err());
        let e = Prefill::Harness.expected_share(10_000);
        assert!((e - 0.632_139).abs() < 1e-5, "{e}");
        assert_eq!(Prefill::Share(0.5).expected_share(10), 0.5);
    }

    #[test]
    fn bad_mixes_are_refused() {
        assert!(Mix::parse("40/40").is_err());
        assert!(Mix::parse("50/40/20").is_err());
        assert!(Mix::parse("a/b/c").is_err());
        assert!(Mix::new(60, 50, 0).is_err());
        assert_eq!(Mix::parse("10/10/80").unwrap(), Mix::new(10, 10, 0).unwrap());
    }
}
