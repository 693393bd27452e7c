//! Renders a report from results files, the way `flowsim report` will once the CLI is wired:
//! `cargo run -p reports --example report -- OUT_DIR RESULTS.json... [--baseline OLD.json]`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(out_dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: report OUT_DIR RESULTS.json... [--baseline OLD.json]");
        return ExitCode::from(2);
    };
    let (mut inputs, mut baseline_path) = (Vec::new(), None);
    while let Some(arg) = args.next() {
        if arg == "--baseline" {
            baseline_path = args.next();
        } else {
            inputs.push(arg);
        }
    }
    let loaded: Result<Vec<_>, _> = inputs.iter().map(reports::load_results).collect();
    let baseline = baseline_path.map(reports::load_results).transpose();
    match (loaded, baseline) {
        (Ok(results), Ok(baseline)) => match reports::write_report(&results, baseline.as_ref(), &out_dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
