//! `petra-ls`: lists the sets of a metric store with their metadata and latest values, prints a
//! set's last samples and window statistics, as tables or JSON; from the store's file (opened
//! for reading only), or from the `petra-mon` that holds it. See `petra-ls --help`.

use std::path::Path;

use petra_mon::MonError;
use petra_mon::listing::{Query, SetListing, listing, table};
use petra_mon::snapshot;

/// The address of the local petra-mon, asked when no store file is given.
const LOCAL: &str = "127.0.0.1:9464";

/// Lists the metric sets of a PETRA metric store, as ldms_ls lists LDMS's.
///
/// Every set with its schema, producer, component, job and latest sample; with --set, one set's latest values,
/// its last samples (--history) and window statistics (--window). Reads the store's file
/// without writing to it; a store that a running petra-mon holds is read through that daemon
/// (--from the address it listens on). With neither, asks the local petra-mon (127.0.0.1:9464).
#[derive(Debug, clap::Parser)]
#[command(name = "petra-ls", version)]
struct Args {
    /// The metric store's pool file (read only).
    #[arg(conflicts_with = "from")]
    store: Option<std::path::PathBuf>,
    /// Ask the petra-mon listening at ADDR (HOST:PORT or :PORT, as given to its --listen)
    /// [default when no store is given: 127.0.0.1:9464].
    #[arg(long, value_name = "ADDR")]
    from: Option<String>,
    /// Only this set (`<producer>/<sampler>`).
    #[arg(long)]
    set: Option<String>,
    /// Print the set's last N samples (with --set).
    #[arg(long, value_name = "N")]
    history: Option<usize>,
    /// Print minimum, maximum, mean and rate per data metric over the last SECONDS (with --set).
    #[arg(long, value_name = "SECONDS")]
    window: Option<u64>,
    /// Print the metric values of the latest sample (with --set, or for every set).
    #[arg(long, short)]
    verbose: bool,
    /// JSON instead of tables.
    #[arg(long)]
    json: bool,
}

fn main() {
    if let Err(e) = run(<Args as clap::Parser>::parse()) {
        eprintln!("petra-ls: {e}");
        std::process::exit(1);
    }
}

type BoxError = Box<dyn std::error::Error>;

fn run(args: Args) -> Result<(), BoxError> {
    if (args.history.is_some() || args.window.is_some()) && args.set.is_none() {
        return Err("--history and --window need --set".into());
    }
    let query = Query { set: args.set.clone(), history: args.history, window: args.window };
    let sets = match (&args.from, &args.store) {
        (Some(addr), _) => fetch(addr, &query)?,
        (None, Some(path)) => read(path, &query)?,
        (None, None) => fetch(LOCAL, &query).map_err(|e| {
            format!(
                "no store file given, and the local petra-mon did not answer ({e}): give a store file or --from ADDR"
            )
        })?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&sets)?);
    } else {
        print!("{}", table(&sets, args.verbose || args.set.is_some()));
    }
    Ok(())
}

/// The listing, from the store's file, which is opened for reading only.
fn read(path: &Path, query: &Query) -> Result<Vec<SetListing>, BoxError> {
    let store = snapshot::open_metric_store(path).map_err(|e| match e {
        MonError::Held(_) => format!("{e}"),
        e => format!("{}: {e}", path.display()),
    })?;
    let sets = listing(&store, &mut store.session()?, query)?;
    Ok(sets)
}

/// The listing, from the petra-mon at `addr` (its /ls endpoint).
fn fetch(addr: &str, query: &Query) -> Result<Vec<SetListing>, BoxError> {
    let addr = if let Some(port) = addr.strip_prefix(':') { format!("127.0.0.1:{port}") } else { addr.to_owned() };
    let base = if addr.contains("://") { addr.clone() } else { format!("http://{addr}") };
    let url = format!("{}/ls?{}", base.trim_end_matches('/'), query.to_url_query());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(60)))
        .build()
        .into();
    let mut response = agent.get(&url).call().map_err(|e| format!("cannot reach petra-mon at {addr}: {e}"))?;
    // A long history is a long listing: no limit on the body (ureq's default stops at 10 MB).
    let body = response.body_mut().with_config().limit(u64::MAX).read_to_string()?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url} answered {status}: {}", body.trim_end()).into());
    }
    Ok(serde_json::from_str(&body).map_err(|e| format!("{url} did not return a listing: {e}"))?)
}
