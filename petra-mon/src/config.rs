//! The daemon's settings: each from its flag if given, else from the configuration file (TOML,
//! `--config`), else its default. SIGHUP reads the file again; flags still win.
//!
//! ```toml
//! # /etc/petra-mon.toml
//! store = "/var/lib/petra-mon/petra-mon.pool"   # default: the state directory's (below)
//! listen = ":9464"
//! interval_ms = 1000
//! sync_every = "1s"
//! samplers = ["meminfo", "vmstat", "loadavg", "stat", "diskstats"]
//! component_id = 12
//! job_id = 0
//! retention = "7d"
//! max_size = "4GiB"
//! remote_write_url = "http://prometheus:9090/api/v1/write"
//! remote_write_labels = { job = "petra-mon" }
//! ```

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use petra::DurabilityPolicy;
use serde::Deserialize;

use crate::MonError;
use crate::expose::Naming;
use crate::families::Names;
use crate::proc::SAMPLERS;
use crate::remote_write;
use crate::sampling::Producer;

/// The default address: every IPv4 interface, port 9464.
pub const DEFAULT_LISTEN: &str = ":9464";
/// The default retention: samples older than this are removed.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// The default maximum size of a new store's file.
pub const DEFAULT_MAX_SIZE: u64 = 4 << 30;
/// The store's file name in the state directory, when no store is given.
pub const STORE_FILE: &str = "petra-mon.pool";
/// The default durability policy: a power-safe point every second.
pub const DEFAULT_SYNC_EVERY: DurabilityPolicy = DurabilityPolicy::Periodic(Duration::from_secs(1));

/// Settings as the configuration file gives them (all optional).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The store's file.
    pub store: Option<PathBuf>,
    /// Where to serve `/metrics` and `/ls` (`:9464`, `127.0.0.1:9464`, `off`).
    pub listen: Option<String>,
    /// Milliseconds between rounds.
    pub interval_ms: Option<u64>,
    /// Time between power-safe points (`1s`, `250ms`; `0` or `immediate`: each sample; `off`).
    pub sync_every: Option<String>,
    /// Samplers.
    pub samplers: Option<Vec<String>>,
    /// Producer name.
    pub producer: Option<String>,
    /// Component id.
    pub component_id: Option<u64>,
    /// Job id.
    pub job_id: Option<u64>,
    /// Samples older than this go (`7d`, `12h`; `off`).
    pub retention: Option<String>,
    /// Keep at most this many samples per set.
    pub keep: Option<usize>,
    /// The maximum size of a new store's file (`4GiB`).
    pub max_size: Option<String>,
    /// The prefix of the families of `/proc`.
    pub prefix: Option<String>,
    /// How meminfo's fields are spelled.
    pub names: Option<Names>,
    /// A Prometheus remote-write receiver.
    pub remote_write_url: Option<String>,
    /// Labels added to every series pushed.
    pub remote_write_labels: Option<BTreeMap<String, String>>,
    /// The log file (default: standard error).
    pub log_file: Option<PathBuf>,
    /// The log level: error, warn, info, debug or trace.
    pub log_level: Option<String>,
}

impl FileConfig {
    /// Reads the file at `path`.
    pub fn read(path: &Path) -> Result<FileConfig, MonError> {
        let text = std::fs::read_to_string(path).map_err(|source| MonError::Read { path: path.to_owned(), source })?;
        toml::from_str(&text).map_err(|e| MonError::Config(format!("{}: {e}", path.display())))
    }
}

/// Every setting, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The store's file.
    pub store: PathBuf,
    /// Whether it is the default one, in the state directory (which is created if missing).
    pub store_in_state_dir: bool,
    /// Where to serve, if anywhere (an address `TcpListener` binds).
    pub listen: Option<String>,
    /// Time between rounds.
    pub interval: Duration,
    /// When a stored sample survives a power loss.
    pub durability: DurabilityPolicy,
    /// Samplers.
    pub samplers: Vec<String>,
    /// Who samples.
    pub producer: Producer,
    /// Samples older than this go.
    pub retention: Option<Duration>,
    /// At most this many samples per set.
    pub keep: Option<usize>,
    /// The maximum size of a new store's file.
    pub max_size: u64,
    /// How families are named.
    pub naming: Naming,
    /// The remote-write sender's, if there is a receiver.
    pub remote_write: Option<remote_write::Settings>,
    /// The log file (`None`: standard error).
    pub log_file: Option<PathBuf>,
    /// The log level.
    pub log_level: tracing::Level,
}

