//! `PUT` and `GET /v1/archive`: a directory round-trips as tar, and hostile archives are refused
//! whole with nothing written: entries that climb out, absolute ones, hard links, devices and
//! fifos, entries below a symlink (the archive's own or one a command planted), a file where a
//! directory is; a download never follows a symlink and leaves special files out.

use super::api_support::{config, start, start_with};
use kube_harness_worker::api::model::code;
use kube_harness_worker::api::WorkerClientError;
use std::collections::BTreeMap;
use std::path::Path;

fn api_code(e: &WorkerClientError) -> (u16, &str) {
    (e.status().unwrap_or(0), e.code().unwrap_or(""))
}

/// Every path under `dir` with what it is: file contents, `dir`, or `-> target`.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    walkdir::WalkDir::new(dir)
        .min_depth(1)
        .follow_links(false)
        .into_iter()
        .flatten()
        .map(|e| {
            let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
            let ft = e.file_type();
            let what = if ft.is_symlink() {
                format!("-> {}", std::fs::read_link(e.path()).unwrap().display())
            } else if ft.is_dir() {
                "dir".to_string()
            } else if ft.is_file() {
                String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()).into_owned()
            } else {
                "special".to_string()
            };
            (rel, what)
        })
        .collect()
}

/// One raw entry: name bytes, type, link name bytes, data.
type RawEntry<'a> = (&'a [u8], tar::EntryType, &'a [u8], &'a [u8]);

/// A tar with entries written raw: any name bytes and any type, as an attacker would.
fn raw_tar(entries: &[RawEntry<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, kind, link, data) in entries {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link);
        h.set_entry_type(*kind);
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap()
}

#[tokio::test]
async fn a_directory_round_trips_and_a_download_does_not_follow_symlinks() {
    let w = start().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "host secret").unwrap();
    let src = w.host("/session/src");
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("top.txt"), "top").unwrap();
    std::fs::write(src.join("a/b/deep.txt"), "deep").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), src.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.path(), src.join("dirlink")).unwrap();
    let fifo =
        std::ffi::CString::new(src.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);

    let mut tar_bytes = Vec::new();
    w.client
        .read_archive_into("/session/src", &mut tar_bytes)
        .await
        .unwrap();
    // The archive holds the symlinks as symlinks (never their targets' contents) and no fifo.
    let mut names = Vec::new();
    let mut archive = tar::Archive::new(&tar_bytes[..]);
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().display().to_string();
        let mut body = String::new();
        std::io::Read::read_to_string(&mut e, &mut body).unwrap();
        assert!(!body.contains("host secret"), "{name} carried a host file");
        names.push(name);
    }
    names.sort();
    assert_eq!(
        names,
        ["a", "a/b", "a/b/deep.txt", "dirlink", "link", "top.txt"]
    );

    // Back in, elsewhere: the same tree (minus the fifo); the symlinks are symlinks again.
    let up = w
        .client
        .write_archive("/session/copy", tar_bytes.clone())
        .await
        .unwrap();
    assert_eq!(up.entries, 6);
    assert!(up
        .events
        .iter()
        .all(|e| e.data["source"] == "upload" || e.kind == "harness.file.truncated"));
    let mut want = tree(&src);
    want.remove("fifo");
    assert_eq!(tree(&w.host("/session/copy")), want);
    assert_eq!(tree(outside.path()).len(), 1, "nothing written outside");
}

