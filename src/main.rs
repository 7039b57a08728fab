use std::process::ExitCode;

use clap::Parser;
use metahooks::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("metahooks: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            metahooks::telemetry::init(args.log_format);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                let (settings, registry) = metahooks::config::serve_settings(&args)?;
                let server = metahooks::server::Server::start(
                    settings,
                    registry,
                    metahooks::server::Clock::System,
                )
                .await?;
                server.run_until_signal().await
            })
        }
        Command::Render(args) => {
            let output = metahooks::render::render(&args)?;
            print!("{output}");
            Ok(())
        }
        Command::Crds => {
            print!("{}", metahooks::crds::all_yaml()?);
            Ok(())
        }
        Command::Version => {
            println!("metahooks {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
    }
}
