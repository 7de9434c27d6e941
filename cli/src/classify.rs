use std::process::ExitCode;
#[derive(clap::Args)]
pub struct ClassifyArgs {}
pub fn run(_a: ClassifyArgs) -> anyhow::Result<ExitCode> { Ok(ExitCode::SUCCESS) }