/// `:9464` and `9464` as every IPv4 interface's port 9464 (`[::]:9464` for IPv6 too), `off`
/// (or `none`, or nothing) as no address; anything else as given.
pub fn listen_address(s: &str) -> Result<Option<String>, MonError> {
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("off") || s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let port = s.strip_prefix(':').unwrap_or(s);
    if port.bytes().all(|b| b.is_ascii_digit()) {
        let port: u16 = port.parse().map_err(|_| MonError::Config(format!("--listen {s}: no such port")))?;
        return Ok(Some(format!("0.0.0.0:{port}")));
    }
    if !s.contains(':') {
        return Err(MonError::Config(format!("--listen {s}: give HOST:PORT, :PORT or PORT")));
    }
    Ok(Some(s.to_owned()))
}

/// A size: bytes, or with a unit (`K`, `KiB`, `M`, `MiB`, `G`, `GiB`, `T`, `TiB`: powers of
/// 1024 all).
pub fn size(s: &str) -> Result<u64, MonError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(MonError::Config(format!("size {s:?}: use bytes or K, M, G, T (powers of 1024)"))),
    };
    let n: u64 = n.parse().map_err(|_| MonError::Config(format!("size {s:?} is not a number")))?;
    n.checked_mul(1 << shift).ok_or_else(|| MonError::Config(format!("size {s:?} is too large")))
}

/// A retention: a duration (`7d`, `36h`, `90min`), or `off`.
pub fn retention(s: &str) -> Result<Option<Duration>, MonError> {
    if s.eq_ignore_ascii_case("off") || s.trim() == "0" {
        return Ok(None);
    }
    humantime::parse_duration(s).map(Some).map_err(|e| MonError::Config(format!("retention {s:?}: {e}")))
}

/// How often samples are made to survive a power loss: a duration (`1s`, `250ms`) between
/// power-safe points, `0` or `immediate` (each sample acknowledged only once synced), or `off`
/// (no safe points: a sample survives the death of the process, not of the machine).
pub fn sync_every(s: &str) -> Result<DurabilityPolicy, MonError> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("off") {
        return Ok(DurabilityPolicy::Process);
    }
    if t == "0" || t.eq_ignore_ascii_case("immediate") {
        return Ok(DurabilityPolicy::Immediate);
    }
    let every = humantime::parse_duration(t).map_err(|e| {
        MonError::Config(format!(
            "--sync-every {s:?} is not a duration ({e}): give one (1s, 250ms), 0 or immediate (each sample synced \
             before it counts as stored), or off (no power-safe points)"
        ))
    })?;
    if every.is_zero() {
        return Ok(DurabilityPolicy::Immediate);
    }
    if every < Duration::from_millis(1) {
        return Err(MonError::Config(format!(
            "--sync-every {s:?} is under 1 ms: for each sample, give 0 or immediate"
        )));
    }
    Ok(DurabilityPolicy::Periodic(every))
}

