//! The samplers of `/proc`, in the spirit of LDMS's (meminfo, vmstat, loadavg, stat,
//! diskstats): each parses its file's text into a [`Reading`], the metrics this kernel reports
//! now with their raw values, named as the file names them (`MemTotal`, `cpu0.user`,
//! `vda.sectors_read`). A file that does not read as its format says is refused with the line
//! that broke it ([`ParseError`]): a reading is stored whole or not at all.

use petra_kv::{Scalar, Value};

/// The samplers, by name: each reads `/proc/<name>`.
pub const SAMPLERS: [&str; 5] = ["meminfo", "vmstat", "loadavg", "stat", "diskstats"];

/// The metrics of one reading of a file: name, type and value, in the file's order.
pub type Reading = Vec<(String, Scalar, Value)>;

/// The fields of a `cpu` line of `/proc/stat`, in order (proc(5)).
pub const CPU_MODES: [&str; 10] =
    ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice"];

/// The fields of a line of `/proc/diskstats` after the device name, in order (the kernel's
/// Documentation/admin-guide/iostats.rst: 11 fields, 4 more for discards since 4.18, 2 for
/// flushes since 5.5).
pub const DISK_FIELDS: [&str; 17] = [
    "reads_completed",
    "reads_merged",
    "sectors_read",
    "read_ms",
    "writes_completed",
    "writes_merged",
    "sectors_written",
    "write_ms",
    "ios_in_progress",
    "io_ms",
    "weighted_io_ms",
    "discards_completed",
    "discards_merged",
    "sectors_discarded",
    "discard_ms",
    "flush_requests",
    "flush_ms",
];

/// Why a file's text is not a reading.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct ParseError {
    /// The line that broke the format (1-based; 0: the file as a whole).
    pub line: usize,
    /// What was wrong with it.
    pub why: String,
}

fn broken(line: usize, why: impl Into<String>) -> ParseError {
    ParseError { line, why: why.into() }
}

fn number<T: std::str::FromStr>(line: usize, field: Option<&str>, what: &str) -> Result<T, ParseError> {
    let field = field.ok_or_else(|| broken(line, format!("no {what}")))?;
    field.parse().map_err(|_| broken(line, format!("{what} {field:?} is not a number")))
}

/// Parses the text of `/proc/<sampler>`.
pub fn parse(sampler: &str, text: &str) -> Result<Reading, ParseError> {
    let u = |name: String, v: u64| (name, Scalar::U64, Value::U(v));
    let mut out = Vec::new();
    let lines = text.lines().enumerate().map(|(i, l)| (i + 1, l)).filter(|(_, l)| !l.trim().is_empty());
    match sampler {
        // "MemTotal:       24684092 kB", "HugePages_Total:       0"
        "meminfo" => {
            for (n, line) in lines {
                let mut f = line.split_whitespace();
                let name = f.next().and_then(|s| s.strip_suffix(':')).ok_or_else(|| broken(n, "no `name:`"))?;
                out.push(u(name.to_owned(), number(n, f.next(), "value")?));
                if !matches!(f.next(), None | Some("kB")) {
                    return Err(broken(n, "a unit other than kB"));
                }
            }
        }
        // "nr_free_pages 2266393"
        "vmstat" => {
            for (n, line) in lines {
                let mut f = line.split_whitespace();
                let name = f.next().ok_or_else(|| broken(n, "no name"))?;
                out.push(u(name.to_owned(), number(n, f.next(), "value")?));
            }
        }
        // "0.43 0.90 1.00 1/78 25705"
        "loadavg" => {
            let (n, line) = lines.into_iter().next().ok_or_else(|| broken(0, "empty"))?;
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 5 {
                return Err(broken(n, format!("{} fields, not 5", f.len())));
            }
            for (i, name) in ["load1", "load5", "load15"].iter().enumerate() {
                out.push((name.to_string(), Scalar::F64, Value::F(number(n, Some(f[i]), name)?)));
            }
            let (run, total) = f[3].split_once('/').ok_or_else(|| broken(n, "no runnable/total"))?;
            out.push(u("runnable".into(), number(n, Some(run), "runnable")?));
            out.push(u("scheduling_entities".into(), number(n, Some(total), "scheduling entities")?));
            out.push(u("last_pid".into(), number(n, Some(f[4]), "last pid")?));
        }
        // "cpu0 1986107 0 266564 ...", "ctxt 51353744", "intr 26993796 0 0 ..."
        "stat" => {
            for (n, line) in lines {
                let mut f = line.split_whitespace();
                let Some(name) = f.next() else { continue };
                if name.starts_with("cpu") {
                    let fields: Vec<&str> = f.collect();
                    if fields.len() < 4 {
                        return Err(broken(n, format!("{} fields on a cpu line, not at least 4", fields.len())));
                    }
                    for (mode, v) in CPU_MODES.iter().zip(fields) {
                        out.push(u(format!("{name}.{mode}"), number(n, Some(v), mode)?));
                    }
                } else {
                    out.push(u(name.to_owned(), number(n, f.next(), "value")?));
                }
            }
        }
        // "   8       0 sda 1234 ..." (the devices node_exporter leaves out are left out)
        "diskstats" => {
            for (n, line) in lines {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 14 {
                    return Err(broken(n, format!("{} fields, not at least 14", f.len())));
                }
                let dev = f[2];
                if ignored_device(dev) {
                    continue;
                }
                for (field, v) in DISK_FIELDS.iter().zip(&f[3..]) {
                    out.push(u(format!("{dev}.{field}"), number(n, Some(v), field)?));
                }
            }
        }
        other => return Err(broken(0, format!("no sampler is called {other:?}"))),
    }
    if out.is_empty() {
        return Err(broken(0, "no metric in it"));
    }
    Ok(out)
}

