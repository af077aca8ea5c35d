//! `talaria trust [DIR]`: trusts a folder (and its subfolders) so sessions there load its own
//! instructions, skills, configuration and hooks; `--revoke` forgets a decision, `--list`
//! shows them. Decisions live in `$TALARIA_HOME/trusted_folders.json`.

use std::io::Write;
use std::path::PathBuf;

/// `talaria trust`'s arguments.
#[derive(Debug, clap::Args)]
pub struct TrustArgs {
    /// The folder (default: the current directory).
    dir: Option<PathBuf>,
    /// Forget the decision recorded for the folder (trusted or declined).
    #[arg(long, conflicts_with = "list")]
    revoke: bool,
    /// List the trusted and declined folders.
    #[arg(long)]
    list: bool,
}

pub fn run(args: TrustArgs) -> std::process::ExitCode {
    let home = talaria_engine::default_home(&|key| std::env::var(key).ok());
    let mut out = std::io::stdout();
    let dir = match args.dir.map_or_else(std::env::current_dir, Ok) {
        Ok(dir) => dir,
        Err(e) => return failed(&format!("no current directory: {e}")),
    };
    let result = if args.list {
        list(&home, &mut out)
    } else if args.revoke {
        revoke(&home, &dir, &mut out)
    } else {
        trust(&home, &dir, &mut out)
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => failed(&e.to_string()),
    }
}

fn failed(why: &str) -> std::process::ExitCode {
    let _ = writeln!(std::io::stderr(), "talaria trust: {why}");
    std::process::ExitCode::FAILURE
}

fn trust(
    home: &std::path::Path,
    dir: &std::path::Path,
    out: &mut impl Write,
) -> Result<(), talaria_engine::TrustError> {
    let files = talaria_engine::trust_folder(home, dir)?;
    let _ = writeln!(out, "trusted {} and its subfolders", dir.display());
    for file in files {
        let _ = writeln!(
            out,
            "accepted {} as it is now (sha256 {})",
            file.path.display(),
            &file.sha256[..16]
        );
    }
    Ok(())
}

fn revoke(
    home: &std::path::Path,
    dir: &std::path::Path,
    out: &mut impl Write,
) -> Result<(), talaria_engine::TrustError> {
    match talaria_engine::revoke_folder(home, dir)? {
        None => Err(talaria_engine::TrustError::Refused(format!(
            "nothing is recorded for {}{}",
            dir.display(),
            covering(home, dir)
        ))),
        Some(after) => {
            let _ = writeln!(out, "forgot the decision for {}", dir.display());
            if let talaria_engine::TrustStanding::Trusted(folder, _) = after {
                let _ = writeln!(
                    out,
                    "it is still trusted through {} (revoke that to untrust it)",
                    folder.display()
                );
            }
            Ok(())
        }
    }
}

/// What covers `dir` from above, said after "nothing is recorded for DIR".
fn covering(home: &std::path::Path, dir: &std::path::Path) -> String {
    let resolved = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    match talaria_engine::TrustStore::new(home)
        .read()
        .map(|file| file.standing(&resolved))
    {
        Ok(talaria_engine::TrustStanding::Trusted(folder, _)) => {
            format!("; it is trusted through {}", folder.display())
        }
        Ok(talaria_engine::TrustStanding::Declined(folder)) => {
            format!("; it is declined through {}", folder.display())
        }
        _ => String::new(),
    }
}

fn list(home: &std::path::Path, out: &mut impl Write) -> Result<(), talaria_engine::TrustError> {
    let file = talaria_engine::TrustStore::new(home).read()?;
    for (folder, entry) in &file.folders {
        let _ = writeln!(
            out,
            "trusted  {folder} ({} instruction file(s) accepted)",
            entry.instructions.len()
        );
    }
    for folder in &file.declined {
        let _ = writeln!(out, "declined {folder}");
    }
    if file.folders.is_empty() && file.declined.is_empty() {
        let _ = writeln!(out, "no folder is trusted");
    }
    Ok(())
}
