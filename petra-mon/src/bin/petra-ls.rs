//! `petra-ls`: lists the sets of a metric store with their metadata and latest values, prints a
//! set's history and window statistics, as a table or JSON; from the store's file, or from the
//! `petra-mon` that holds it. See `petra-ls --help`.

use std::path::PathBuf;

use petra_kv::{Config, CreateMode, MetricStore};
use petra_mon::listing::{Query, SetListing, listing, table};

/// Lists the metric sets of a PETRA metric store (in the spirit of ldms_ls): every set with its
/// schema, producer, component, job and latest sample; with --set, one set's latest values, its
/// history (--history) or window statistics (--window). A store that a running petra-mon holds
/// is read through that daemon (--from the address it listens on).
#[derive(Debug, clap::Parser)]
#[command(version, about)]
struct Args {
    /// The metric store's pool file.
    #[arg(required_unless_present = "from", conflicts_with = "from")]
    store: Option<PathBuf>,
    /// Ask the petra-mon listening at ADDR (host:port, as given to its --listen) instead of
    /// opening the file: for a store the daemon holds.
    #[arg(long, value_name = "ADDR")]
    from: Option<String>,
    /// Only this set (`<producer>/<sampler>`).
    #[arg(long)]
    set: Option<String>,
    /// Print the set's samples from the last SECONDS (with --set).
    #[arg(long, value_name = "SECONDS")]
    history: Option<u64>,
    /// Print minimum, maximum, mean and rate per data metric over the last SECONDS (with --set).
    #[arg(long, value_name = "SECONDS")]
    window: Option<u64>,
    /// Print the metric values of the latest sample (with --set, or for every set).
    #[arg(long, short)]
    verbose: bool,
    /// JSON instead of a table.
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
        (None, None) => unreachable!("clap requires the store or --from"),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&sets)?);
    } else {
        print!("{}", table(&sets, args.verbose || args.set.is_some()));
    }
    Ok(())
}

/// The listing, from the store's file.
fn read(path: &PathBuf, query: &Query) -> Result<Vec<SetListing>, BoxError> {
    let store = MetricStore::open(&Config { create: CreateMode::Open, ..Config::new(path) }).map_err(|e| {
        let held = matches!(&e, petra_kv::KvError::Open(petra::error::OpenError::Locked { .. }));
        let hint = if held { " (a running petra-mon holds it: ask it with --from ADDR)" } else { "" };
        format!("{e}{hint}")
    })?;
    let sets = listing(&store, &mut store.session()?, query)?;
    store.close()?;
    Ok(sets)
}

/// The listing, from the petra-mon at `addr` (its /ls endpoint).
fn fetch(addr: &str, query: &Query) -> Result<Vec<SetListing>, BoxError> {
    let base = if addr.contains("://") { addr.to_owned() } else { format!("http://{addr}") };
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