/// `s` split after its leading digits.
fn split_digits(s: &str) -> (&str, &str) {
    let end = s.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

/// Whether node_exporter's diskstats collector leaves `dev` out by default: its
/// `--collector.diskstats.device-exclude` is `^(ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$`
/// (node_exporter 1.5.0), that is RAM disks, loop devices, floppies and partitions.
pub fn ignored_device(dev: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if ["ram", "loop", "fd"].iter().any(|p| dev.strip_prefix(p).is_some_and(digits)) {
        return true;
    }
    let partition = |rest: &str| {
        let mut c = rest.chars();
        matches!(c.next(), Some('a'..='z')) && digits(c.as_str())
    };
    if ["hd", "sd", "vd", "xvd"].iter().any(|p| dev.strip_prefix(p).is_some_and(partition)) {
        return true;
    }
    // nvme<n>n<m>p<k>
    let Some(rest) = dev.strip_prefix("nvme") else { return false };
    let (ctrl, rest) = split_digits(rest);
    let Some(rest) = rest.strip_prefix('n').filter(|_| !ctrl.is_empty()) else { return false };
    let (ns, rest) = split_digits(rest);
    !ns.is_empty() && rest.strip_prefix('p').is_some_and(digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse_into_named_metrics() {
        let m =
            parse("meminfo", "MemTotal:       24684092 kB\nMemFree:        23957912 kB\nHugePages_Total:       0\n")
                .unwrap();
        assert_eq!(
            m.iter().map(|r| (r.0.as_str(), r.2.clone())).collect::<Vec<_>>(),
            [("MemTotal", Value::U(24684092)), ("MemFree", Value::U(23957912)), ("HugePages_Total", Value::U(0))]
        );
        let l = parse("loadavg", "0.43 0.90 1.00 1/78 25705\n").unwrap();
        assert_eq!(l.len(), 6);
        assert_eq!(l[1], ("load5".into(), Scalar::F64, Value::F(0.9)));
        assert_eq!(l[4], ("scheduling_entities".into(), Scalar::U64, Value::U(78)));
        let s = parse("stat", "cpu  3 0 5 9 2 0 3 3 0 0\ncpu0 1 0 2 4 1 0 1 1 0 0\nintr 2699 0 0\nctxt 513\n").unwrap();
        assert_eq!(s.len(), 22);
        assert!(s.contains(&("cpu0.idle".into(), Scalar::U64, Value::U(4))));
        assert!(s.contains(&("intr".into(), Scalar::U64, Value::U(2699))));
        let d = parse(
            "diskstats",
            "   7  0 loop0 1 2 3 4 5 6 7 8 9 10 11\n 259 0 nvme0n1 1 2 3 4 5 6 7 8 0 10 11 0 0 0 0\n\
             259 1 nvme0n1p1 1 2 3 4 5 6 7 8 0 10 11 0 0 0 0\n",
        )
        .unwrap();
        assert_eq!(d.len(), 15);
        assert_eq!(d[6], ("nvme0n1.sectors_written".into(), Scalar::U64, Value::U(7)));
    }

    #[test]
    fn a_file_that_breaks_its_format_is_refused_with_the_line() {
        assert_eq!(parse("meminfo", "MemTotal: 12 kB\nMemFree: lots kB\n").unwrap_err().line, 2);
        assert_eq!(parse("meminfo", "MemTotal: 12 MB\n").unwrap_err().line, 1);
        assert_eq!(parse("loadavg", "0.43 0.90\n").unwrap_err().why, "2 fields, not 5");
        assert_eq!(parse("diskstats", " 8 0 sda 1 2\n").unwrap_err().line, 1);
        assert_eq!(parse("vmstat", "").unwrap_err().line, 0);
        assert!(parse("stat", "cpu0 1 x 2 4\n").unwrap_err().why.contains("nice"));
    }

    #[test]
    fn devices_are_left_out_as_node_exporter_leaves_them() {
        for dev in ["ram0", "loop12", "fd0", "sda1", "vdb2", "xvda1", "hda3", "nvme0n1p1", "nvme10n2p33"] {
            assert!(ignored_device(dev), "{dev}");
        }
        for dev in ["sda", "vda", "nvme0n1", "zram0", "dm-0", "md127", "sdaa1", "loop", "nvme0n1p", "mmcblk0"] {
            assert!(!ignored_device(dev), "{dev}");
        }
    }
}
