//! `kube-harness classify`: the classifier's command-line face, single-script and batch (`--stdin`).

use crate::toggles::ToggleArgs;
use anyhow::{bail, Context};
use kube_harness_worker::classify::{self, matrix, ClassifyOptions, Policy, RuntimeToggles};
use serde::Deserialize;
use std::io::{self, BufRead, Write};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct ClassifyArgs {
    #[command(flatten)]
    toggles: ToggleArgs,
    /// Pin a capability-matrix version (default: the newest).
    #[arg(long, value_name = "VERSION")]
    matrix: Option<String>,
    /// Read JSON lines `{"script": …, "python"?, "javascript"?, "network"?, "deny"?}` and print one
    /// result per line, in order.
    #[arg(long, conflicts_with_all = ["script", "matrix_dump"])]
    stdin: bool,
    /// Print the capability matrix in use and exit.
    #[arg(long, conflicts_with = "script")]
    matrix_dump: bool,
    /// The script (words after `--` are joined with spaces).
    #[arg(last = true, value_name = "SCRIPT")]
    script: Vec<String>,
}

/// One batch input line; absent fields take the command-line values.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchLine {
    script: String,
    python: Option<bool>,
    javascript: Option<bool>,
    network: Option<bool>,
    deny: Option<Vec<String>>,
    matrix: Option<String>,
}

pub fn run(args: ClassifyArgs) -> anyhow::Result<ExitCode> {
    if let Some(version) = &args.matrix {
        if matrix::get(Some(version)).is_none() {
            bail!(
                "unknown capability matrix version {version:?} (known: {})",
                matrix::versions().join(", ")
            );
        }
    }
    let base = ClassifyOptions {
        runtime: args.toggles.runtime(),
        policy: Policy {
            deny_commands: args.toggles.deny.clone(),
            rule: None,
        },
        matrix: args.matrix.clone(),
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if args.matrix_dump {
        let m = matrix::get(args.matrix.as_deref()).context("no capability matrix is embedded")?;
        serde_json::to_writer_pretty(&mut out, &m.doc)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.stdin {
        batch(&base, io::stdin().lock(), &mut out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.script.is_empty() {
        bail!("no script given: use `kube-harness classify -- SCRIPT` or `--stdin`");
    }
    let result = classify::classify(&args.script.join(" "), &base);
    serde_json::to_writer(&mut out, &result)?;
    writeln!(out)?;
    Ok(ExitCode::SUCCESS)
}

/// Classifies each input line; a malformed line yields `{"error": …}` and the batch goes on.
fn batch(base: &ClassifyOptions, input: impl BufRead, out: &mut impl Write) -> anyhow::Result<()> {
    for (index, line) in input.split(b'\n').enumerate() {
        let line = line.context("reading stdin")?;
        let parsed = std::str::from_utf8(&line)
            .map_err(|e| format!("line {}: not UTF-8: {e}", index + 1))
            .and_then(|text| {
                serde_json::from_str::<BatchLine>(text.trim_end_matches('\r'))
                    .map_err(|e| format!("line {}: {e}", index + 1))
            });
        match parsed {
            Ok(item) => {
                let options = ClassifyOptions {
                    runtime: RuntimeToggles {
                        python: item.python.unwrap_or(base.runtime.python),
                        javascript: item.javascript.unwrap_or(base.runtime.javascript),
                        network: item.network.unwrap_or(base.runtime.network),
                    },
                    policy: Policy {
                        deny_commands: item
                            .deny
                            .unwrap_or_else(|| base.policy.deny_commands.clone()),
                        rule: None,
                    },
                    matrix: item.matrix.or_else(|| base.matrix.clone()),
                };
                serde_json::to_writer(&mut *out, &classify::classify(&item.script, &options))?;
            }
            Err(error) => serde_json::to_writer(&mut *out, &serde_json::json!({ "error": error }))?,
        }
        out.write_all(b"\n")?;
        out.flush()?;
    }
    Ok(())
}