#[tokio::test]
async fn hostile_archives_are_refused_whole_and_write_nothing() {
    let w = start().await;
    std::fs::create_dir(w.host("/session/dst")).unwrap();
    std::fs::write(w.host("/session/dst/kept"), "kept").unwrap();
    let outside = tempfile::tempdir().unwrap();
    // A symlink a command planted in the session, to a host directory.
    std::os::unix::fs::symlink(outside.path(), w.host("/session/dst/planted")).unwrap();
    let ok: RawEntry = (b"fine.txt", tar::EntryType::Regular, b"", b"fine");
    let cases: Vec<(&str, Vec<u8>, (u16, &str))> = vec![
        (
            "climbs out",
            raw_tar(&[ok, (b"../../escape", tar::EntryType::Regular, b"", b"x")]),
            (400, code::BAD_ARCHIVE),
        ),
        (
            "absolute",
            raw_tar(&[ok, (b"/etc/evil", tar::EntryType::Regular, b"", b"x")]),
            (400, code::BAD_ARCHIVE),
        ),
        (
            "hard link",
            raw_tar(&[ok, (b"hl", tar::EntryType::Link, b"/etc/passwd", b"")]),
            (400, code::BAD_ARCHIVE),
        ),
        (
            "char device",
            raw_tar(&[ok, (b"dev", tar::EntryType::Char, b"", b"")]),
            (400, code::BAD_ARCHIVE),
        ),
        (
            "fifo",
            raw_tar(&[ok, (b"pipe", tar::EntryType::Fifo, b"", b"")]),
            (400, code::BAD_ARCHIVE),
        ),
        (
            "below its own symlink",
            raw_tar(&[
                ok,
                (
                    b"l",
                    tar::EntryType::Symlink,
                    outside.path().as_os_str().as_encoded_bytes(),
                    b"",
                ),
                (b"l/x", tar::EntryType::Regular, b"", b"x"),
            ]),
            (400, code::BAD_ARCHIVE),
        ),
        (
            "below a planted symlink",
            raw_tar(&[ok, (b"planted/x", tar::EntryType::Regular, b"", b"x")]),
            (400, code::BAD_PATH),
        ),
        (
            "a file where a directory is",
            raw_tar(&[ok, (b"kept/x", tar::EntryType::Regular, b"", b"x")]),
            (409, code::NOT_A_FILE),
        ),
        (
            "garbage",
            b"this is not a tar archive at all, but it is long enough to look at it".repeat(20),
            (400, code::BAD_ARCHIVE),
        ),
    ];
    let before = tree(&w.host("/session"));
    for (what, tar_bytes, want) in cases {
        let e = w
            .client
            .write_archive("/session/dst", tar_bytes)
            .await
            .expect_err(what);
        assert_eq!(api_code(&e), want, "{what}: {e}");
        assert_eq!(tree(&w.host("/session")), before, "{what} wrote something");
        assert!(tree(outside.path()).is_empty(), "{what} wrote outside");
    }
    // A read-only mount, a path through the planted symlink, a download of it.
    let e = w
        .client
        .write_archive("/.agents", raw_tar(&[ok]))
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (403, code::READ_ONLY));
    let e = w
        .client
        .write_archive("/session/dst/planted", raw_tar(&[ok]))
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (400, code::BAD_PATH), "{e}");
    let e = w
        .client
        .read_archive_into("/session/dst/planted", &mut Vec::new())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (400, code::BAD_PATH), "{e}");
    assert!(tree(outside.path()).is_empty());
}

#[tokio::test]
async fn an_archive_over_the_limit_is_413_and_writes_nothing() {
    let (tmp, mut cfg) = config();
    cfg.max_archive_bytes = 64 * 1024;
    let w = start_with(tmp, cfg).await;
    let big = vec![b'x'; 100 * 1024];
    let e = w
        .client
        .write_archive(
            "/session",
            raw_tar(&[(b"big", tar::EntryType::Regular, b"", &big)]),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (413, code::PAYLOAD_TOO_LARGE), "{e}");
    assert!(tree(&w.host("/session")).is_empty());
}

/// Round 3 of issue 14's outside attack: archives that were refused only half-way (after
/// writing) are refused whole now, and a refused upload leaves no new directory behind.
#[tokio::test]
async fn archives_refused_half_way_before_are_refused_whole() {
    let w = start().await;
    std::fs::create_dir(w.host("/session/c5")).unwrap();
    std::fs::write(w.host("/session/c5/keep"), "old").unwrap();
    // Complete entries, then a tar cut inside a later file's data.
    let whole = raw_tar(&[
        (b"keep", tar::EntryType::Regular, b"", b"CLOBBERED"),
        (b"zz", tar::EntryType::Regular, b"", &[b'B'; 5000]),
    ]);
    let cut = whole[..512 + 512 + 512 + 700].to_vec();
    let long_link = vec![b'x'; 5000];
    let long_name = vec![b'n'; 256];
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        ("cut inside a file", "/session/c5", cut),
        ("a symlink target over PATH_MAX", "/session/c5", {
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(9);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, "keep", &b"CLOBBERED"[..]).unwrap();
            let mut l = tar::Header::new_gnu();
            l.set_entry_type(tar::EntryType::Symlink);
            l.set_size(0);
            b.append_link(&mut l, "zlink", std::str::from_utf8(&long_link).unwrap())
                .unwrap();
            b.into_inner().unwrap()
        }),
        ("a name over 255 bytes", "/session/new-target", {
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(1);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, std::str::from_utf8(&long_name).unwrap(), &b"x"[..])
                .unwrap();
            b.into_inner().unwrap()
        }),
        (
            "a name that is not UTF-8",
            "/session/new-target",
            raw_tar(&[(b"b\xff", tar::EntryType::Regular, b"", b"x")]),
        ),
    ];
    let before = tree(&w.host("/session"));
    for (what, path, body) in cases {
        let e = w.client.write_archive(path, body).await.expect_err(what);
        assert_eq!(api_code(&e), (400, code::BAD_ARCHIVE), "{what}: {e}");
        assert_eq!(tree(&w.host("/session")), before, "{what} wrote something");
    }
    assert_eq!(
        std::fs::read_to_string(w.host("/session/c5/keep")).unwrap(),
        "old"
    );
}

