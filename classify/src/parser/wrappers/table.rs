//! Which commands are wrappers, and each one's command line as data: one [`Wrapper`] row per
//! wrapper (or per group of wrappers that read their command lines alike). The wrappers whose
//! command lines fit no row are in [`CUSTOM`].

use super::options::{NoCommand, Wrapper, BASE, OPTIONS};
use crate::parser::getopt::{Has, Spec};

/// Runs a shell on stdin when given no command.
const SHELL_IF_EMPTY: Wrapper = Wrapper {
    no_command: NoCommand::Shell,
    ..BASE
};

/// Wrappers with their own command lines (see `custom.rs`).
pub const CUSTOM: &[&str] = &[
    "coproc", "flock", "su", "runuser", "script", "sg", "newgrp", "parallel", "gdb", "lldb",
    "entr", "pee",
];

/// The wrappers read with a [`Wrapper`] row.
const TABLE: &[Wrapper] = &[
    Wrapper {
        names: &["env"],
        options: Spec {
            short_req: "uCSPa",
            long: &[
                ("unset", Has::Req),
                ("chdir", Has::Req),
                ("split-string", Has::Req),
                ("argv0", Has::Req),
                ("default-signal", Has::Req),
                ("ignore-signal", Has::Req),
                ("block-signal", Has::Req),
            ],
            ..OPTIONS
        },
        skips_assignments: true,
        dash_is_option: true,
        ..BASE
    },
    Wrapper {
        names: &["sudo"],
        options: Spec {
            short_req: "ugCDprtUTh",
            long: &[
                ("user", Has::Req),
                ("group", Has::Req),
                ("close-from", Has::Req),
                ("chdir", Has::Req),
                ("prompt", Has::Req),
                ("role", Has::Req),
                ("type", Has::Req),
                ("other-user", Has::Req),
                ("command-timeout", Has::Req),
                ("host", Has::Req),
                ("list", Has::No),
                ("validate", Has::No),
                ("remove-timestamp", Has::No),
                ("version", Has::No),
            ],
            ..OPTIONS
        },
        short_no_exec: "lkKvV",
        skips_assignments: true,
        ..BASE
    },
    Wrapper {
        names: &["doas"],
        options: Spec {
            short_req: "uC",
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &["pkexec"],
        options: Spec {
            long: &[("user", Has::Req)],
            ..OPTIONS
        },
        ..SHELL_IF_EMPTY
    },
    Wrapper {
        names: &["timeout"],
        options: Spec {
            short_req: "sk",
            long: &[("signal", Has::Req), ("kill-after", Has::Req)],
            ..OPTIONS
        },
        leading_operands: 1,
        ..BASE
    },
    // `nice -10`: the reader takes `-10` for flags that take no value.
    Wrapper {
        names: &["nice"],
        options: Spec {
            short_req: "n",
            long: &[("adjustment", Has::Req)],
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &[
            "nohup",
            "setsid",
            "eatmydata",
            "unbuffer",
            "chronic",
            "ifne",
            "valgrind",
            "dbus-run-session",
            "catchsegv",
        ],
        ..BASE
    },
    Wrapper {
        names: &["time"],
        options: Spec {
            short_req: "fo",
            long: &[("format", Has::Req), ("output", Has::Req)],
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &["stdbuf"],
        options: Spec {
            short_req: "ioe",
            long: &[
                ("input", Has::Req),
                ("output", Has::Req),
                ("error", Has::Req),
            ],
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &["command"],
        short_no_exec: "vV",
        ..BASE
    },
    Wrapper {
        names: &["builtin"],
        ..BASE
    },
    Wrapper {
        names: &["exec"],
        options: Spec {
            short_req: "a",
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &["xargs"],
        options: Spec {
            short_req: "adEILnPs",
            short_opt: "iel",
            long: &[
                ("arg-file", Has::Req),
                ("delimiter", Has::Req),
                ("eof", Has::Req),
                ("replace", Has::Req),
                ("max-lines", Has::Req),
                ("max-args", Has::Req),
                ("max-procs", Has::Req),
                ("max-chars", Has::Req),
                ("process-slot-var", Has::Req),
            ],
            ..OPTIONS
        },
        ..BASE
    },
    // util-linux and friends: `getopt` with a leading `+`, so options end at the command.
    Wrapper {
        names: &["chroot"],
        options: Spec {
            long: &[("groups", Has::Req), ("userspec", Has::Req)],
            ..OPTIONS
        },
        leading_operands: 1,
        ..SHELL_IF_EMPTY
    },
    Wrapper {
        names: &["unshare"],
        options: Spec {
            short_req: "RwSGl",
            long: &[
                ("propagation", Has::Req),
                ("setgroups", Has::Req),
                ("root", Has::Req),
                ("wd", Has::Req),
                ("setuid", Has::Req),
                ("setgid", Has::Req),
                ("map-user", Has::Req),
                ("map-group", Has::Req),
                ("map-users", Has::Req),
                ("map-groups", Has::Req),
                ("monotonic", Has::Req),
                ("boottime", Has::Req),
                ("load-interp", Has::Req),
            ],
            ..OPTIONS
        },
        ..SHELL_IF_EMPTY
    },
    Wrapper {
        names: &["nsenter"],
        options: Spec {
            short_req: "tSGWe",
            short_opt: "muinpCUTrw",
            long: &[
                ("target", Has::Req),
                ("setuid", Has::Req),
                ("setgid", Has::Req),
                ("wdns", Has::Req),
                ("env", Has::Req),
            ],
            ..OPTIONS
        },
        ..SHELL_IF_EMPTY
    },
    Wrapper {
        names: &["ionice"],
        options: Spec {
            short_req: "cn",
            long: &[
                ("class", Has::Req),
                ("classdata", Has::Req),
                ("pid", Has::No),
                ("pgid", Has::No),
                ("uid", Has::No),
            ],
            ..OPTIONS
        },
        short_no_exec: "pPu",
        ..BASE
    },
    Wrapper {
        names: &["taskset"],
        options: Spec {
            long: &[("pid", Has::No)],
            ..OPTIONS
        },
        short_no_exec: "p",
        leading_operands: 1,
        ..BASE
    },
    Wrapper {
        names: &["chrt"],
        options: Spec {
            short_req: "TPD",
            long: &[
                ("sched-runtime", Has::Req),
                ("sched-period", Has::Req),
                ("sched-deadline", Has::Req),
                ("max", Has::No),
                ("pid", Has::No),
            ],
            ..OPTIONS
        },
        short_no_exec: "mp",
        leading_operands: 1,
        numeric_leading: true,
        ..BASE
    },
    Wrapper {
        names: &["prlimit"],
        options: Spec {
            short_req: "o",
            short_opt: "cdefilmnqrstuvxy",
            long: &[("output", Has::Req), ("pid", Has::No)],
            ..OPTIONS
        },
        short_no_exec: "p",
        ..BASE
    },
    Wrapper {
        names: &["setpriv"],
        options: Spec {
            long: &[
                ("reuid", Has::Req),
                ("regid", Has::Req),
                ("ruid", Has::Req),
                ("euid", Has::Req),
                ("rgid", Has::Req),
                ("egid", Has::Req),
                ("groups", Has::Req),
                ("inh-caps", Has::Req),
                ("ambient-caps", Has::Req),
                ("bounding-set", Has::Req),
                ("securebits", Has::Req),
                ("pdeathsig", Has::Req),
                ("selinux-label", Has::Req),
                ("apparmor-profile", Has::Req),
                ("landlock-access", Has::Req),
                ("landlock-rule", Has::Req),
                ("seccomp-filter", Has::Req),
            ],
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &["setarch"],
        leading_operands: 1,
        ..SHELL_IF_EMPTY
    },
    Wrapper {
        names: &["linux32", "linux64", "i386", "x86_64", "uname26"],
        ..SHELL_IF_EMPTY
    },
    Wrapper {
        names: &["numactl"],
        options: Spec {
            short_req: "imNCpPLoMISfw",
            long: &[
                ("interleave", Has::Req),
                ("membind", Has::Req),
                ("cpunodebind", Has::Req),
                ("physcpubind", Has::Req),
                ("preferred", Has::Req),
                ("preferred-many", Has::Req),
                ("weighted-interleave", Has::Req),
                ("length", Has::Req),
                ("offset", Has::Req),
                ("shmmode", Has::Req),
                ("shmid", Has::Req),
                ("shm", Has::Req),
                ("file", Has::Req),
                ("show", Has::No),
                ("hardware", Has::No),
            ],
            ..OPTIONS
        },
        short_no_exec: "sH",
        ..BASE
    },
    Wrapper {
        names: &["cgexec"],
        options: Spec {
            short_req: "g",
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &["fakeroot"],
        options: Spec {
            short_req: "lisb",
            long: &[("lib", Has::Req), ("faked", Has::Req)],
            ..OPTIONS
        },
        ..SHELL_IF_EMPTY
    },
    Wrapper {
        names: &["faketime"],
        options: Spec {
            short_req: "p",
            ..OPTIONS
        },
        leading_operands: 1,
        ..BASE
    },
    Wrapper {
        names: &["xvfb-run"],
        options: Spec {
            short_req: "efnpsw",
            long: &[
                ("error-file", Has::Req),
                ("auth-file", Has::Req),
                ("server-num", Has::Req),
                ("xauth-protocol", Has::Req),
                ("server-args", Has::Req),
                ("wait", Has::Req),
            ],
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &["ssh-agent"],
        options: Spec {
            short_req: "aEPtO",
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &["firejail"],
        ..SHELL_IF_EMPTY
    },
    Wrapper {
        names: &["proxychains", "proxychains4"],
        options: Spec {
            short_req: "f",
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &["busybox", "toybox"],
        options: Spec {
            long: &[
                ("list", Has::No),
                ("list-full", Has::No),
                ("install", Has::No),
                ("help", Has::No),
            ],
            ..OPTIONS
        },
        ..BASE
    },
    // Debuggers and tracers start the program they are given.
    Wrapper {
        names: &["strace"],
        options: Spec {
            short_req: "abeEIoOpPsSuUX",
            long: &[
                ("output", Has::Req),
                ("attach", Has::Req),
                ("string-limit", Has::Req),
                ("user", Has::Req),
                ("env", Has::Req),
                ("columns", Has::Req),
                ("trace", Has::Req),
                ("trace-path", Has::Req),
                ("signal", Has::Req),
                ("status", Has::Req),
                ("summary-sort-by", Has::Req),
                ("summary-columns", Has::Req),
                ("inject", Has::Req),
                ("fault", Has::Req),
                ("detach-on", Has::Req),
                ("const-print-style", Has::Req),
            ],
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &["ltrace"],
        options: Spec {
            short_req: "aADeFlnopsuxw",
            long: &[
                ("align", Has::Req),
                ("indent", Has::Req),
                ("library", Has::Req),
                ("output", Has::Req),
            ],
            ..OPTIONS
        },
        ..BASE
    },
    Wrapper {
        names: &["watch"],
        options: Spec {
            short_req: "nq",
            short_opt: "d",
            long: &[("interval", Has::Req), ("equexit", Has::Req)],
            ..OPTIONS
        },
        joined: true,
        ..BASE
    },
];

/// The row of `wrapper`, if it has one.
pub fn spec(wrapper: &str) -> Option<&'static Wrapper> {
    TABLE.iter().find(|row| row.names.contains(&wrapper))
}
