//! Commands whose arguments are themselves a command (`env`, `sudo`, `timeout`, `xargs`, `find
//! -exec`, `setsid`, `flock`, `su -c`, `watch`, …). Each wrapper's option grammar is described as
//! data (or, for the few with an unusual command line, a small function) so the inner command is
//! found the way the wrapper itself would find it.

/// What a wrapper runs, as far as its arguments tell.
#[derive(Debug, PartialEq, Eq)]
pub enum Inner {
    /// The inner command's name is the argument at this index; its arguments follow.
    At(usize),
    /// An argument that decides what runs is only known at run time.
    Dynamic,
    /// `env -S 'STRING'`: env's own argument list after splitting the string in place, to be
    /// read by env again (`env -S 'env git'`, `env -S '-i git'`).
    Env(Vec<Option<String>>),
    /// Text the wrapper runs with a shell's `-c` (`su -c TEXT`, `flock F -c TEXT`).
    Shell(String),
    /// The arguments in this range, joined with spaces, run by a shell (`watch git status`).
    Joined(usize, usize),
    /// With no command, the wrapper starts an interactive shell, which reads stdin (`chroot DIR`,
    /// `su`, `unshare`, `script`).
    StdinShell,
    /// A program the wrapper starts by name (`su -s /usr/bin/git`).
    Program(String),
    /// A script file the wrapper's shell runs (`su root x.sh`).
    Opaque(String),
}

/// How the wrapper reads a `-` operand and what it does without a command.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NoCommand {
    /// Nothing runs.
    Nothing,
    /// An interactive shell starts and reads stdin.
    Shell,
}

/// A wrapper's option grammar.
struct Spec {
    /// Short options that take a value (attached `-uroot` or separate `-u root`).
    short_with_value: &'static str,
    /// Short options whose value is optional and only ever attached (`xargs -i{}`, `-l5`).
    short_optional_value: &'static str,
    /// Long options that take a value when not written as `--opt=value`.
    long_with_value: &'static [&'static str],
    /// `NAME=value` words before the command are environment assignments.
    skips_assignments: bool,
    /// Positional operands before the command (`timeout DURATION`, `chroot DIR`).
    leading_operands: usize,
    /// The leading operand is only skipped when it is a number (`chrt [PRIO] CMD`).
    numeric_leading: bool,
    /// Short options that mean "do not run a command" (`command -v`, `ionice -p PID`).
    short_no_exec: &'static str,
    /// Long options that mean the same (`--pid`, `--list`).
    long_no_exec: &'static [&'static str],
    /// A numeric option such as `nice -10`.
    numeric_option: bool,
    /// A lone `-` is an option (`env -` is `env -i`).
    dash_is_option: bool,
    /// The command's words are joined with spaces and run by a shell (`watch`).
    joined: bool,
    /// What runs when there is no command.
    no_command: NoCommand,
}

const BASE: Spec = Spec {
    short_with_value: "",
    short_optional_value: "",
    long_with_value: &[],
    skips_assignments: false,
    leading_operands: 0,
    numeric_leading: false,
    short_no_exec: "",
    long_no_exec: &[],
    numeric_option: false,
    dash_is_option: false,
    joined: false,
    no_command: NoCommand::Nothing,
};

/// Runs a shell on stdin when given no command.
const SHELL_IF_EMPTY: Spec = Spec {
    no_command: NoCommand::Shell,
    ..BASE
};

