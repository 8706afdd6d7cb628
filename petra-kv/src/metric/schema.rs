//! The metric store's vocabulary: the types of metrics and of their values, schemas, set
//! instances and samples.

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// The element type of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scalar {
    /// Unsigned integers.
    U8,
    #[allow(missing_docs)]
    U16,
    #[allow(missing_docs)]
    U32,
    #[allow(missing_docs)]
    U64,
    /// Signed integers.
    S8,
    #[allow(missing_docs)]
    S16,
    #[allow(missing_docs)]
    S32,
    #[allow(missing_docs)]
    S64,
    /// Floating point.
    F32,
    #[allow(missing_docs)]
    F64,
}

impl Scalar {
    /// Whether `v` is a value of this type.
    fn admits(self, v: &Value) -> bool {
        match (self, v) {
            (Scalar::U8, Value::U(x)) => *x <= u8::MAX as u64,
            (Scalar::U16, Value::U(x)) => *x <= u16::MAX as u64,
            (Scalar::U32, Value::U(x)) => *x <= u32::MAX as u64,
            (Scalar::U64, Value::U(_)) => true,
            (Scalar::S8, Value::S(x)) => i8::try_from(*x).is_ok(),
            (Scalar::S16, Value::S(x)) => i16::try_from(*x).is_ok(),
            (Scalar::S32, Value::S(x)) => i32::try_from(*x).is_ok(),
            (Scalar::S64, Value::S(_)) => true,
            (Scalar::F32 | Scalar::F64, Value::F(_)) => true,
            _ => false,
        }
    }
}

/// One metric of a schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metric {
    /// Its name, unique in the schema.
    pub name: String,
    /// Its element type.
    pub scalar: Scalar,
    /// `Some(n)`: an array of `n` elements; `None`: one value.
    pub array: Option<u32>,
    /// A meta metric (changes rarely) rather than data.
    pub meta: bool,
}

impl Metric {
    /// A data metric of one value.
    pub fn data(name: &str, scalar: Scalar) -> Metric {
        Metric { name: name.into(), scalar, array: None, meta: false }
    }

    /// A meta metric of one value.
    pub fn meta(name: &str, scalar: Scalar) -> Metric {
        Metric { name: name.into(), scalar, array: None, meta: true }
    }

    /// The words (elements) it takes in a sample.
    pub(super) fn words(&self) -> usize {
        self.array.map_or(1, |n| n as usize)
    }
}

/// The metrics of a kind of set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    /// Its name (`meminfo`, `vmstat`...).
    pub name: String,
    /// Its metrics, in order.
    pub metrics: Vec<Metric>,
}

impl Schema {
    /// The words a sample's values take.
    pub(super) fn words(&self) -> usize {
        self.metrics.iter().map(Metric::words).sum()
    }

    /// Whether `values` are one sample's values of this schema; says why not.
    pub(super) fn check(&self, values: &[Value]) -> Result<(), String> {
        if values.len() != self.metrics.len() {
            return Err(format!(
                "{} values for the {} metrics of schema {}",
                values.len(),
                self.metrics.len(),
                self.name
            ));
        }
        for (m, v) in self.metrics.iter().zip(values) {
            let ok = match (m.array, v) {
                (None, v) => m.scalar.admits(v),
                (Some(n), Value::Array(items)) => items.len() == n as usize && items.iter().all(|i| m.scalar.admits(i)),
                (Some(_), _) => false,
            };
            if !ok {
                return Err(format!(
                    "metric {} of type {:?}{} cannot hold {v:?}",
                    m.name,
                    m.scalar,
                    m.array.map_or(String::new(), |n| format!("[{n}]"))
                ));
            }
        }
        Ok(())
    }
}

/// A metric's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    /// Of an unsigned type.
    U(u64),
    /// Of a signed type.
    S(i64),
    /// Of a floating-point type (an `f32` metric keeps what `f64` holds of it).
    F(f64),
    /// Of an array metric.
    Array(Vec<Value>),
}

impl Value {
    /// The value as a number, if it is one (not an array).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::U(x) => Some(x as f64),
            Value::S(x) => Some(x as f64),
            Value::F(x) => Some(x),
            Value::Array(_) => None,
        }
    }
}

/// A set's id in its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SetId(pub u32);

/// A set instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetInfo {
    /// `<component>/<sampler>`, unique in the store.
    pub instance: String,
    /// Its schema's name.
    pub schema: String,
    /// The daemon that produces it.
    pub producer: String,
    /// The component (node) it describes.
    pub component_id: u64,
    /// The job running there, 0 if none.
    pub job_id: u64,
    /// Its sampling interval in nanoseconds (0: unknown), for stale-producer detection.
    pub interval_ns: u64,
}

/// One reading of a set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When it was taken, nanoseconds since the Unix epoch.
    pub timestamp: u64,
    /// How long taking it took, nanoseconds.
    pub duration: u64,
    /// The producer's data generation number: increases with every sample.
    pub generation: u64,
    /// Whether the producer read every metric in one consistent pass.
    pub consistent: bool,
    /// One value per metric of the schema, in order.
    pub values: Vec<Value>,
}
