//! Man pages and shell completions, generated from the binaries' clap definitions (the one
//! source of their options): `completions <shell>` prints a shell's completion script, and the
//! hidden `man-pages <dir>` writes one page per command and subcommand, which
//! `cargo xtask package` ships compressed in `/usr/share/man/man1`.

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;
pub use clap_complete::Shell;

/// Prints `cmd`'s completion script for `shell` on stdout. Rendered first: clap_complete
/// panics on a failed write, and a reader that stops early (`| head`) is no error.
pub fn print_completions(mut cmd: clap::Command, shell: Shell) {
    let name = cmd.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    drop(std::io::stdout().lock().write_all(&script));
}

/// Writes `cmd`'s man pages into `dir` (created if missing): `<name>.1`, and
/// `<name>-<subcommand>.1` for every subcommand that is not hidden.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(cmd, dir)
        .with_context(|| format!("writing man pages to {}", dir.display()))
}
