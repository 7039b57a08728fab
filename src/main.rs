use std::process::ExitCode;

use clap::Parser;
use metahooks::cli::{Cli, Command};

/// mimalloc instead of glibc's allocator: a hook call allocates and frees thousands of
/// small JSON nodes across threads, where glibc spent a sixth of the CPU time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::SourceWorker = cli.command {
        // Nothing else runs in a worker: no logging, no runtime.
        let code = metahooks::source::worker::child::main();
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    if let Command::Emulate(args) = &cli.command {
        return emulate(args);
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("metahooks: {}", metahooks::cli::explain(&error));
            ExitCode::FAILURE
        }
    }
}

/// `metahooks emulate`, with exit codes a CI job can tell apart: 0 when the hooks did
/// nothing Metacontroller would object to, 1 when they did (the findings are in the
/// report), 2 when the run itself could not be made (an input file, a registration, the
/// hook URL, a story: the setup, not the hook, is wrong).
fn emulate(args: &metahooks::cli::EmulateArgs) -> ExitCode {
    match metahooks::cli::emulate::emulate(args) {
        Ok((report, clean)) => {
            if let Err(error) = write_out(&report) {
                eprintln!("metahooks: {}", metahooks::cli::explain(&error));
                return ExitCode::from(2);
            }
            if clean {
                ExitCode::SUCCESS
            } else {
                eprintln!("metahooks: the emulation found problems (see findings above)");
                ExitCode::from(1)
            }
        }
        Err(error) => {
            eprintln!("metahooks: {}", metahooks::cli::explain(&error));
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(&args),
        Command::Render(args) => write_out(&metahooks::cli::render::render(&args)?),
        // Answered by `emulate` before `run`, for its exit codes.
        Command::Emulate(_) => Ok(()),
        Command::Crds => write_out(&metahooks::crds::all_yaml()?),
        Command::SourceWorker => Ok(()),
        Command::Version => write_out(&format!("metahooks {}\n", env!("CARGO_PKG_VERSION"))),
    }
}

/// Writes `text` to stdout. A reader that stops early (`metahooks crds | head -1`) is
/// not an error: the command ends quietly, as Unix tools do on a closed pipe.
fn write_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::anyhow!("cannot write to standard output: {error}"))
        }
        _ => Ok(()),
    }
}

/// `metahooks serve`: the hook server (and the push receivers when configured) until
/// SIGTERM or Ctrl-C.
fn serve(args: &metahooks::cli::ServeArgs) -> anyhow::Result<()> {
    use metahooks::cli::environment;
    environment::check(
        environment::process_names(),
        &environment::serve_variables(),
    )?;
    environment::check_log_level(&args.log_level)?;
    // Held to the end: dropping it writes out the log lines still buffered.
    let _log = metahooks::telemetry::init(args.log_format, &args.log_level)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(async move {
        let (settings, registry, receivers) =
            metahooks::cli::config::serve_settings_with_receivers(args)?;
        // Dropped (and stopped) when the server has drained.
        let _receivers = match receivers {
            Some(receivers) => Some(
                metahooks::receivers::start(receivers.clone(), registry.sources())
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "cannot listen on {} for push receivers: {e}",
                            receivers.listen
                        )
                    })?,
            ),
            None => None,
        };
        let server =
            metahooks::server::Server::start(settings, registry, metahooks::server::Clock::System)
                .await?;
        server.run_until_signal().await?;
        anyhow::Ok(())
    });
    // Every answer is back by now. A fetch job still busy on a blocking thread
    // (a slow remote, a hostile repository) must not hold the process past the
    // drain: give blocking work a moment, then exit regardless.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    served
}