/// The directory the store's file goes in when none is given, from the environment: systemd's
/// `$STATE_DIRECTORY` (its first directory, for `StateDirectory=`), else
/// `$XDG_STATE_HOME/petra-mon`, else `$HOME/.local/state/petra-mon`. Empty values are not set,
/// and relative ones are ignored as the XDG base directory specification says.
pub fn state_dir(
    state_directory: Option<OsString>,
    xdg_state_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf, MonError> {
    let absolute = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    // systemd joins several StateDirectory= entries with colons.
    let systemd = state_directory.and_then(|v| {
        let v = v.into_string().ok()?;
        v.split(':').next().map(OsString::from)
    });
    if let Some(dir) = absolute(systemd) {
        return Ok(dir);
    }
    if let Some(dir) = absolute(xdg_state_home) {
        return Ok(dir.join("petra-mon"));
    }
    if let Some(home) = absolute(home) {
        return Ok(home.join(".local/state/petra-mon"));
    }
    Err(MonError::Config(
        "no state directory for the store: none of STATE_DIRECTORY, XDG_STATE_HOME and HOME is set; give --store"
            .into(),
    ))
}

/// The store's file when none is given: [`STORE_FILE`] in this process's [`state_dir`].
pub fn default_store() -> Result<PathBuf, MonError> {
    let var = |name| std::env::var_os(name);
    Ok(state_dir(var("STATE_DIRECTORY"), var("XDG_STATE_HOME"), var("HOME"))?.join(STORE_FILE))
}

/// `KEY=VALUE` as a label.
pub fn label(s: &str) -> Result<(String, String), MonError> {
    let (k, v) = s.split_once('=').ok_or_else(|| MonError::Config(format!("label {s:?}: give NAME=VALUE")))?;
    let valid = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && !k.starts_with("__")
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(MonError::Config(format!("label name {k:?} is not a Prometheus label name")));
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// This machine's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map_or("localhost".into(), |h| h.trim().to_owned())
}

/// What the flags give (each `None` if not given).
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// See [`FileConfig`]'s fields, of the same names.
    pub store: Option<PathBuf>,
    #[allow(missing_docs)]
    pub listen: Option<String>,
    #[allow(missing_docs)]
    pub interval_ms: Option<u64>,
    #[allow(missing_docs)]
    pub sync_every: Option<String>,
    #[allow(missing_docs)]
    pub samplers: Option<Vec<String>>,
    #[allow(missing_docs)]
    pub producer: Option<String>,
    #[allow(missing_docs)]
    pub component_id: Option<u64>,
    #[allow(missing_docs)]
    pub job_id: Option<u64>,
    #[allow(missing_docs)]
    pub retention: Option<String>,
    #[allow(missing_docs)]
    pub keep: Option<usize>,
    #[allow(missing_docs)]
    pub max_size: Option<String>,
    #[allow(missing_docs)]
    pub prefix: Option<String>,
    #[allow(missing_docs)]
    pub names: Option<Names>,
    #[allow(missing_docs)]
    pub remote_write_url: Option<String>,
    /// `KEY=VALUE` each.
    pub remote_write_labels: Vec<String>,
    #[allow(missing_docs)]
    pub log_file: Option<PathBuf>,
    #[allow(missing_docs)]
    pub log_level: Option<String>,
}

