//! The `ax` binary: parse the command line, set up logging, hand over to the library.

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    let cli = ax::cli::Cli::parse();
    ax::cli::init_tracing(cli.json_logs(), cli.log_filter());
    match ax::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