/// Wrappers read with [`Spec`]; see [`custom`] for the others.
fn spec(wrapper: &str) -> Option<Spec> {
    Some(match wrapper {
        "env" => Spec {
            short_with_value: "uCSPa",
            long_with_value: &[
                "--unset",
                "--chdir",
                "--split-string",
                "--argv0",
                "--default-signal",
                "--ignore-signal",
                "--block-signal",
            ],
            skips_assignments: true,
            dash_is_option: true,
            ..BASE
        },
        "sudo" => Spec {
            short_with_value: "ugCDprtUTh",
            long_with_value: &[
                "--user",
                "--group",
                "--close-from",
                "--chdir",
                "--prompt",
                "--role",
                "--type",
                "--other-user",
                "--command-timeout",
                "--host",
            ],
            short_no_exec: "lkKvV",
            long_no_exec: &["--list", "--validate", "--remove-timestamp", "--version"],
            skips_assignments: true,
            ..BASE
        },
        "doas" => Spec {
            short_with_value: "uC",
            ..BASE
        },
        "pkexec" => Spec {
            long_with_value: &["--user"],
            ..SHELL_IF_EMPTY
        },
        "timeout" => Spec {
            short_with_value: "sk",
            long_with_value: &["--signal", "--kill-after"],
            leading_operands: 1,
            ..BASE
        },
        "nice" => Spec {
            short_with_value: "n",
            long_with_value: &["--adjustment"],
            numeric_option: true,
            ..BASE
        },
        "nohup" | "setsid" | "eatmydata" | "unbuffer" | "chronic" | "ifne" | "valgrind"
        | "dbus-run-session" | "catchsegv" => BASE,
        "time" => Spec {
            short_with_value: "fo",
            long_with_value: &["--format", "--output"],
            ..BASE
        },
        "stdbuf" => Spec {
            short_with_value: "ioe",
            long_with_value: &["--input", "--output", "--error"],
            ..BASE
        },
        "command" => Spec {
            short_no_exec: "vV",
            ..BASE
        },
        "builtin" => BASE,
        "exec" => Spec {
            short_with_value: "a",
            ..BASE
        },
        "xargs" => Spec {
            short_with_value: "adEILnPs",
            short_optional_value: "iel",
            long_with_value: &[
                "--arg-file",
                "--delimiter",
                "--eof",
                "--replace",
                "--max-lines",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--process-slot-var",
            ],
            ..BASE
        },
        // util-linux and friends: `getopt` with a leading `+`, so options end at the command.
        "chroot" => Spec {
            long_with_value: &["--groups", "--userspec"],
            leading_operands: 1,
            ..SHELL_IF_EMPTY
        },
        "unshare" => Spec {
            short_with_value: "RwSGl",
            long_with_value: &[
                "--propagation",
                "--setgroups",
                "--root",
                "--wd",
                "--setuid",
                "--setgid",
                "--map-user",
                "--map-group",
                "--map-users",
                "--map-groups",
                "--monotonic",
                "--boottime",
                "--load-interp",
            ],
            ..SHELL_IF_EMPTY
        },
        "nsenter" => Spec {
            short_with_value: "tSGWe",
            short_optional_value: "muinpCUTrw",
            long_with_value: &["--target", "--setuid", "--setgid", "--wdns", "--env"],
            ..SHELL_IF_EMPTY
        },
        "ionice" => Spec {
            short_with_value: "cn",
            long_with_value: &["--class", "--classdata"],
            short_no_exec: "pPu",
            long_no_exec: &["--pid", "--pgid", "--uid"],
            ..BASE
        },
        "taskset" => Spec {
            leading_operands: 1,
            short_no_exec: "p",
            long_no_exec: &["--pid"],
            ..BASE
        },
        "chrt" => Spec {
            short_with_value: "TPD",
            long_with_value: &["--sched-runtime", "--sched-period", "--sched-deadline"],
            leading_operands: 1,
            numeric_leading: true,
            short_no_exec: "mp",
            long_no_exec: &["--max", "--pid"],
            ..BASE
        },
        "prlimit" => Spec {
            short_with_value: "o",
            short_optional_value: "cdefilmnqrstuvxy",
            long_with_value: &["--output"],
            short_no_exec: "p",
            long_no_exec: &["--pid"],
            ..BASE
        },
        "setpriv" => Spec {
            long_with_value: &[
                "--reuid",
                "--regid",
                "--ruid",
                "--euid",
                "--rgid",
                "--egid",
                "--groups",
                "--inh-caps",
                "--ambient-caps",
                "--bounding-set",
                "--securebits",
                "--pdeathsig",
                "--selinux-label",
                "--apparmor-profile",
                "--landlock-access",
                "--landlock-rule",
                "--seccomp-filter",
            ],
            ..BASE
        },
        "setarch" => Spec {
            leading_operands: 1,
            ..SHELL_IF_EMPTY
        },
        "linux32" | "linux64" | "i386" | "x86_64" | "uname26" => SHELL_IF_EMPTY,
        "numactl" => Spec {
            short_with_value: "imNCpPLoMISfw",
            long_with_value: &[
                "--interleave",
                "--membind",
                "--cpunodebind",
                "--physcpubind",
                "--preferred",
                "--preferred-many",
                "--weighted-interleave",
                "--length",
                "--offset",
                "--shmmode",
                "--shmid",
                "--shm",
                "--file",
            ],
            short_no_exec: "sH",
            long_no_exec: &["--show", "--hardware"],
            ..BASE
        },
        "cgexec" => Spec {
            short_with_value: "g",
            ..BASE
        },
        "fakeroot" => Spec {
            short_with_value: "lisb",
            long_with_value: &["--lib", "--faked"],
            ..SHELL_IF_EMPTY
        },
        "faketime" => Spec {
            short_with_value: "p",
            leading_operands: 1,
            ..BASE
        },
        "xvfb-run" => Spec {
            short_with_value: "efnpsw",
            long_with_value: &[
                "--error-file",
                "--auth-file",
                "--server-num",
                "--xauth-protocol",
                "--server-args",
                "--wait",
            ],
            ..BASE
        },
        "ssh-agent" => Spec {
            short_with_value: "aEPtO",
            ..BASE
        },
        "firejail" => SHELL_IF_EMPTY,
        "proxychains" | "proxychains4" => Spec {
            short_with_value: "f",
            ..BASE
        },
        "busybox" | "toybox" => Spec {
            long_no_exec: &["--list", "--list-full", "--install", "--help"],
            ..BASE
        },
        // Debuggers and tracers start the program they are given.
        "strace" => Spec {
            short_with_value: "abeEIoOpPsSuUX",
            long_with_value: &[
                "--output",
                "--attach",
                "--string-limit",
                "--user",
                "--env",
                "--columns",
                "--trace",
                "--trace-path",
                "--signal",
                "--status",
                "--summary-sort-by",
                "--summary-columns",
                "--inject",
                "--fault",
                "--detach-on",
                "--const-print-style",
            ],
            ..BASE
        },
        "ltrace" => Spec {
            short_with_value: "aADeFlnopsuxw",
            long_with_value: &["--align", "--indent", "--library", "--output"],
            ..BASE
        },
        "watch" => Spec {
            short_with_value: "nq",
            short_optional_value: "d",
            long_with_value: &["--interval", "--equexit"],
            joined: true,
            ..BASE
        },
        _ => return None,
    })
}

