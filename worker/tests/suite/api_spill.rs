//! A streamed exec's output past the result's cap is kept whole under /artifacts/trace and the
//! result names the file; hostile layouts of /artifacts keep nothing and say why.

use super::api_support::{config, start, start_with};
use kube_harness_worker::api::model::{ExecRequest, ExecResponse, OutputFile};
use sha2::{Digest, Sha256};

const MIB: usize = 1 << 20;

/// 3 MiB on stdout (lines of `y`), 10 bytes on stderr.
const BIG: &str =
    "python3 -c 'import sys; sys.stdout.write(\"y\\n\" * 1572864)'; echo small-err >&2";
/// 2 MiB of `y` lines on stdout.
const TWO_MIB: &str = "python3 -c 'import sys; sys.stdout.write(\"y\\n\" * 1048576)'";

async fn streamed(
    client: &kube_harness_worker::protocol::WorkerClient,
    script: &str,
) -> (String, ExecResponse) {
    let mut streamed = String::new();
    let response = client
        .exec_stream(&ExecRequest::new(script), |line| {
            if let kube_harness_worker::api::model::ExecStreamLine::Stdout { data } = line {
                streamed.push_str(data);
            }
        })
        .await
        .unwrap();
    (streamed, response)
}

fn file_bytes(w: &super::api_support::TestWorker, f: &OutputFile) -> Vec<u8> {
    std::fs::read(w.host(&f.path)).unwrap()
}

#[tokio::test]
async fn output_past_the_cap_is_kept_whole_in_artifacts_and_named_in_the_result() {
    let w = start().await;
    let (text, r) = streamed(&w.client, BIG).await;
    assert_eq!(text.len(), 3 * MIB, "the whole output streamed");
    assert!(
        r.outcome.truncated && r.outcome.stdout.len() <= MIB,
        "the result's copy is capped"
    );
    let f = r
        .stdout_file
        .clone()
        .expect("stdoutFile names the kept output");
    assert!(
        f.path.starts_with("/artifacts/trace/") && f.path.ends_with(".stdout.txt"),
        "{f:?}"
    );
    assert_eq!((f.bytes, f.complete), (3 * MIB as u64, true));
    let kept = file_bytes(&w, &f);
    assert_eq!(
        kept,
        text.as_bytes(),
        "the file holds exactly what streamed"
    );
    assert_eq!(hex::encode(Sha256::digest(&kept)), f.sha256);
    assert!(
        r.stderr_file.is_none(),
        "stderr stayed under the cap: no file"
    );
    assert!(r.output_problems.is_empty(), "{:?}", r.output_problems);
    // The file is the worker's, not the command's: no file event names it.
    assert!(
        !r.events
            .iter()
            .any(|e| serde_json::to_string(e).unwrap().contains(&f.path)),
        "no file event for the kept output"
    );
    // The files API reads it back like any file.
    let mut back = Vec::new();
    w.client.read_file_into(&f.path, &mut back).await.unwrap();
    assert_eq!(back.len(), 3 * MIB);

    // A plain (whole) exec is capped as before and keeps nothing.
    let plain = w.client.exec(&ExecRequest::new(BIG)).await.unwrap();
    assert!(plain.outcome.truncated && plain.stdout_file.is_none());
    // Small output: nothing kept either.
    let (_, small) = streamed(&w.client, "echo hi").await;
    assert!(small.stdout_file.is_none() && small.stderr_file.is_none());
}

#[tokio::test]
async fn a_file_stops_at_max_file_bytes_and_says_it_is_incomplete() {
    let (tmp, mut config) = config();
    config.max_file_bytes = (MIB + MIB / 2) as u64;
    let w = start_with(tmp, config).await;
    let (text, r) = streamed(&w.client, BIG).await;
    assert_eq!(text.len(), 3 * MIB, "the stream itself is not cut");
    let f = r.stdout_file.expect("kept up to the limit");
    assert_eq!((f.bytes, f.complete), ((MIB + MIB / 2) as u64, false));
    assert_eq!(file_bytes(&w, &f), text.as_bytes()[..MIB + MIB / 2]);
}

#[tokio::test]
async fn a_planted_symlink_or_file_at_artifacts_trace_keeps_nothing_and_writes_nowhere() {
    let w = start().await;
    // The command itself replaces /artifacts/trace with a symlink into /session, then floods.
    let (_, r) = streamed(
        &w.client,
        &format!("mkdir -p /session/victim && rm -rf /artifacts/trace && ln -s /session/victim /artifacts/trace && {TWO_MIB}"),
    )
    .await;
    assert!(r.stdout_file.is_none(), "nothing kept through a symlink");
    assert!(
        r.output_problems
            .iter()
            .any(|p| p.contains("stdout") && p.contains("/artifacts/trace")),
        "{:?}",
        r.output_problems
    );
    assert_eq!(
        std::fs::read_dir(w.host("/session/victim"))
            .unwrap()
            .count(),
        0,
        "nothing written where the symlink pointed"
    );
    // A plain file in the way: the same.
    let (_, r) = streamed(
        &w.client,
        &format!("rm -rf /artifacts/trace && echo x > /artifacts/trace && {TWO_MIB} >&2"),
    )
    .await;
    assert!(r.stderr_file.is_none());
    assert!(
        r.output_problems.iter().any(|p| p.contains("stderr")),
        "{:?}",
        r.output_problems
    );
    assert_eq!(std::fs::read(w.host("/artifacts/trace")).unwrap(), b"x\n");
}

#[tokio::test]
async fn an_unfinished_character_at_the_end_still_streams() {
    let w = start().await;
    let (text, r) = streamed(&w.client, r"printf 'abc\303'").await;
    assert_eq!(text, "abc\u{fffd}", "what streamed is what the result says");
    assert_eq!(r.outcome.stdout, "abc\u{fffd}");
}
