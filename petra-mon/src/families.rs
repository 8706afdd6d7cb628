//! How a stored metric is named to Prometheus: its family, labels, type, unit and the factor
//! from the kernel's unit (kB, clock ticks, sectors, ms) to the base one (bytes, seconds).
//!
//! The names, labels and units are node_exporter's (1.5.0: its meminfo, vmstat, loadavg, stat and
//! diskstats collectors) for every fact it also exposes, under a prefix (`node` unless
//! configured), so that its dashboards and alerts work: `node_cpu_seconds_total{cpu, mode}`,
//! `node_memory_MemAvailable_bytes`, `node_disk_read_bytes_total{device}`,
//! `node_vmstat_pgfault`, `node_load1`. The facts node_exporter does not expose follow the same
//! scheme. What is not a measurement of the machine (the set's `component_id` and `job_id`) has no
//! family of its own: the daemon exposes it in `petra_mon_set_info`.

use std::fmt;

use crate::proc::CPU_MODES;

/// A family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Only goes up (or resets): samples are named with `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
    /// node_exporter's `untyped` (`unknown` in OpenMetrics): the vmstat fields, counters and
    /// gauges alike.
    Untyped,
}

/// A base unit, the last word of a family's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unit {
    /// Bytes.
    Bytes,
    /// Seconds.
    Seconds,
}

impl Unit {
    /// The word.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Seconds => "seconds",
        }
    }
}

/// How meminfo's fields are spelled in family names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Names {
    /// As node_exporter spells them (`node_memory_MemAvailable_bytes`): the kernel's field
    /// names, which promtool's lint calls camelCase.
    #[default]
    NodeExporter,
    /// In snake case (`node_memory_mem_available_bytes`): names promtool's lint accepts, that
    /// node_exporter's dashboards do not know.
    SnakeCase,
}

/// A family: everything but the samples.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Family {
    /// The name after the prefix and before the unit (`cpu`, `memory_MemTotal`).
    pub stem: String,
    /// Its unit, if it has one.
    pub unit: Option<Unit>,
    /// Its type.
    pub kind: Kind,
    /// Its HELP text: plain words, no backslash, quote or newline.
    pub help: String,
}

impl Family {
    /// The family's name with `prefix` (`node_cpu_seconds`): what OpenMetrics names it; its
    /// counter samples add `_total`.
    pub fn name(&self, prefix: &str) -> String {
        let mut name = String::with_capacity(prefix.len() + self.stem.len() + 9);
        if !prefix.is_empty() {
            name.push_str(prefix);
            name.push('_');
        }
        name.push_str(&self.stem);
        if let Some(unit) = self.unit {
            name.push('_');
            name.push_str(unit.as_str());
        }
        name
    }

    /// The name of its samples: [`name`](Family::name), with `_total` for a counter.
    pub fn sample_name(&self, prefix: &str) -> String {
        let mut name = self.name(prefix);
        if self.kind == Kind::Counter {
            name.push_str("_total");
        }
        name
    }
}

/// A stored metric as Prometheus sees it: its family, its labels, and the factor that turns the
/// stored value into the family's unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its family.
    pub family: Family,
    /// Its labels (besides the set's), by name.
    pub labels: Vec<(&'static str, String)>,
    /// How the stored value becomes the exposed one.
    pub scale: Scale,
}

/// A change of unit: times or divided by a factor (dividing ticks by 100 gives `2914.99` where
/// multiplying by 0.01 would give `2914.9900000000004`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    /// Times this.
    Mul(f64),
    /// Divided by this.
    Div(f64),
}

impl Scale {
    /// `x` in the family's unit.
    pub fn apply(self, x: f64) -> f64 {
        match self {
            Scale::Mul(f) => x * f,
            Scale::Div(d) => x / d,
        }
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.family.sample_name(""), self.labels)
    }
}

/// Clock ticks per second of `/proc/stat` (`USER_HZ`): 100 in the kernel's ABI on every
/// architecture Linux runs on today, and what node_exporter assumes too.
const USER_HZ: f64 = 100.0;
/// Bytes per sector of `/proc/diskstats`: always 512, whatever the device's sector size.
const SECTOR: f64 = 512.0;