/// Wrappers whose command line does not fit [`Spec`].
const CUSTOM: &[&str] = &[
    "coproc", "flock", "su", "runuser", "script", "sg", "newgrp", "parallel", "gdb", "lldb",
    "entr", "pee",
];

/// True for the commands this module knows how to look through.
pub fn is_wrapper(name: &str) -> bool {
    CUSTOM.contains(&name) || spec(name).is_some()
}

/// What `wrapper` runs given its literal arguments (`None` = run-time value); empty when it runs
/// nothing.
pub fn inner_command(wrapper: &str, args: &[Option<String>]) -> Vec<Inner> {
    if CUSTOM.contains(&wrapper) {
        return custom(wrapper, args);
    }
    let Some(spec) = spec(wrapper) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let parsed = read_options(wrapper, &spec, args, &mut out);
    if let Some(at) = parsed {
        command_at(&spec, args, at, &mut out);
    }
    out
}

/// Reads options and leading operands; returns where the command (or the operands after `--`)
/// starts, or `None` when nothing more runs. Inner commands found on the way (env -S) go to `out`.
fn read_options(
    wrapper: &str,
    spec: &Spec,
    args: &[Option<String>],
    out: &mut Vec<Inner>,
) -> Option<usize> {
    let mut operands_left = spec.leading_operands;
    let mut i = 0;
    while i < args.len() {
        let Some(arg) = args[i].as_deref() else {
            out.push(Inner::Dynamic);
            return None;
        };
        if arg == "--" {
            i += 1;
            break;
        }
        if arg == "-" && spec.dash_is_option {
            i += 1;
            continue;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            let full = format!("--{name}");
            if spec.long_no_exec.contains(&full.as_str()) {
                return None;
            }
            let takes_value = value.is_none() && spec.long_with_value.contains(&full.as_str());
            if wrapper == "env" && full == "--split-string" {
                let value = match value {
                    Some(v) => Some(Some(v.to_string())),
                    None => args.get(i + 1).cloned(),
                };
                let rest = i + if takes_value { 2 } else { 1 };
                env_split(value, &args[rest.min(args.len())..], out);
                return None;
            }
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        let numeric =
            arg.len() > 1 && arg.starts_with('-') && arg[1..].bytes().all(|b| b.is_ascii_digit());
        if arg.len() > 1 && arg.starts_with('-') && !(numeric && spec.numeric_leading) {
            let letters = &arg[1..];
            if spec.numeric_option && numeric {
                i += 1;
                continue;
            }
            let mut consumed = 1;
            for (pos, letter) in letters.char_indices() {
                if spec.short_no_exec.contains(letter) {
                    return None;
                }
                if spec.short_optional_value.contains(letter) {
                    break;
                }
                if spec.short_with_value.contains(letter) {
                    let attached = &letters[pos + letter.len_utf8()..];
                    if wrapper == "env" && letter == 'S' {
                        let (value, rest) = if attached.is_empty() {
                            (args.get(i + 1).cloned(), i + 2)
                        } else {
                            (Some(Some(attached.to_string())), i + 1)
                        };
                        env_split(value, &args[rest.min(args.len())..], out);
                        return None;
                    }
                    if attached.is_empty() {
                        consumed = 2;
                    }
                    break;
                }
            }
            i += consumed;
            continue;
        }
        if spec.skips_assignments && is_assignment(arg) {
            i += 1;
            continue;
        }
        if operands_left > 0 {
            operands_left -= 1;
            if spec.numeric_leading && !arg.bytes().all(|b| b.is_ascii_digit()) {
                return Some(i);
            }
            i += 1;
            continue;
        }
        return Some(i);
    }
    // After `--` (or when the arguments ran out): assignments (env), operands, then the command.
    while spec.skips_assignments && matches!(args.get(i), Some(Some(a)) if is_assignment(a)) {
        i += 1;
    }
    Some(i + operands_left)
}

/// The command starting at `at`, or what runs without one.
fn command_at(spec: &Spec, args: &[Option<String>], at: usize, out: &mut Vec<Inner>) {
    match args.get(at) {
        Some(Some(_)) if spec.joined => out.push(Inner::Joined(at, args.len())),
        Some(Some(_)) => out.push(Inner::At(at)),
        Some(None) => out.push(Inner::Dynamic),
        None if spec.no_command == NoCommand::Shell => out.push(Inner::StdinShell),
        None => {}
    }
}

/// `env -S STRING REST…`: the string is split into words that take its place, and env reads its
/// arguments again from there (GNU env).
fn env_split(value: Option<Option<String>>, rest: &[Option<String>], out: &mut Vec<Inner>) {
    match value {
        None => {}
        Some(None) => out.push(Inner::Dynamic),
        Some(Some(text)) => {
            let mut words = split_string(&text);
            words.extend(rest.iter().cloned());
            out.push(Inner::Env(words));
        }
    }
}

/// GNU env's `-S` splitting: whitespace separates words; single quotes keep text (only `\\` and
/// `\'` are escapes in them); double quotes and bare text know `\"`, `\'`, `\\`, `\$`, `\#`,
/// `\_` (a space in double quotes, a separator outside), `\f`, `\n`, `\r`, `\t`, `\v`, and `\c`,
/// which ends the string; `#` at the start of a word starts a comment; `${NAME}` is the
/// environment's value, known only at run time (`None`).
pub fn split_string(text: &str) -> Vec<Option<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut run_time = false;
    let mut chars = text.chars().peekable();
    #[derive(PartialEq)]
    enum Q {
        None,
        Single,
        Double,
    }
    let mut quote = Q::None;
    let finish =
        |word: &mut Option<String>, run_time: &mut bool, words: &mut Vec<Option<String>>| {
            if let Some(w) = word.take() {
                words.push((!*run_time).then_some(w));
            }
            *run_time = false;
        };
    while let Some(c) = chars.next() {
        match (c, &quote) {
            ('\'', Q::Single) | ('"', Q::Double) => quote = Q::None,
            ('\'', Q::None) => {
                quote = Q::Single;
                word.get_or_insert_with(String::new);
            }
            ('"', Q::None) => {
                quote = Q::Double;
                word.get_or_insert_with(String::new);
            }
            (c, Q::None) if c.is_whitespace() => finish(&mut word, &mut run_time, &mut words),
            ('#', Q::None) if word.is_none() => break,
            ('\\', Q::Single) => match chars.peek() {
                Some('\\' | '\'') => word
                    .get_or_insert_with(String::new)
                    .push(chars.next().unwrap_or('\\')),
                _ => word.get_or_insert_with(String::new).push('\\'),
            },
            ('\\', _) => {
                let Some(next) = chars.next() else { break };
                let decoded = match next {
                    'c' => break,
                    '_' if quote == Q::None => {
                        finish(&mut word, &mut run_time, &mut words);
                        continue;
                    }
                    '_' => ' ',
                    'f' => '\x0c',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'v' => '\x0b',
                    other => other,
                };
                word.get_or_insert_with(String::new).push(decoded);
            }
            ('$', Q::None | Q::Double) if chars.peek() == Some(&'{') => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                run_time = true;
                word.get_or_insert_with(String::new);
            }
            (c, _) => word.get_or_insert_with(String::new).push(c),
        }
    }
    finish(&mut word, &mut run_time, &mut words);
    words
}