/// Issue 29, 6e: an archive whose modes cannot be kept as they are says so. Setuid, setgid and
/// sticky bits are never set (as for a file upload), and a directory stays open to its owner (so
/// that its entries can be placed); each such entry is listed in the answer's `warnings`, and
/// every other mode is kept exactly, whatever the worker's umask. Failed before the fix: a 7777
/// directory became 0755 (the bits dropped and the umask applied) and the answer said nothing.
#[tokio::test]
async fn modes_that_are_not_kept_are_said_in_the_answer() {
    use std::os::unix::fs::PermissionsExt;
    let w = start().await;
    let mut b = tar::Builder::new(Vec::new());
    for (name, kind, mode, data) in [
        ("d", tar::EntryType::Directory, 0o7777, &b""[..]),
        ("d/suid", tar::EntryType::Regular, 0o4755, &b"x"[..]),
        ("ro", tar::EntryType::Directory, 0o555, &b""[..]),
        ("open", tar::EntryType::Directory, 0o777, &b""[..]),
        ("plain", tar::EntryType::Directory, 0o750, &b""[..]),
        ("f", tar::EntryType::Regular, 0o640, &b"y"[..]),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data).unwrap();
    }
    let r = reqwest::Client::new()
        .put(format!("{}/v1/archive?path=/session/up", w.base_url))
        .bearer_auth(super::api_support::TOKEN)
        .body(b.into_inner().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let answer: serde_json::Value = r.json().await.unwrap();
    let mode = |p: &str| std::fs::metadata(w.host(p)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        [
            mode("/session/up/d"),
            mode("/session/up/d/suid"),
            mode("/session/up/ro"),
            mode("/session/up/open"),
            mode("/session/up/plain"),
            mode("/session/up/f"),
        ],
        [0o777, 0o755, 0o755, 0o777, 0o750, 0o640],
        "{answer}"
    );
    let warnings: Vec<&str> = answer["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("no warnings in {answer}"))
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    let of = |path: &str| {
        warnings
            .iter()
            .find(|w| w.starts_with(&format!("{path}: ")))
            .unwrap_or_else(|| panic!("no warning for {path}: {warnings:?}"))
    };
    assert!(of("/session/up/d").contains("7777") && of("/session/up/d").contains("setuid"));
    assert!(of("/session/up/d/suid").contains("4755"));
    assert!(of("/session/up/ro").contains("0555") && of("/session/up/ro").contains("owner"));
}

/// A read-only prefix below the target directory (an attacker found it): an archive uploaded to
/// `/persistent` with an entry `ro/x` wrote into the read-only `/persistent/ro`, which `PUT` to
/// `/persistent/ro` itself refuses. Every entry is checked: one at or below a read-only prefix
/// refuses the whole archive (403 `read-only`), and nothing is written.
#[tokio::test]
async fn an_archive_cannot_write_below_a_read_only_prefix_of_its_directory() {
    let (tmp, mut cfg) = config();
    cfg.read_only_prefixes = vec!["/persistent/ro".into()];
    let w = start_with(tmp, cfg).await;
    std::fs::create_dir_all(w.host("/persistent/ro")).unwrap();
    std::fs::write(w.host("/persistent/ro/policy.md"), "keep").unwrap();
    let before = tree(&w.host("/persistent"));
    let fine: RawEntry = (b"fine.txt", tar::EntryType::Regular, b"", b"fine");
    for (what, bad) in [
        (
            "a new file",
            (&b"ro/x"[..], tar::EntryType::Regular, &b""[..], &b"x"[..]),
        ),
        (
            "an existing file",
            (b"ro/policy.md", tar::EntryType::Regular, b"", b"gone"),
        ),
        (
            "a symlink",
            (b"ro/link", tar::EntryType::Symlink, b"/etc", b""),
        ),
        (
            "a directory",
            (b"ro/sub", tar::EntryType::Directory, b"", b""),
        ),
    ] {
        let e = w
            .client
            .write_archive("/persistent", raw_tar(&[fine, bad]))
            .await
            .expect_err(what);
        assert_eq!(api_code(&e), (403, code::READ_ONLY), "{what}: {e}");
        assert_eq!(
            tree(&w.host("/persistent")),
            before,
            "{what} wrote something"
        );
    }
    // The same archive without the entry below the prefix is placed.
    w.client
        .write_archive("/persistent", raw_tar(&[fine]))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(w.host("/persistent/fine.txt")).unwrap(),
        b"fine"
    );
}