impl Settings {
    /// The settings the flags and the file give, checked.
    pub fn resolve(flags: &Flags, file: &FileConfig) -> Result<Settings, MonError> {
        let f = file.clone();
        let interval_ms = flags.interval_ms.or(f.interval_ms).unwrap_or(1000);
        if interval_ms == 0 {
            return Err(MonError::Config("the interval must be at least 1 ms".into()));
        }
        let durability = match flags.sync_every.as_deref().or(f.sync_every.as_deref()) {
            Some(s) => sync_every(s)?,
            None => DEFAULT_SYNC_EVERY,
        };
        let samplers = flags.samplers.clone().or(f.samplers).unwrap_or_else(|| SAMPLERS.map(String::from).to_vec());
        crate::sampling::check_samplers(&samplers)?;
        let listen = match flags.listen.as_deref().or(f.listen.as_deref()) {
            Some(s) => listen_address(s)?,
            None => listen_address(DEFAULT_LISTEN)?,
        };
        let retention = match flags.retention.as_deref().or(f.retention.as_deref()) {
            Some(s) => retention(s)?,
            None => Some(DEFAULT_RETENTION),
        };
        let max_size = match flags.max_size.as_deref().or(f.max_size.as_deref()) {
            Some(s) => size(s)?,
            None => DEFAULT_MAX_SIZE,
        };
        if max_size < 32 << 20 {
            return Err(MonError::Config(format!("the maximum size {max_size} is under 32 MiB")));
        }
        let prefix = flags.prefix.clone().or(f.prefix).unwrap_or_else(|| "node".into());
        let prefix_ok = prefix.is_empty()
            || (!prefix.starts_with(|c: char| c.is_ascii_digit())
                && prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        if !prefix_ok {
            return Err(MonError::Config(format!("prefix {prefix:?} is not the start of a metric name")));
        }
        let producer_name = flags.producer.clone().or(f.producer).unwrap_or_else(hostname);
        let producer = Producer {
            component_id: flags.component_id.or(f.component_id).unwrap_or(0),
            job_id: flags.job_id.or(f.job_id).unwrap_or(0),
            interval_ns: interval_ms * 1_000_000,
            name: producer_name.clone(),
        };
        let remote_write = match flags.remote_write_url.clone().or(f.remote_write_url) {
            Some(url) => {
                // The HTTP client is built without TLS (as petra-ls's is): a receiver behind https
                // is reached through a local TLS proxy.
                if !url.starts_with("http://") {
                    return Err(MonError::Config(format!(
                        "remote write URL {url:?}: give an http:// URL (this build has no TLS; for https, a local TLS proxy)"
                    )));
                }
                let mut rw = remote_write::Settings::new(&url);
                rw.labels.insert("instance".into(), producer_name);
                rw.labels.insert("job".into(), "petra-mon".into());
                for (k, v) in f.remote_write_labels.unwrap_or_default() {
                    let (k, v) = label(&format!("{k}={v}"))?;
                    rw.labels.insert(k, v);
                }
                for l in &flags.remote_write_labels {
                    let (k, v) = label(l)?;
                    rw.labels.insert(k, v);
                }
                rw.interval =
                    Duration::from_millis(interval_ms).clamp(Duration::from_millis(10), Duration::from_secs(1));
                Some(rw)
            }
            None => None,
        };
        let log_level = match flags.log_level.as_deref().or(f.log_level.as_deref()) {
            Some(l) => l
                .parse()
                .map_err(|_| MonError::Config(format!("log level {l:?}: use error, warn, info, debug or trace")))?,
            None => tracing::Level::INFO,
        };
        let given = flags.store.clone().or(f.store);
        let store_in_state_dir = given.is_none();
        let store = match given {
            Some(store) => store,
            None => default_store()?,
        };
        Ok(Settings {
            store,
            store_in_state_dir,
            listen,
            interval: Duration::from_millis(interval_ms),
            durability,
            samplers,
            producer,
            retention,
            keep: flags.keep.or(f.keep),
            max_size,
            naming: Naming { prefix, names: flags.names.or(f.names).unwrap_or_default() },
            remote_write,
            log_file: flags.log_file.clone().or(f.log_file),
            log_level,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_what_prometheus_users_write() {
        assert_eq!(listen_address(":9465").unwrap().as_deref(), Some("0.0.0.0:9465"));
        assert_eq!(listen_address("9465").unwrap().as_deref(), Some("0.0.0.0:9465"));
        assert_eq!(listen_address("127.0.0.1:9465").unwrap().as_deref(), Some("127.0.0.1:9465"));
        assert_eq!(listen_address("[::1]:9465").unwrap().as_deref(), Some("[::1]:9465"));
        assert_eq!(listen_address("off").unwrap(), None);
        assert!(listen_address(":99999").is_err());
        assert!(listen_address("localhost").is_err());
    }

    #[test]
    fn sizes_and_retentions_read_as_written() {
        assert_eq!(size("4GiB").unwrap(), 4 << 30);
        assert_eq!(size("512M").unwrap(), 512 << 20);
        assert_eq!(size("1048576").unwrap(), 1 << 20);
        assert!(size("4 parsecs").is_err());
        assert_eq!(retention("7d").unwrap(), Some(Duration::from_secs(7 * 86400)));
        assert_eq!(retention("off").unwrap(), None);
        assert!(label("__name__=x").is_err() && label("job=a=b").unwrap() == ("job".into(), "a=b".into()));
    }

    #[test]
    fn sync_every_takes_a_duration_immediate_or_off() {
        assert_eq!(sync_every("1s").unwrap(), DurabilityPolicy::Periodic(Duration::from_secs(1)));
        assert_eq!(sync_every("250ms").unwrap(), DurabilityPolicy::Periodic(Duration::from_millis(250)));
        for immediate in ["0", "0s", "immediate", "Immediate"] {
            assert_eq!(sync_every(immediate).unwrap(), DurabilityPolicy::Immediate, "{immediate}");
        }
        assert_eq!(sync_every("off").unwrap(), DurabilityPolicy::Process);
        let e = sync_every("soon").unwrap_err().to_string();
        assert!(e.contains("--sync-every \"soon\"") && e.contains("immediate") && e.contains("off"), "{e}");
        assert!(sync_every("-1s").is_err() && sync_every("").is_err());
        assert!(sync_every("10us").unwrap_err().to_string().contains("under 1 ms"));
    }

    #[test]
    fn the_state_directory_is_systemds_then_xdgs_then_homes() {
        let o = |s: &str| Some(OsString::from(s));
        let dir = |a, b, c| state_dir(a, b, c).ok();
        assert_eq!(dir(o("/var/lib/petra-mon"), o("/x"), o("/h")), Some("/var/lib/petra-mon".into()));
        assert_eq!(dir(o("/var/lib/a:/var/lib/b"), None, None), Some("/var/lib/a".into()));
        assert_eq!(dir(None, o("/x"), o("/h")), Some("/x/petra-mon".into()));
        assert_eq!(dir(o(""), o("relative"), o("/h")), Some("/h/.local/state/petra-mon".into()));
        assert_eq!(dir(None, None, None), None);
        assert!(state_dir(None, None, o("")).unwrap_err().to_string().contains("give --store"));
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let file: FileConfig = toml::from_str(
            "interval_ms = 250\njob_id = 7\nlisten = \":9500\"\nretention = \"2h\"\nremote_write_url = \"http://r:9090/api/v1/write\"\nremote_write_labels = { job = \"fleet\" }\n",
        )
        .unwrap();
        let flags = Flags { job_id: Some(9), producer: Some("n1".into()), ..Flags::default() };
        let s = Settings::resolve(&flags, &file).unwrap();
        assert_eq!(
            (s.interval, s.producer.job_id, s.listen.as_deref()),
            (Duration::from_millis(250), 9, Some("0.0.0.0:9500"))
        );
        assert_eq!(s.retention, Some(Duration::from_secs(7200)));
        assert_eq!((s.durability, s.store.file_name()), (DEFAULT_SYNC_EVERY, Some(STORE_FILE.as_ref())));
        let rw = s.remote_write.unwrap();
        assert_eq!(rw.labels.get("job").map(String::as_str), Some("fleet"));
        assert_eq!(rw.labels.get("instance").map(String::as_str), Some("n1"));
        let d = Settings::resolve(&Flags::default(), &FileConfig::default()).unwrap();
        assert_eq!(
            (d.retention, d.max_size, d.listen.as_deref()),
            (Some(DEFAULT_RETENTION), DEFAULT_MAX_SIZE, Some("0.0.0.0:9464"))
        );
        assert!(toml::from_str::<FileConfig>("intervall_ms = 3").is_err());
        let file: FileConfig = toml::from_str("sync_every = \"off\"\nstore = \"/s/m.pool\"").unwrap();
        let s = Settings::resolve(&Flags { sync_every: Some("0".into()), ..Flags::default() }, &file).unwrap();
        assert_eq!((s.durability, s.store), (DurabilityPolicy::Immediate, "/s/m.pool".into()));
        let s = Settings::resolve(&Flags::default(), &file).unwrap();
        assert_eq!(s.durability, DurabilityPolicy::Process);
        let https = Flags { remote_write_url: Some("https://r/api/v1/write".into()), ..Flags::default() };
        assert!(Settings::resolve(&https, &FileConfig::default()).unwrap_err().to_string().contains("no TLS"));
    }
}

#[cfg(test)]
mod dist {
    use super::*;

    #[test]
    fn the_example_configuration_file_is_valid() {
        let file: FileConfig = toml::from_str(include_str!("../dist/petra-mon.toml")).unwrap();
        let s = Settings::resolve(&Flags::default(), &file).unwrap();
        assert_eq!(s.listen.as_deref(), Some("0.0.0.0:9464"));
        assert_eq!((s.retention, s.max_size), (Some(DEFAULT_RETENTION), DEFAULT_MAX_SIZE));
        assert_eq!(s.durability, DEFAULT_SYNC_EVERY);
    }

    #[test]
    fn the_unit_keeps_the_store_in_its_state_directory() {
        let unit = include_str!("../dist/petra-mon.service");
        assert!(unit.contains("\nStateDirectory=petra-mon\n"), "{unit}");
        let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
        assert!(!exec.contains("--store"), "the store follows StateDirectory=: {exec}");
        let dir = state_dir(Some("/var/lib/petra-mon".into()), None, None).unwrap();
        assert_eq!(dir.join(STORE_FILE), Path::new("/var/lib/petra-mon/petra-mon.pool"));
    }
}