fn series(stem: impl Into<String>, unit: Option<Unit>, kind: Kind, help: impl Into<String>) -> Series {
    Series {
        family: Family { stem: stem.into(), unit, kind, help: help.into() },
        labels: Vec::new(),
        scale: Scale::Mul(1.0),
    }
}

impl Series {
    fn label(mut self, name: &'static str, value: impl Into<String>) -> Series {
        self.labels.push((name, value.into()));
        self
    }

    fn scale(mut self, scale: Scale) -> Series {
        self.scale = scale;
        self
    }
}

/// A word as a metric name part: `[a-zA-Z0-9_]`, anything else `_`.
fn name_part(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// A meminfo field in snake case, in words promtool's lint takes: `MemTotal` as `mem_total`,
/// `Active(anon)` (given as `Active_anon`) as `active_anon`, `DirectMap2M` as `direct_map2m`;
/// `Sec` (secondary) spelled out, and `HugePages_Total`, a count and no counter, as
/// `huge_pages_pool`.
fn snake_case(s: &str) -> String {
    if s == "HugePages_Total" {
        return "huge_pages_pool".into();
    }
    let mut out = String::with_capacity(s.len() + 4);
    let mut prev: Option<char> = None;
    for c in s.chars() {
        if c.is_ascii_uppercase() && prev.is_some_and(|p| p.is_ascii_lowercase()) {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
        prev = Some(c);
    }
    out.split('_').map(|w| if w == "sec" { "secondary" } else { w }).collect::<Vec<_>>().join("_")
}

/// The series of metric `metric` of a set of sampler `sampler`, if it is a measurement.
pub fn describe(sampler: &str, metric: &str, names: Names) -> Option<Series> {
    if matches!(metric, "component_id" | "job_id") {
        return None;
    }
    Some(match sampler {
        // node_exporter's meminfo: `(` becomes `_` and `)` goes, kB become bytes; the huge page
        // counts (no unit in the file) stay counts.
        "meminfo" => {
            let field = name_part(&metric.replace('(', "_").replace(')', ""));
            let field = match names {
                Names::NodeExporter => field,
                Names::SnakeCase => snake_case(&field),
            };
            if metric.starts_with("HugePages_") {
                series(format!("memory_{field}"), None, Kind::Gauge, format!("Memory information field {metric}."))
            } else {
                series(
                    format!("memory_{field}"),
                    Some(Unit::Bytes),
                    Kind::Gauge,
                    format!("Memory information field {metric}, in bytes."),
                )
                .scale(Scale::Mul(1024.0))
            }
        }
        // node_exporter's vmstat: untyped, as the file gives them. `sec` (secondary) would read
        // as an abbreviated unit.
        "vmstat" => {
            let field: Vec<&str> = metric.split('_').map(|w| if w == "sec" { "secondary" } else { w }).collect();
            series(
                format!("vmstat_{}", name_part(&field.join("_"))),
                None,
                Kind::Untyped,
                format!("The field {metric} of /proc/vmstat."),
            )
        }
        "loadavg" => match metric {
            "load1" | "load5" | "load15" => {
                let minutes = &metric[4..];
                series(metric, None, Kind::Gauge, format!("Load average over {minutes} minutes."))
            }
            "runnable" => series("loadavg_runnable", None, Kind::Gauge, "Runnable scheduling entities."),
            "scheduling_entities" => {
                series("loadavg_scheduling_entities", None, Kind::Gauge, "Scheduling entities in the system.")
            }
            "last_pid" => series("loadavg_last_pid", None, Kind::Gauge, "The process id created last."),
            other => series(format!("loadavg_{}", name_part(other)), None, Kind::Gauge, "A loadavg field."),
        },
        "stat" => return stat(metric),
        "diskstats" => return disk(metric),
        _ => series(
            format!("{}_{}", name_part(sampler), name_part(metric)),
            None,
            Kind::Untyped,
            format!("The metric {metric} of the sampler {sampler}."),
        ),
    })
}

fn stat(metric: &str) -> Option<Series> {
    if let Some((cpu, mode)) = metric.split_once('.') {
        // The line of all CPUs is their sum: node_exporter leaves it out, and so do we (a sum
        // over the cpu label would count it twice). It stays in the store.
        let n = cpu.strip_prefix("cpu").filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))?;
        if !CPU_MODES.contains(&mode) {
            return None;
        }
        // Guest time is also counted in user and nice: node_exporter keeps it apart.
        let (stem, mode, help) = match mode {
            "guest" => ("cpu_guest", "user", "Seconds the CPUs spent running guests, by mode."),
            "guest_nice" => ("cpu_guest", "nice", "Seconds the CPUs spent running guests, by mode."),
            m => ("cpu", m, "Seconds the CPUs spent in each mode."),
        };
        return Some(
            series(stem, Some(Unit::Seconds), Kind::Counter, help)
                .label("cpu", n)
                .label("mode", mode)
                .scale(Scale::Div(USER_HZ)),
        );
    }
    Some(match metric {
        "intr" => series("intr", None, Kind::Counter, "Interrupts serviced since boot."),
        "ctxt" => series("context_switches", None, Kind::Counter, "Context switches since boot."),
        "btime" => series("boot_time", Some(Unit::Seconds), Kind::Gauge, "When the machine booted, Unix time."),
        "processes" => series("forks", None, Kind::Counter, "Processes and threads created since boot."),
        "procs_running" => series("procs_running", None, Kind::Gauge, "Processes in the runnable state."),
        "procs_blocked" => series("procs_blocked", None, Kind::Gauge, "Processes blocked waiting for I/O."),
        "softirq" => series("softirqs", None, Kind::Counter, "Softirqs serviced since boot."),
        other => series(
            format!("stat_{}", name_part(other)),
            None,
            Kind::Untyped,
            format!("The field {other} of /proc/stat."),
        ),
    })
}