/// One PAX record, `"<len> key=value\n"`, its length counting itself.
fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body = [b" ", key.as_bytes(), b"=", value, b"\n"].concat();
    let mut len = body.len() + 1;
    while len.to_string().len() + body.len() != len {
        len += 1;
    }
    [len.to_string().as_bytes(), &body].concat()
}

/// A symlink whose target (a PAX `linkpath`) holds a NUL passed the checks and failed while being
/// placed (500 `io-failed`), leaving the archive's new directory and file behind (an attacker
/// found it). It is refused with the archive (400 `bad-archive`), and nothing is written.
#[tokio::test]
async fn a_symlink_target_with_a_nul_is_refused_before_anything_is_written() {
    let w = start().await;
    let before = tree(&w.host("/session"));
    // ustar headers: the reader applies a PAX header only to a ustar entry.
    let mut b = tar::Builder::new(Vec::new());
    let pax = pax_record("linkpath", b"a\0b");
    for (name, kind, link, data) in [
        ("new/a.txt", tar::EntryType::Regular, "", &b"a"[..]),
        ("PaxHeader", tar::EntryType::XHeader, "", &pax),
        ("new/l", tar::EntryType::Symlink, "harmless", b""),
    ] {
        let mut h = tar::Header::new_ustar();
        h.set_path(name).unwrap();
        if !link.is_empty() {
            h.set_link_name(link).unwrap();
        }
        h.set_entry_type(kind);
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append(&h, data).unwrap();
    }
    let tar_bytes = b.into_inner().unwrap();
    let e = w
        .client
        .write_archive("/session/up", tar_bytes)
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (400, code::BAD_ARCHIVE), "{e}");
    assert_eq!(
        tree(&w.host("/session")),
        before,
        "the refused archive wrote"
    );
}

/// A PAX record or GNU long name is read whole into memory by the tar reader, bounded only by
/// `--max-archive-bytes` (1 GiB by default): an attacker's 50 MiB long name aborted the worker.
/// Such records over 64 KiB are refused before the reader sees them (400 `bad-archive`), with an
/// answer that does not echo the name back, and nothing is written.
#[tokio::test]
async fn a_huge_pax_or_long_name_header_is_refused_before_it_is_read() {
    let w = start().await;
    let before = tree(&w.host("/session"));
    let big = vec![b'a'; 1 << 20];
    let pax = pax_record("path", &big);
    for (what, kind, name, data) in [
        (
            "a GNU long name",
            tar::EntryType::GNULongName,
            "././@LongLink",
            &big,
        ),
        ("a PAX path", tar::EntryType::XHeader, "PaxHeader", &pax),
    ] {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, data) in [
            (name, kind, &data[..]),
            ("f.txt", tar::EntryType::Regular, &b"x"[..]),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_path(name).unwrap();
            h.set_entry_type(kind);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        let e = w
            .client
            .write_archive("/session/up", b.into_inner().unwrap())
            .await
            .expect_err(what);
        assert_eq!(api_code(&e), (400, code::BAD_ARCHIVE), "{what}: {e}");
        assert!(
            e.to_string().len() < 4096,
            "{what}: the answer echoes the name"
        );
        assert_eq!(tree(&w.host("/session")), before, "{what} wrote");
    }
}