/// Wrappers with their own command lines.
fn custom(wrapper: &str, args: &[Option<String>]) -> Vec<Inner> {
    let mut out = Vec::new();
    match wrapper {
        // `coproc CMD …` or `coproc NAME { …; }` / `coproc NAME ( … )`: a NAME only comes before a
        // compound command (tree-sitter-bash reads `{` and what follows as arguments).
        "coproc" => {
            let compound = |a: &Option<String>| matches!(a.as_deref(), Some(w) if w == "{" || w.starts_with('('));
            let at = usize::from(args.len() > 1 && compound(&args[1]) && !compound(&args[0]));
            command_at(&BASE, args, at, &mut out);
        }
        // `flock [OPTS] FILE CMD …`, `flock [OPTS] FILE -c TEXT`, `flock [OPTS] FD`.
        "flock" => {
            let spec = Spec {
                short_with_value: "wE",
                long_with_value: &["--timeout", "--wait", "--conflict-exit-code"],
                ..BASE
            };
            // Options end at the lock file; `-c` is only recognised right after it.
            let Some(file) = read_options(wrapper, &spec, args, &mut out) else {
                return out;
            };
            let at = file + 1;
            match args.get(at).map(|a| a.as_deref()) {
                Some(Some("-c" | "--command")) => shell_text(args.get(at + 1), &mut out),
                _ if file < args.len() => command_at(&spec, args, at, &mut out),
                _ => {}
            }
        }
        "su" | "runuser" | "script" => su_like(wrapper, args, &mut out),
        // `sg GROUP [-c] COMMAND`: the command goes to `/bin/sh -c`; without one, a shell.
        "sg" => {
            let mut operands = args
                .iter()
                .enumerate()
                .filter(|(_, a)| !matches!(a.as_deref(), Some("-" | "-c")));
            let _group = operands.next();
            match operands.next() {
                Some((i, _)) => out.push(Inner::Joined(i, args.len())),
                None => out.push(Inner::StdinShell),
            }
        }
        "newgrp" => out.push(Inner::StdinShell),
        "parallel" => parallel(args, &mut out),
        "gdb" | "lldb" => debugger(wrapper, args, &mut out),
        // `entr [-acdnprsz] UTILITY [ARG…]`; with `-s` the utility is a shell command.
        "entr" => {
            let mut i = 0;
            let mut shell = false;
            while let Some(Some(arg)) = args.get(i) {
                if arg == "--" {
                    i += 1;
                    break;
                }
                if arg.len() < 2 || !arg.starts_with('-') {
                    break;
                }
                shell |= arg.contains('s');
                i += 1;
            }
            match args.get(i) {
                Some(Some(_)) if shell => out.push(Inner::Joined(i, args.len())),
                _ => command_at(&BASE, args, i, &mut out),
            }
        }
        // moreutils `pee CMD…`: every argument is a shell command.
        "pee" => {
            for arg in args {
                match arg.as_deref() {
                    Some(a) if a.starts_with('-') => {}
                    Some(a) => out.push(Inner::Shell(a.to_string())),
                    None => out.push(Inner::Dynamic),
                }
            }
        }
        _ => {}
    }
    out
}