fn disk(metric: &str) -> Option<Series> {
    let (dev, field) = metric.rsplit_once('.')?;
    let c = |stem: &str, unit, help: &str| series(format!("disk_{stem}"), unit, Kind::Counter, help);
    let secs = Some(Unit::Seconds);
    let s = match field {
        "reads_completed" => c("reads_completed", None, "Reads completed."),
        "reads_merged" => c("reads_merged", None, "Reads merged with adjacent ones."),
        "sectors_read" => c("read", Some(Unit::Bytes), "Bytes read.").scale(Scale::Mul(SECTOR)),
        "read_ms" => c("read_time", secs, "Seconds spent by all reads.").scale(Scale::Div(1e3)),
        "writes_completed" => c("writes_completed", None, "Writes completed."),
        "writes_merged" => c("writes_merged", None, "Writes merged with adjacent ones."),
        "sectors_written" => c("written", Some(Unit::Bytes), "Bytes written.").scale(Scale::Mul(SECTOR)),
        "write_ms" => c("write_time", secs, "Seconds spent by all writes.").scale(Scale::Div(1e3)),
        "ios_in_progress" => series("disk_io_now", None, Kind::Gauge, "I/Os in progress."),
        "io_ms" => c("io_time", secs, "Seconds spent doing I/Os.").scale(Scale::Div(1e3)),
        "weighted_io_ms" => c("io_time_weighted", secs, "Seconds spent doing I/Os, weighted by I/Os in progress.")
            .scale(Scale::Div(1e3)),
        "discards_completed" => c("discards_completed", None, "Discards completed."),
        "discards_merged" => c("discards_merged", None, "Discards merged with adjacent ones."),
        "sectors_discarded" => c("discarded_sectors", None, "Sectors discarded."),
        "discard_ms" => c("discard_time", secs, "Seconds spent by all discards.").scale(Scale::Div(1e3)),
        "flush_requests" => c("flush_requests", None, "Flush requests completed."),
        "flush_ms" => c("flush_requests_time", secs, "Seconds spent by all flush requests.").scale(Scale::Div(1e3)),
        _ => return None,
    };
    Some(s.label("device", dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(sampler: &str, metric: &str) -> (String, Vec<(&'static str, String)>, Scale) {
        let s = describe(sampler, metric, Names::NodeExporter).unwrap();
        (s.family.sample_name("node"), s.labels, s.scale)
    }

    #[test]
    fn the_facts_node_exporter_exposes_have_its_names_labels_and_units() {
        let l = |pairs: &[(&'static str, &str)]| pairs.iter().map(|(k, v)| (*k, v.to_string())).collect::<Vec<_>>();
        assert_eq!(
            name("stat", "cpu1.idle"),
            ("node_cpu_seconds_total".into(), l(&[("cpu", "1"), ("mode", "idle")]), Scale::Div(100.0))
        );
        assert_eq!(name("stat", "cpu0.guest_nice").1, l(&[("cpu", "0"), ("mode", "nice")]));
        assert_eq!(name("stat", "cpu0.guest").0, "node_cpu_guest_seconds_total");
        assert!(describe("stat", "cpu.user", Names::NodeExporter).is_none());
        assert_eq!(name("stat", "ctxt").0, "node_context_switches_total");
        assert_eq!(name("stat", "btime").0, "node_boot_time_seconds");
        assert_eq!(name("stat", "processes").0, "node_forks_total");
        assert_eq!(name("meminfo", "MemTotal"), ("node_memory_MemTotal_bytes".into(), vec![], Scale::Mul(1024.0)));
        assert_eq!(name("meminfo", "Active(anon)").0, "node_memory_Active_anon_bytes");
        assert_eq!(name("meminfo", "HugePages_Total"), ("node_memory_HugePages_Total".into(), vec![], Scale::Mul(1.0)));
        let snake = describe("meminfo", "Active(anon)", Names::SnakeCase).unwrap();
        assert_eq!(snake.family.name("node"), "node_memory_active_anon_bytes");
        let stem = |m: &str| describe("meminfo", m, Names::SnakeCase).unwrap().family.stem;
        assert_eq!(stem("MemTotal"), "memory_mem_total");
        assert_eq!(stem("DirectMap2M"), "memory_direct_map2m");
        assert_eq!(stem("SecPageTables"), "memory_secondary_page_tables");
        assert_eq!(stem("HugePages_Total"), "memory_huge_pages_pool");
        assert_eq!(name("vmstat", "pgfault").0, "node_vmstat_pgfault");
        assert_eq!(name("vmstat", "nr_sec_page_table_pages").0, "node_vmstat_nr_secondary_page_table_pages");
        assert_eq!(name("loadavg", "load15").0, "node_load15");
        assert_eq!(
            name("diskstats", "vda.sectors_read"),
            ("node_disk_read_bytes_total".into(), l(&[("device", "vda")]), Scale::Mul(512.0))
        );
        assert_eq!(name("diskstats", "dm-0.weighted_io_ms").0, "node_disk_io_time_weighted_seconds_total");
        assert_eq!(name("diskstats", "vda.ios_in_progress").0, "node_disk_io_now");
        assert!(describe("meminfo", "job_id", Names::NodeExporter).is_none());
        let d = describe("diskstats", "vda.read_ms", Names::NodeExporter).unwrap();
        assert_eq!(
            (d.family.name("petra"), d.family.kind, d.scale),
            ("petra_disk_read_time_seconds".into(), Kind::Counter, Scale::Div(1e3))
        );
    }

    #[test]
    fn help_texts_need_no_escaping() {
        for (sampler, metric) in
            [("meminfo", "Active(anon)"), ("vmstat", "pgfault"), ("stat", "cpu0.user"), ("diskstats", "vda.io_ms")]
        {
            let help = describe(sampler, metric, Names::NodeExporter).unwrap().family.help;
            assert!(!help.contains(['\\', '"', '\n']), "{help}");
        }
    }
}
