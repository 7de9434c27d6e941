//! Attacks on a pooled worker's adoption (`POST /v1/adopt`, issue 29 item 4) by a holder of the
//! pool's token: the real binary on loopback, with a pool pod's layout. A refused adoption
//! writes nothing (it was refused for a two-line token after the token file was written, and
//! the file stayed with the attacker's text), and no adoption writes where its request says:
//! the pooled worker decides where its token files go.

use super::adopt_pooled::{adopt, code, get, pooled, request, Pooled, POOL_TOKEN};
use base64::Engine as _;
use kube_harness_worker::api::model::SkillFile;
use kube_harness_worker::protocol::worker_args::WorkerArgs;
use std::path::Path;

/// Every name under `dir`, recursively (never through a symlink), with a file's content.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                out.push(rel);
                walk(root, &path, out);
            } else if meta.is_file() {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                out.push(format!("{rel}={text:?}"));
            } else {
                out.push(rel);
            }
        }
    }
    let mut names = Vec::new();
    walk(dir, dir, &mut names);
    names.sort();
    names
}

/// What the pool pod's writable places hold: its token directory and its workspace.
fn written(p: &Pooled) -> (Vec<String>, Vec<String>) {
    (tree(&p.tokens), tree(&p.root))
}

fn skill(path: &str, text: &str) -> SkillFile {
    SkillFile {
        path: path.into(),
        content_base64: base64::engine::general_purpose::STANDARD.encode(text),
    }
}

/// An attack: what it is, and the adoption body it sends to a pooled worker.
type Attack = (&'static str, Box<dyn Fn(&Pooled) -> String>);

/// Each adoption is refused (400 `adoption-failed`), leaves the worker spent, and writes
/// nothing at all: not the token, not the session-log token, not a skill. Failed before the
/// fix: the two-line token was written to the token file and left there, and so was the first
/// skill of a request whose second one climbed out.
#[test]
fn a_refused_adoption_writes_nothing() {
    let attacks: Vec<Attack> = vec![
        (
            "a token of two lines",
            Box::new(|p| {
                let req = request(&p.tokens, "s1", "s1-token\nInjected: yes");
                serde_json::to_string(&req).unwrap()
            }),
        ),
        (
            "a session-log token with a space",
            Box::new(|p| {
                let mut req = request(&p.tokens, "s1", "s1-token");
                let mut args = WorkerArgs::new(p.tokens.join("token"));
                args.session = "s1".into();
                args.session_log_url = Some("http://127.0.0.1:9".into());
                args.session_log_token_file = Some(p.tokens.join("session-log-token"));
                req.args = args.to_args();
                req.session_log_token = Some("log token".into());
                serde_json::to_string(&req).unwrap()
            }),
        ),
        (
            "a second skill that climbs out",
            Box::new(|p| {
                let mut req = request(&p.tokens, "s1", "s1-token");
                req.skills.push(skill("../session/planted", "x"));
                serde_json::to_string(&req).unwrap()
            }),
        ),
        (
            "two skills at one path",
            Box::new(|p| {
                let mut req = request(&p.tokens, "s1", "s1-token");
                req.skills.push(skill("review/SKILL.md", "again"));
                serde_json::to_string(&req).unwrap()
            }),
        ),
        (
            "a skill below another skill's file",
            Box::new(|p| {
                let mut req = request(&p.tokens, "s1", "s1-token");
                req.skills.push(skill("review/SKILL.md/deeper", "x"));
                serde_json::to_string(&req).unwrap()
            }),
        ),
        (
            "arguments a worker refuses after the tokens are known",
            Box::new(|p| {
                let mut req = request(&p.tokens, "s1", "s1-token");
                req.args
                    .extend(["--session-log-run-scope".into(), "a b".into()]);
                serde_json::to_string(&req).unwrap()
            }),
        ),
    ];
    for (what, body) in attacks {
        let p = pooled();
        let before = written(&p);
        let (status, answer) = adopt(&p, POOL_TOKEN, &body(&p));
        assert_eq!(
            (status, code(&answer)),
            (400, "adoption-failed"),
            "{what}: {answer}"
        );
        assert_eq!(written(&p), before, "{what}: the refused adoption wrote");
        assert_eq!(get(&p, "/readyz", None).0, 503, "{what}: not spent");
    }
}

/// Writing that fails half-way (a file is already where the session-log token goes, or where a
/// skill goes) removes what the adoption wrote before it: the session token, the skills.
#[test]
fn an_adoption_that_fails_while_writing_leaves_nothing_it_wrote() {
    for planted in ["tokens/session-log-token", "ws/.agents/review/SKILL.md"] {
        let p = pooled();
        let at = p.tokens.parent().unwrap().join(planted);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, "planted").unwrap();
        let before = written(&p);
        let mut req = request(&p.tokens, "s1", "s1-token");
        let mut args = WorkerArgs::new(p.tokens.join("token"));
        args.session = "s1".into();
        args.session_log_url = Some("http://127.0.0.1:9".into());
        args.session_log_token_file = Some(p.tokens.join("session-log-token"));
        req.args = args.to_args();
        req.session_log_token = Some("log-token".into());
        req.skills.insert(0, skill("other/SKILL.md", "# Other\n"));
        let (status, answer) = adopt(&p, POOL_TOKEN, &serde_json::to_string(&req).unwrap());
        assert_eq!(
            (status, code(&answer)),
            (400, "adoption-failed"),
            "{planted}: {answer}"
        );
        assert_eq!(written(&p), before, "{planted}: left what it wrote");
    }
}

/// An adoption whose arguments name token files elsewhere (in the session's workspace, where
/// commands read) has its tokens written where the pooled worker keeps them, never there.
/// Failed before the fix: the session's token was written to `/session/planted-token`.
#[test]
fn an_adoption_never_writes_where_its_request_says() {
    let p = pooled();
    let mut req = request(&p.tokens, "s1", "s1-token");
    let mut args = WorkerArgs::new(p.root.join("session/planted-token"));
    args.session = "s1".into();
    args.session_log_url = Some("http://127.0.0.1:9".into());
    args.session_log_token_file = Some(p.root.join("session/planted-log-token"));
    req.args = args.to_args();
    req.session_log_token = Some("log-token".into());
    let (status, answer) = adopt(&p, POOL_TOKEN, &serde_json::to_string(&req).unwrap());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        tree(&p.root.join("session")),
        Vec::<String>::new(),
        "a token was written into the session"
    );
    assert_eq!(
        tree(&p.tokens),
        ["session-log-token=\"log-token\"", "token=\"s1-token\""]
    );
    let (status, body) = get(&p, "/v1/status", Some("s1-token"));
    assert_eq!((status, body["session"].as_str()), (200, Some("s1")));
}