fn shell_text(value: Option<&Option<String>>, out: &mut Vec<Inner>) {
    match value {
        Some(Some(text)) => out.push(Inner::Shell(text.clone())),
        Some(None) => out.push(Inner::Dynamic),
        None => {}
    }
}

/// `su`, `runuser` and `script` (util-linux): options may follow operands. `-c TEXT` is a shell
/// command, `-s PROGRAM` the shell that runs it. `runuser -u USER CMD …` runs CMD directly.
/// Otherwise (no `-c`) the shell is interactive and reads stdin, or, for su's `USER FILE …`, runs
/// a script file.
fn su_like(wrapper: &str, args: &[Option<String>], out: &mut Vec<Inner>) {
    let (shell_opts, program_opts, other_value_opts): (&str, &str, &[&str]) = match wrapper {
        "script" => ("c", "", &["E", "I", "O", "B", "T", "m", "o"]),
        _ => ("c", "s", &["g", "G", "u", "w"]),
    };
    let long_shell: &[&str] = &["command", "session-command"];
    let long_program: &[&str] = if wrapper == "script" { &[] } else { &["shell"] };
    let long_values: &[&str] = &[
        "group",
        "supp-group",
        "user",
        "whitelist-environment",
        "echo",
        "log-in",
        "log-out",
        "log-io",
        "log-timing",
        "logging-format",
        "output-limit",
    ];
    let mut operands = Vec::new();
    let mut has_shell_text = false;
    let mut user_mode = false;
    let mut i = 0;
    let mut options_done = false;
    while i < args.len() {
        let Some(arg) = args[i].as_deref() else {
            // A run-time word may be an option: what runs is only known then.
            out.push(Inner::Dynamic);
            return;
        };
        if options_done || arg == "-" || !arg.starts_with('-') {
            if arg != "-" {
                operands.push(i);
                if user_mode {
                    // `runuser -u USER CMD ARGS…`: the rest is the command.
                    break;
                }
            }
            i += 1;
            continue;
        }
        if arg == "--" {
            options_done = true;
            i += 1;
            continue;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(Some(v.to_string()))),
                None => (long, None),
            };
            let is_shell = long_shell.contains(&name);
            let is_program = long_program.contains(&name);
            let takes = is_shell || is_program || long_values.contains(&name);
            let value = match (takes, value) {
                (true, None) => {
                    i += 1;
                    args.get(i).cloned()
                }
                (_, v) => v,
            };
            if is_shell {
                has_shell_text = true;
                shell_text(value.as_ref(), out);
            } else if is_program {
                program(value.as_ref(), out);
            } else if name == "user" {
                user_mode = wrapper == "runuser";
            }
            i += 1;
            continue;
        }
        let letters = &arg[1..];
        for (pos, letter) in letters.char_indices() {
            let attached = &letters[pos + letter.len_utf8()..];
            let is_shell = shell_opts.contains(letter);
            let is_program = !program_opts.is_empty() && program_opts.contains(letter);
            let is_value = other_value_opts.iter().any(|o| o.starts_with(letter));
            if !(is_shell || is_program || is_value) {
                continue;
            }
            let value = if attached.is_empty() {
                i += 1;
                args.get(i).cloned()
            } else {
                Some(Some(attached.to_string()))
            };
            if is_shell {
                has_shell_text = true;
                shell_text(value.as_ref(), out);
            } else if is_program {
                program(value.as_ref(), out);
            } else if letter == 'u' && wrapper == "runuser" {
                user_mode = true;
            }
            break;
        }
        i += 1;
    }
    if user_mode {
        if let Some(&at) = operands.first() {
            out.push(Inner::At(at));
            return;
        }
    }
    if has_shell_text {
        return;
    }
    // su/runuser: the first operand is the user; a further one is a script for the shell.
    let skip = usize::from(wrapper != "script");
    match operands.get(skip) {
        Some(&file) if wrapper != "script" => {
            let name = args[file].as_deref().unwrap_or_default();
            out.push(Inner::Opaque(format!("{wrapper} … {name}")));
        }
        _ => out.push(Inner::StdinShell),
    }
}

fn program(value: Option<&Option<String>>, out: &mut Vec<Inner>) {
    match value {
        Some(Some(p)) => out.push(Inner::Program(p.clone())),
        Some(None) => out.push(Inner::Dynamic),
        None => {}
    }
}

/// Replacement strings of GNU parallel: `{}`, `{.}`, `{/}`, `{//}`, `{/.}`, `{#}`, `{%}`, `{1}`, …
fn has_replacement(word: &str) -> bool {
    word.match_indices('{').any(|(i, _)| {
        word[i + 1..].find('}').is_some_and(|end| {
            word[i + 1..i + 1 + end]
                .chars()
                .all(|c| "./#%0123456789".contains(c))
        })
    })
}

