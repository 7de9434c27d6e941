//! Network toggle: with network off, seccomp refuses inet sockets (and landlock, from ABI 4,
//! TCP connect/bind; on the local host the command also gets an empty network namespace); with
//! network on, a loopback listener is reachable with curl and with bash's /dev/tcp.

use super::util::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A loopback HTTP listener answering "hello-from-loopback"; counts accepted connections.
fn listener() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            c.fetch_add(1, Ordering::SeqCst);
            let _ = s.set_read_timeout(Some(std::time::Duration::from_millis(500)));
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ =
                s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 19\r\n\r\nhello-from-loopback");
        }
    });
    (port, count)
}

fn script(port: u16) -> String {
    format!(
        r#"
if command -v curl >/dev/null; then curl -s -m 5 http://127.0.0.1:{port}/ && echo " curl-ok" || echo "curl-failed"; else echo "no-curl"; fi
if exec 5<>/dev/tcp/127.0.0.1/{port}; then printf 'GET / HTTP/1.0\r\n\r\n' >&5; cat <&5 | tail -c 19; echo " devtcp-ok"; else echo "devtcp-failed"; fi
"#
    )
}

#[test]
fn loopback_is_unreachable_with_network_off() {
    let (port, count) = listener();
    let data = Data::new();
    let rt = rt();
    for (sb, cwd) in [
        (direct_sandbox(&data, false, vec![]), data.path("session")),
        (ns_sandbox(&data, false, vec![]), "/session".into()),
    ] {
        let o = rt.block_on(sb.run(&inv(&script(port), cwd)));
        let out = text(&o.stdout);
        assert!(
            out.contains("no-curl"),
            "curl is not a tool with network off: {}",
            show(&o)
        );
        assert!(out.contains("devtcp-failed"), "{}", show(&o));
        assert!(!out.contains("hello-from-loopback"), "{}", show(&o));
        // Even curl by absolute path: not executable (landlock), and its socket would be refused.
        let o = rt.block_on(sb.run(&inv(
            &format!("/usr/bin/curl -s -m 3 http://127.0.0.1:{port}/; echo rc=$?"),
            "/",
        )));
        assert!(!text(&o.stdout).contains("hello"), "{}", show(&o));
    }
    // Direct mode has no network namespace: the refusal is seccomp's (EPERM on socket()).
    let sb = direct_sandbox(&data, false, vec![]);
    let o = rt.block_on(sb.run(&inv(
        &format!("exec 5<>/dev/tcp/127.0.0.1/{port}"),
        data.path("session"),
    )));
    assert!(
        text(&o.stderr).contains("Operation not permitted"),
        "{}",
        show(&o)
    );
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "nothing reached the listener"
    );
}

#[test]
fn loopback_is_reachable_with_network_on() {
    let (port, count) = listener();
    let data = Data::new();
    let rt = rt();
    let has_curl = std::path::Path::new("/usr/bin/curl").exists();
    for (sb, cwd) in [
        (direct_sandbox(&data, true, vec![]), data.path("session")),
        (ns_sandbox(&data, true, vec![]), "/session".into()),
    ] {
        assert_eq!(sb.tools().iter().any(|t| t == "curl"), has_curl);
        let before = count.load(Ordering::SeqCst);
        let o = rt.block_on(sb.run(&inv(&script(port), cwd)));
        let out = text(&o.stdout);
        if has_curl {
            assert!(out.contains("hello-from-loopback curl-ok"), "{}", show(&o));
        }
        assert!(
            out.contains("hello-from-loopback devtcp-ok"),
            "{}",
            show(&o)
        );
        assert!(count.load(Ordering::SeqCst) >= before + 1 + usize::from(has_curl));
    }
}
