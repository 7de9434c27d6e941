//! `kube-harness crdgen`: the CRDs as YAML, generated from the Rust types in crds/. Prints every
//! CRD as one multi-document stream, or writes one file per CRD into each `--out` directory.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct CrdgenArgs {
    /// Write `<plural>.<group>.yaml` files into this directory (repeatable) instead of stdout.
    #[arg(long = "out")]
    out: Vec<PathBuf>,
}

pub fn run(args: CrdgenArgs) -> anyhow::Result<ExitCode> {
    let crds = kube_harness_crds::crds();
    if args.out.is_empty() {
        for crd in &crds {
            print!("---\n{}", kube_harness_crds::to_yaml(crd)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    for dir in &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for crd in &crds {
            let path = dir.join(kube_harness_crds::file_name(crd));
            std::fs::write(&path, kube_harness_crds::to_yaml(crd)?)
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
