//! Handoff and merge cost for a 1,000-file / 10 MiB workspace, against plain `tar` crate
//! pack/unpack (no manifest, no checks, no hashing) of the same tree measured in the same run.
//!
//! Run: `cargo bench -p kube-harness-worker --bench handoff` (set `KH_BENCH_DIR=/dev/shm` to
//! keep disk writeback out of the figures).

use kube_harness_protocol::RuntimeToggles;
use kube_harness_workspace::{
    apply, changes_since, pack, pack_with_cache, rehome, snapshot, snapshot_since, unpack,
    ApplyOptions, PackOptions, UnpackOptions, WorkspaceSpec,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const FILES: usize = 1000;
const TOTAL: usize = 10 << 20;
const ROUNDS: usize = 15;

fn build(root: &Path) -> WorkspaceSpec {
    let spec = WorkspaceSpec::canonical(root, RuntimeToggles::default(), Vec::new());
    for m in ["session", "artifacts", "persistent", ".agents"] {
        std::fs::create_dir_all(root.join(m)).unwrap();
    }
    let size = TOTAL / FILES;
    for i in 0..FILES {
        let dir = root.join("session").join(format!("dir{:02}", i % 20));
        std::fs::create_dir_all(&dir).unwrap();
        let content: Vec<u8> = (0..size).map(|j| (i * 31 + j * 7) as u8).collect();
        std::fs::write(dir.join(format!("file{i:04}.dat")), content).unwrap();
    }
    spec
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Times `f` ROUNDS times after one warm-up; `setup` runs untimed before each round.
fn time<S, T>(mut setup: impl FnMut() -> S, mut f: impl FnMut(S) -> T) -> Duration {
    let s = setup();
    std::hint::black_box(f(s));
    (0..ROUNDS)
        .map(|_| {
            let s = setup();
            let t = Instant::now();
            std::hint::black_box(f(s));
            t.elapsed()
        })
        .collect::<Vec<_>>()
        .pipe(median)
}

trait Pipe: Sized {
    fn pipe<R>(self, f: impl FnOnce(Self) -> R) -> R {
        f(self)
    }
}
impl<T> Pipe for T {}

fn plain_tar(root: &Path) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    b.append_dir_all("session", root.join("session")).unwrap();
    b.into_inner().unwrap()
}

fn row(name: &str, ours: Duration, base: Duration, base_name: &str) {
    println!(
        "{name:<34} {:>8.2} ms   {base_name:<30} {:>8.2} ms   ratio {:>5.2}x",
        ms(ours),
        ms(base),
        ms(ours) / ms(base)
    );
}

fn main() {
    // KH_BENCH_DIR=/dev/shm measures CPU and syscall cost without disk writeback noise.
    let scratch = match std::env::var_os("KH_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    println!("scratch: {}", scratch.path().display());
    let worker_root = scratch.path().join("worker");
    let spec = build(&worker_root);
    let opts = UnpackOptions::for_spec(&spec);
    let mut seq = 0usize;
    let mut fresh = || {
        seq += 1;
        scratch.path().join(format!("t{seq}"))
    };

    // Snapshots, against a bare walk + lstat of the same tree.
    let bare_walk = time(
        || (),
        |_| {
            walkdir::WalkDir::new(&worker_root)
                .into_iter()
                .filter_map(|e| e.ok()?.metadata().ok())
                .count()
        },
    );
    let full = time(|| (), |_| snapshot(&spec).unwrap());
    std::thread::sleep(Duration::from_millis(200)); // let the tree settle past the racy window
    let base = snapshot(&spec).unwrap();
    let incremental = time(|| (), |_| snapshot_since(&spec, &base).unwrap());

    // Handoff: pack + unpack, against plain tar pack + unpack.
    let mut archive = Vec::new();
    let packed = pack(&spec, &PackOptions::default(), &mut archive).unwrap();
    let plain = plain_tar(&worker_root);
    let t_pack_cached = time(
        || (),
        |_| {
            let out = Vec::with_capacity(TOTAL + (4 << 20));
            pack_with_cache(&spec, &PackOptions::default(), Some(&base), out).unwrap()
        },
    );
    let t_pack = time(
        || (),
        |_| {
            pack(
                &spec,
                &PackOptions::default(),
                Vec::with_capacity(TOTAL + (4 << 20)),
            )
            .unwrap()
        },
    );
    let t_plain_pack = time(|| (), |_| plain_tar(&worker_root));
    let t_unpack = time(&mut fresh, |dir: PathBuf| {
        unpack(archive.as_slice(), &dir, &opts).unwrap()
    });
    let mut fresh2 = {
        let mut n = 0;
        let s = scratch.path().to_path_buf();
        move || {
            n += 1;
            let d = s.join(format!("p{n}"));
            std::fs::create_dir(&d).unwrap();
            d
        }
    };
    let t_plain_unpack = time(&mut fresh2, |dir: PathBuf| {
        tar::Archive::new(plain.as_slice()).unpack(dir).unwrap()
    });

    // Merge: 100 modified, 50 created, 50 deleted on tier 1; changes_since + apply on a fresh
    // worker copy each round, against plain tar of the touched files + unpack over the worker.
    let tier1_dir = scratch.path().join("tier1");
    let unpacked = unpack(archive.as_slice(), &tier1_dir, &opts).unwrap();
    let tier1 = rehome(&spec, &tier1_dir);
    let s = tier1_dir.join("session");
    let mut touched = Vec::new();
    for i in 0..100 {
        let p = format!("dir{:02}/file{i:04}.dat", i % 20);
        std::fs::write(s.join(&p), vec![i as u8; TOTAL / FILES]).unwrap();
        touched.push(p);
    }
    for i in 0..50 {
        let p = format!("dir{:02}/new{i:04}.dat", i % 20);
        std::fs::write(s.join(&p), vec![i as u8; TOTAL / FILES]).unwrap();
        touched.push(p);
    }
    for i in 100..150 {
        std::fs::remove_file(s.join(format!("dir{:02}/file{i:04}.dat", i % 20))).unwrap();
    }
    let mut change_archive = Vec::new();
    let sent = changes_since(
        &tier1,
        &unpacked.snapshot,
        &PackOptions::default(),
        &mut change_archive,
    )
    .unwrap();
    assert_eq!(sent.changes.len(), 200);
    let t_changes = time(
        || (),
        |_| {
            changes_since(
                &tier1,
                &unpacked.snapshot,
                &PackOptions::default(),
                Vec::new(),
            )
            .unwrap()
        },
    );
    // Each round's worker is a fresh copy; its base is its own settled snapshot, as the base a
    // real worker gets from `pack` describes its own files.
    let worker_copy = |name: String| {
        let root = scratch.path().join(name);
        let spec = rehome(&spec, &root);
        unpack(archive.as_slice(), &root, &opts).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let base = snapshot(&spec).unwrap();
        (spec, base)
    };
    let mut n = 0;
    let t_apply = time(
        || {
            n += 1;
            worker_copy(format!("w{n}"))
        },
        |(wspec, base)| {
            let r = apply(
                &wspec,
                change_archive.as_slice(),
                &base,
                &ApplyOptions::default(),
            )
            .unwrap();
            assert_eq!(r.applied.len(), 200);
        },
    );
    let plain_changes = || {
        let mut b = tar::Builder::new(Vec::new());
        for p in &touched {
            b.append_path_with_name(s.join(p), Path::new("session").join(p))
                .unwrap();
        }
        b.into_inner().unwrap()
    };
    let t_plain_changes = time(|| (), |_| plain_changes());
    let plain_change_archive = plain_changes();
    let mut m = 0;
    let t_plain_apply = time(
        || {
            m += 1;
            let root = scratch.path().join(format!("pw{m}"));
            std::fs::create_dir(&root).unwrap();
            tar::Archive::new(plain.as_slice()).unpack(&root).unwrap();
            root
        },
        |root| {
            let mut a = tar::Archive::new(plain_change_archive.as_slice());
            a.set_overwrite(true);
            a.unpack(&root).unwrap()
        },
    );

    println!(
        "workspace: {FILES} files, {} MiB, archive {} KiB ({} entries)",
        TOTAL >> 20,
        archive.len() >> 10,
        packed.entries
    );
    println!("median of {ROUNDS} rounds");
    row(
        "snapshot (hash every file)",
        full,
        bare_walk,
        "walkdir + lstat only",
    );
    row(
        "snapshot_since (nothing changed)",
        incremental,
        bare_walk,
        "walkdir + lstat only",
    );
    row("pack", t_pack, t_plain_pack, "plain tar pack");
    row(
        "pack_with_cache (settled snapshot)",
        t_pack_cached,
        t_plain_pack,
        "plain tar pack",
    );
    row("unpack", t_unpack, t_plain_unpack, "plain tar unpack");
    row(
        "handoff (pack + unpack)",
        t_pack + t_unpack,
        t_plain_pack + t_plain_unpack,
        "plain tar pack + unpack",
    );
    row(
        "changes_since (200 changes)",
        t_changes,
        t_plain_changes,
        "plain tar of the 150 files",
    );
    row(
        "apply (200 changes)",
        t_apply,
        t_plain_apply,
        "plain tar unpack over worker",
    );
    row(
        "merge (changes_since + apply)",
        t_changes + t_apply,
        t_plain_changes + t_plain_apply,
        "plain tar pack + unpack",
    );
}