/// GNU parallel: `parallel [OPTS] COMMAND … ::: ARG …`. The command and each argument are put
/// together and run by a shell; with no command, each argument (or each line of stdin or of a
/// `::::` file) is a command.
fn parallel(args: &[Option<String>], out: &mut Vec<Inner>) {
    const WITH_VALUE: &[&str] = &[
        "-j",
        "--jobs",
        "-P",
        "--max-procs",
        "-S",
        "--sshlogin",
        "--slf",
        "--sshloginfile",
        "-a",
        "--arg-file",
        "-d",
        "--delimiter",
        "-E",
        "--eof",
        "-I",
        "--tmpdir",
        "--results",
        "--res",
        "--joblog",
        "--delay",
        "--timeout",
        "--env",
        "--workdir",
        "--wd",
        "-n",
        "--max-args",
        "-N",
        "-L",
        "--max-lines",
        "-s",
        "--max-chars",
        "-C",
        "--colsep",
        "--tagstring",
        "--halt",
        "--retries",
        "--memfree",
        "--load",
        "--block",
        "--block-size",
        "--recstart",
        "--recend",
        "--basefile",
        "--bf",
        "--transferfile",
        "--tf",
        "--return",
        "--sshdelay",
        "--termseq",
        "--rpl",
        "--limit",
        "-J",
        "--profile",
        "--semaphorename",
        "--id",
        "--nice",
        "--shebang",
        "--tag-string",
        "--ctag",
        "--ctagstring",
        "--header",
        "--cleanup-file",
    ];
    let mut i = 0;
    let mut from_file = false;
    while let Some(Some(arg)) = args.get(i) {
        if arg == "--" {
            i += 1;
            break;
        }
        if !arg.starts_with('-') || arg == "-" || arg.starts_with(":::") {
            break;
        }
        if arg == "-a" || arg.starts_with("--arg-file") || arg.starts_with("-a") {
            from_file = true;
        }
        if WITH_VALUE.contains(&arg.as_str()) {
            i += 1;
        }
        i += 1;
    }
    if matches!(args.get(i), Some(None)) {
        out.push(Inner::Dynamic);
        return;
    }
    let start = i;
    while matches!(args.get(i), Some(Some(a)) if !a.starts_with(":::")) {
        i += 1;
    }
    if matches!(args.get(i), Some(None)) {
        out.push(Inner::Dynamic);
        return;
    }
    let command: Vec<&str> = args[start..i].iter().filter_map(|a| a.as_deref()).collect();
    // The argument lists: `:::` values, or files (`::::`, `-a`) whose lines are known at run time.
    let mut values: Vec<Option<&str>> = Vec::new();
    let mut literal_list = true;
    for arg in &args[i..] {
        match arg.as_deref() {
            Some(sep) if sep.starts_with("::::") => literal_list = false,
            Some(sep) if sep.starts_with(":::") => literal_list = true,
            Some(v) if literal_list => values.push(Some(v)),
            _ => values.push(None),
        }
    }
    let no_lists = values.is_empty() && !args[i..].iter().any(|a| a.is_some());
    if (no_lists || from_file) && (command.is_empty() || command.iter().any(|w| has_replacement(w)))
    {
        // Commands (or the words put into them) come from stdin or a file.
        out.push(Inner::Dynamic);
    }
    for value in values.iter().take(64) {
        let Some(value) = value else {
            if command.is_empty() || command.iter().any(|w| has_replacement(w)) {
                out.push(Inner::Dynamic);
            }
            continue;
        };
        let line = if command.is_empty() {
            value.to_string()
        } else if command.iter().any(|w| has_replacement(w)) {
            command
                .iter()
                .map(|w| replace_all(w, value))
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            format!("{} {value}", command.join(" "))
        };
        out.push(Inner::Shell(line));
    }
    if values.is_empty() && !command.is_empty() {
        out.push(Inner::Joined(start, i));
    }
}

/// Every replacement string in `word` replaced by `value`.
fn replace_all(word: &str, value: &str) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(end) if after[..end].chars().all(|c| "./#%0123456789".contains(c)) => {
                out.push_str(&rest[..open]);
                out.push_str(value);
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// gdb and lldb start the program they are given (`gdb --args PROG …`, `gdb -ex run PROG`,
/// `lldb -- PROG …`); their `shell`/`!`/`pipe` and `platform shell` commands run a shell, and
/// command files are opaque.
fn debugger(wrapper: &str, args: &[Option<String>], out: &mut Vec<Inner>) {
    let with_value: &[&str] = match wrapper {
        "gdb" => &[
            "ex",
            "iex",
            "eval-command",
            "init-eval-command",
            "x",
            "command",
            "ix",
            "init-command",
            "p",
            "pid",
            "c",
            "core",
            "d",
            "directory",
            "cd",
            "s",
            "symbols",
            "e",
            "exec",
            "se",
            "b",
            "tty",
            "t",
            "D",
            "data-directory",
            "i",
            "interpreter",
            "l",
        ],
        _ => &[
            "o",
            "one-line",
            "O",
            "one-line-before-file",
            "k",
            "one-line-on-crash",
            "s",
            "source",
            "S",
            "source-before-file",
            "K",
            "source-on-crash",
            "a",
            "arch",
            "f",
            "file",
            "c",
            "core",
            "p",
            "attach-pid",
            "n",
            "attach-name",
            "l",
            "script-language",
        ],
    };
    let commands: &[&str] = match wrapper {
        "gdb" => &["ex", "iex", "eval-command", "init-eval-command"],
        _ => &[
            "o",
            "one-line",
            "O",
            "one-line-before-file",
            "k",
            "one-line-on-crash",
        ],
    };
    let files: &[&str] = match wrapper {
        "gdb" => &["x", "command", "ix", "init-command"],
        _ => &[
            "s",
            "source",
            "S",
            "source-before-file",
            "K",
            "source-on-crash",
        ],
    };
    let mut i = 0;
    while i < args.len() {
        let Some(arg) = args[i].as_deref() else {
            out.push(Inner::Dynamic);
            return;
        };
        if arg == "--" || arg == "--args" {
            command_at(&BASE, args, i + 1, out);
            return;
        }
        let Some(option) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            // The program to debug (gdb also takes a core file or pid after it).
            command_at(&BASE, args, i, out);
            return;
        };
        let (name, value) = match option.split_once('=') {
            Some((n, v)) => (n, Some(Some(v.to_string()))),
            None => (option, None),
        };
        let value = match value {
            Some(v) => Some(v),
            None if with_value.contains(&name) => {
                i += 1;
                args.get(i).cloned()
            }
            None => None,
        };
        if commands.contains(&name) {
            match value {
                Some(Some(line)) => debugger_line(&line, out),
                Some(None) => out.push(Inner::Dynamic),
                None => {}
            }
        } else if files.contains(&name) {
            let file = value.flatten().unwrap_or_default();
            out.push(Inner::Opaque(format!("{wrapper} -{name} {file}")));
        }
        i += 1;
    }
}

/// A debugger command line: `shell CMD`, `!CMD`, `pipe …|CMD`, `| …|CMD`, `platform shell CMD`
/// run a shell; a program's own output never does.
fn debugger_line(line: &str, out: &mut Vec<Inner>) {
    let line = line.trim_start();
    let shell = line
        .strip_prefix("shell")
        .or_else(|| line.strip_prefix("platform shell"))
        .or_else(|| line.strip_prefix('!'));
    if let Some(cmd) = shell {
        out.push(Inner::Shell(cmd.to_string()));
    } else if let Some(rest) = line.strip_prefix("pipe").or_else(|| line.strip_prefix('|')) {
        match rest.split_once('|') {
            Some((_, cmd)) => out.push(Inner::Shell(cmd.to_string())),
            None => out.push(Inner::Dynamic),
        }
    }
}

/// `NAME=value` with a valid shell variable name.
pub fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            let mut chars = name.chars();
            matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
                && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        }
        None => false,
    }
}

/// Inner commands of `find … -exec CMD … ;` (also `-execdir`, `-ok`, `-okdir`, and `+`):
/// (start, end) index ranges of each command's words.
pub fn find_exec_commands(args: &[Option<String>]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let is_exec = matches!(
            args[i].as_deref(),
            Some("-exec" | "-execdir" | "-ok" | "-okdir")
        );
        if !is_exec {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while end < args.len() && !matches!(args[end].as_deref(), Some(";" | "+")) {
            end += 1;
        }
        if start < end {
            found.push((start, end));
        }
        i = end + 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lits(words: &[&str]) -> Vec<Option<String>> {
        words
            .iter()
            .map(|w| (*w != "$").then(|| w.to_string()))
            .collect()
    }

    fn words(line: &[&str]) -> Vec<Option<String>> {
        lits(line)
    }

    #[test]
    fn finds_inner_commands() {
        use Inner::*;
        let shell = |s: &str| Shell(s.to_string());
        let cases: Vec<(&str, &[&str], Vec<Inner>)> = vec![
            ("env", &["FOO=1", "git", "status"], vec![At(1)]),
            ("env", &["-i", "-u", "HOME", "A=b", "cargo"], vec![At(4)]),
            ("env", &[], vec![]),
            (
                "env",
                &["-S", "git status"],
                vec![Env(words(&["git", "status"]))],
            ),
            (
                "env",
                &["--split-string=make all"],
                vec![Env(words(&["make", "all"]))],
            ),
            (
                "env",
                &["-S", "env", "git"],
                vec![Env(words(&["env", "git"]))],
            ),
            ("env", &["-S", "-i git"], vec![Env(words(&["-i", "git"]))]),
            ("env", &["-Si", "git"], vec![Env(words(&["i", "git"]))]),
            ("env", &["--", "X=1", "git"], vec![At(2)]),
            ("env", &["-", "git"], vec![At(1)]),
            ("sudo", &["-Eu", "root", "apt-get", "install"], vec![At(2)]),
            ("sudo", &["-u", "root", "--", "make"], vec![At(3)]),
            ("sudo", &["-l"], vec![]),
            ("timeout", &["-s", "KILL", "5", "docker", "ps"], vec![At(3)]),
            ("timeout", &["--kill-after=1", "5s", "ls"], vec![At(2)]),
            ("timeout", &["5"], vec![]),
            ("timeout", &["--", "5", "make"], vec![At(2)]),
            ("nice", &["-n", "10", "make"], vec![At(2)]),
            ("nice", &["-10", "make"], vec![At(1)]),
            ("stdbuf", &["-oL", "grep", "x"], vec![At(1)]),
            ("command", &["-v", "git"], vec![]),
            ("command", &["-p", "git"], vec![At(1)]),
            ("xargs", &["-I{}", "cargo", "build"], vec![At(1)]),
            ("xargs", &["-I", "{}", "-P", "4", "git", "x"], vec![At(4)]),
            ("xargs", &["-0", "-n1"], vec![]),
            ("xargs", &["-i{}", "rm", "{}"], vec![At(1)]),
            ("exec", &["-a", "name", "make"], vec![At(2)]),
            ("env", &["$", "git"], vec![Dynamic]),
            ("setsid", &["-f", "git"], vec![At(1)]),
            ("coproc", &["git", "status"], vec![At(0)]),
            ("coproc", &["NAME", "{", "git"], vec![At(1)]),
            ("coproc", &["{", "git"], vec![At(0)]),
            ("flock", &["/tmp/l", "git", "status"], vec![At(1)]),
            (
                "flock",
                &["-w", "5", "/tmp/l", "-c", "git status"],
                vec![shell("git status")],
            ),
            ("flock", &["-n", "9"], vec![]),
            ("watch", &["-n", "1", "git", "status"], vec![Joined(2, 4)]),
            ("chroot", &["--userspec=a:b", "/srv", "git"], vec![At(2)]),
            ("chroot", &["/srv"], vec![StdinShell]),
            (
                "unshare",
                &["-r", "--propagation", "private", "git"],
                vec![At(3)],
            ),
            ("unshare", &["-m"], vec![StdinShell]),
            ("ionice", &["-c3", "git"], vec![At(1)]),
            ("ionice", &["-c", "3", "-p", "12"], vec![]),
            ("taskset", &["-c", "0", "git"], vec![At(2)]),
            ("taskset", &["-p", "3", "12"], vec![]),
            ("chrt", &["1", "git"], vec![At(1)]),
            ("chrt", &["-o", "git"], vec![At(1)]),
            ("chrt", &["-f", "-T", "5", "10", "git"], vec![At(4)]),
            ("runuser", &["-u", "x", "--", "git", "-c", "y"], vec![At(3)]),
            ("runuser", &["x", "-c", "git"], vec![shell("git")]),
            ("su", &["-c", "git"], vec![shell("git")]),
            ("su", &["-", "root", "-c", "git"], vec![shell("git")]),
            (
                "su",
                &["-s", "/usr/bin/git", "root"],
                vec![Program("/usr/bin/git".into()), StdinShell],
            ),
            ("su", &["root", "x.sh"], vec![Opaque("su … x.sh".into())]),
            ("su", &[], vec![StdinShell]),
            ("script", &["-qc", "git", "/dev/null"], vec![shell("git")]),
            (
                "script",
                &["-q", "/dev/null", "--command=git"],
                vec![shell("git")],
            ),
            ("parallel", &["git", ":::", "a"], vec![shell("git a")]),
            (
                "parallel",
                &["-j", "2", ":::", "git status", "ls"],
                vec![shell("git status"), shell("ls")],
            ),
            ("parallel", &["{}", "x", ":::", "git"], vec![shell("git x")]),
            ("parallel", &["gzip"], vec![Joined(0, 1)]),
            ("parallel", &[], vec![Dynamic]),
            ("busybox", &["git"], vec![At(0)]),
            ("busybox", &["--list"], vec![]),
            ("strace", &["-f", "-o", "log", "git"], vec![At(3)]),
            ("valgrind", &["--tool=memcheck", "-q", "git"], vec![At(2)]),
            ("gdb", &["--args", "git", "status"], vec![At(1)]),
            ("gdb", &["-batch", "-ex", "run", "git"], vec![At(3)]),
            (
                "gdb",
                &["-ex", "shell git status"],
                vec![shell(" git status")],
            ),
            ("gdb", &["-x", "cmds"], vec![Opaque("gdb -x cmds".into())]),
            ("lldb", &["--", "git"], vec![At(1)]),
            ("doas", &["-u", "x", "git"], vec![At(2)]),
            ("nohup", &["git"], vec![At(0)]),
            ("sg", &["wheel", "-c", "git status"], vec![Joined(2, 3)]),
            ("entr", &["-s", "git status"], vec![Joined(1, 2)]),
            ("pee", &["git", "ls"], vec![shell("git"), shell("ls")]),
            ("pkexec", &["--user", "x", "git"], vec![At(2)]),
            ("setpriv", &["--reuid", "1", "git"], vec![At(2)]),
            ("setarch", &["x86_64", "-R", "git"], vec![At(2)]),
            ("prlimit", &["--nofile=10", "git"], vec![At(1)]),
            ("numactl", &["-N", "0", "git"], vec![At(2)]),
        ];
        for (wrapper, args, expected) in cases {
            assert_eq!(
                inner_command(wrapper, &lits(args)),
                expected,
                "{wrapper} {args:?}"
            );
        }
    }

    #[test]
    fn splits_strings_like_gnu_env() {
        let split = |s: &str| split_string(s);
        assert_eq!(split("git status"), words(&["git", "status"]));
        assert_eq!(split(r"\_git"), words(&["git"]));
        assert_eq!(split(r"a\_b"), words(&["a", "b"]));
        assert_eq!(split(r#""a\_b" 'c d'"#), words(&["a b", "c d"]));
        assert_eq!(split(r"g\it"), words(&["git"]));
        assert_eq!(split("x # comment"), words(&["x"]));
        assert_eq!(split(r"a\cb c"), words(&["a"]));
        assert_eq!(
            split("a ${HOME} b"),
            vec![Some("a".into()), None, Some("b".into())]
        );
        assert_eq!(split("'' x"), words(&["", "x"]));
    }

    #[test]
    fn finds_every_find_exec_command() {
        let args = lits(&[
            ".", "-name", "x", "-exec", "rm", "{}", ";", "-execdir", "git", "add", "{}", "+",
        ]);
        assert_eq!(find_exec_commands(&args), vec![(4, 6), (8, 11)]);
        assert!(find_exec_commands(&lits(&[".", "-exec"])).is_empty());
    }
}
