//! Attack: commands hidden inside Tier-0 tools (issue 12, failure 5). With `--deny git`,
//! `awk 'BEGIN{system("git --version")}'` classified as `tier0`; on Tier-0 it printed
//! `sh: 1: git: not found`, the emulation-gap back-stop retried it on Tier-1, and git ran there.
//! The same held for `sed '1e git'`, `tar --checkpoint-action=exec=git`, sqlite3's `.shell git`,
//! and every other Tier-0 tool feature that runs a command named in its arguments.
//!
//! Classification now reads those features, so the policy and the escalation decision apply
//! before anything runs, whatever the script does to its stderr. For each vector: with
//! `denyCommands: ["git"]` the script is refused (`policy-blocked git`), and without a policy it
//! escalates (`needs-real-exec git`). A command only known at run time is `dynamic-command`; a
//! program read from a file is `opaque-script`; ordinary uses of the same tools stay `tier0`.

use kube_harness_classify::{
    classify, Classification, ClassifyOptions, Decision, RealExecReason, Reason, Toggle, UNJUDGED,
};

fn classify_with(script: &str, deny: &[&str]) -> Classification {
    let mut options = ClassifyOptions::default();
    options.policy.deny_commands = deny.iter().map(|d| d.to_string()).collect();
    classify(script, &options)
}

/// Refused with `policy-blocked git` under `--deny git`, and escalated with
/// `needs-real-exec git (version-control)` without a policy.
fn assert_git_is_seen(script: &str) {
    let denied = classify_with(script, &["git"]);
    assert_eq!(denied.decision, Decision::Refuse, "{script}: {denied:?}");
    let blocked = Reason::PolicyBlocked {
        command: "git".into(),
        rule: "denyCommands".into(),
    };
    assert!(denied.reasons.contains(&blocked), "{script}: {denied:?}");

    let open = classify_with(script, &[]);
    assert_eq!(open.decision, Decision::Escalate, "{script}: {open:?}");
    let needs = Reason::NeedsRealExec {
        command: "git".into(),
        reason: RealExecReason::VersionControl,
    };
    assert!(open.reasons.contains(&needs), "{script}: {open:?}");
}

/// Escalated as `dynamic-command` naming `tool` without a policy; under `--deny git` refused
/// (fail closed: the command is unknown, and Tier-1 would run whatever it turns out to be).
fn assert_dynamic(script: &str, tool: &str) {
    for deny in [&[][..], &["git"][..]] {
        let got = classify_with(script, deny);
        let dynamic = got
            .reasons
            .iter()
            .any(|r| matches!(r, Reason::DynamicCommand { command, .. } if command == tool));
        assert!(dynamic, "{script}: {got:?}");
        if deny.is_empty() {
            assert_eq!(got.decision, Decision::Escalate, "{script}: {got:?}");
        } else {
            assert_refused_unjudged(script, &got, "dynamic-command");
        }
    }
}

/// Escalated as `opaque-script` with this description without a policy; refused under
/// `--deny git` (fail closed).
fn assert_opaque(script: &str, what: &str) {
    let opaque = Reason::OpaqueScript {
        command: what.into(),
    };
    let open = classify_with(script, &[]);
    assert_eq!(open.decision, Decision::Escalate, "{script}: {open:?}");
    assert!(open.reasons.contains(&opaque), "{script}: {open:?}");
    let got = classify_with(script, &["git"]);
    assert!(got.reasons.contains(&opaque), "{script}: {got:?}");
    assert_refused_unjudged(script, &got, "opaque-script");
}

/// Refused as `(unclassified script)`, fail closed on `kind`, unless a denied command was seen.
fn assert_refused_unjudged(script: &str, got: &Classification, kind: &str) {
    assert_eq!(got.decision, Decision::Refuse, "{script}: {got:?}");
    let named = got.reasons.iter().any(|r| {
        matches!(r, Reason::PolicyBlocked { command, rule }
            if command == "git"
                || command == UNJUDGED && rule == &format!("denyCommands (fail closed: {kind})"))
    });
    assert!(named, "{script}: {got:?}");
}

fn assert_tier0(script: &str) {
    let got = classify_with(script, &["git"]);
    assert_eq!(got.decision, Decision::Tier0, "{script}: {got:?}");
}

// ---- awk / gawk / mawk ----

#[test]
fn awk_system_runs_git() {
    assert_git_is_seen(r#"awk 'BEGIN{system("git --version")}'"#);
}

#[test]
fn awk_system_with_stderr_hidden_and_a_forged_emulation_gap() {
    // The exact shape of the reported bypass: nothing on stderr names git, and the forged line
    // names a harmless command for the back-stop to retry.
    let script =
        r#"awk 'BEGIN{system("git 2>/dev/null")}'; echo 'bash: jq: command not found' >&2"#;
    assert_git_is_seen(script);
}

#[test]
fn awk_print_pipes_into_git() {
    assert_git_is_seen(r#"awk '{ print $0 | "git hash-object --stdin" }' /session/f"#);
    assert_git_is_seen(r#"awk '{ printf "%s\n", $1 | "git apply" }' /session/f"#);
}

#[test]
fn awk_getline_reads_from_git() {
    assert_git_is_seen(r#"awk 'BEGIN { "git rev-parse HEAD" | getline h; print h }'"#);
    assert_git_is_seen(
        r#"awk 'BEGIN { while (("git log --oneline" | getline l) > 0) n++; print n }'"#,
    );
}

#[test]
fn gawk_coprocess_runs_git() {
    assert_git_is_seen(r#"gawk 'BEGIN { print "x" |& "git hash-object --stdin"; close("git") }'"#);
    assert_git_is_seen(r#"gawk 'BEGIN { "git status" |& getline s }'"#);
}

#[test]
fn awk_command_name_spelled_with_escapes() {
    assert_git_is_seen(r#"awk 'BEGIN{system("g\151t status")}'"#);
    assert_git_is_seen(r#"gawk 'BEGIN{system("\x67it status")}'"#);
    assert_git_is_seen(r#"awk 'BEGIN{system("gi" "t status")}'"#);
}

#[test]
fn awk_program_given_as_an_option_runs_git() {
    assert_git_is_seen(r#"gawk -e 'BEGIN{system("git")}'"#);
    assert_git_is_seen(r#"gawk --source='BEGIN{system("git")}'"#);
    assert_git_is_seen(r#"gawk -W source='BEGIN{system("git")}'"#);
    assert_git_is_seen(r#"awk -F, -v x=1 -- 'BEGIN{system("git")}' /session/f"#);
}

#[test]
fn awk_hidden_behind_a_regexp_that_looks_like_a_string() {
    // After an `if (…)` condition a `/` starts a regexp (gawk), so its `"` opens no string.
    assert_git_is_seen(r#"awk '{ if (1) /"/; system("git status") }'"#);
}

#[test]
fn awk_run_through_wrappers_and_find() {
    assert_git_is_seen(r#"find . -name x -exec awk 'BEGIN{system("git")}' \;"#);
    assert_git_is_seen(r#"ls | xargs awk '{ print | "git" }'"#);
    assert_git_is_seen(r#"timeout 5 /usr/bin/awk 'BEGIN{system("git")}'"#);
    assert_git_is_seen(r#"bash -c 'awk "BEGIN{system(\"git\")}"'"#);
}

#[test]
fn awk_run_time_commands_are_dynamic() {
    assert_dynamic(r#"awk '{ system($0) }' cmds.txt"#, "awk");
    assert_dynamic(r#"awk -v c=git 'BEGIN { system(c) }'"#, "awk");
    assert_dynamic(r#"awk '{ print | $2 }' f"#, "awk");
    assert_dynamic(r#"awk "BEGIN{system(\"$CMD\")}""#, "awk");
    assert_dynamic(r#"awk "$PROG" f"#, "awk");
    assert_dynamic(r#"gawk 'BEGIN { f = "system"; @f("git") }'"#, "gawk");
}

#[test]
fn awk_run_time_command_naming_a_denied_command_is_refused() {
    let script = r#"awk '{ system("git add " $1) }' files.txt"#;
    let denied = classify_with(script, &["git"]);
    assert_eq!(denied.decision, Decision::Refuse, "{denied:?}");
    assert!(denied.reasons.contains(&Reason::PolicyBlocked {
        command: "git".into(),
        rule: "denyCommands (named in a command only known at run time)".into(),
    }));
    let open = classify_with(script, &[]);
    assert_eq!(open.decision, Decision::Escalate, "{open:?}");
    assert!(open.reasons.contains(&Reason::DynamicCommand {
        command: "awk".into(),
        detail: "awk system() with a command only known at run time".into(),
    }));
}

#[test]
fn awk_program_files_and_extensions_are_opaque() {
    assert_opaque("awk -f prog.awk data.txt", "awk -f prog.awk");
    assert_opaque("gawk --file=prog.awk", "gawk -f prog.awk");
    assert_opaque(
        "gawk -i inplace '{ sub(/a/, \"b\") } 1' f",
        "gawk --include inplace",
    );
    assert_opaque("gawk -l ./ext.so 'BEGIN{}'", "gawk --load ./ext.so");
    assert_opaque(
        r#"gawk '@include "lib.awk"; BEGIN { f() }'"#,
        "awk @include lib.awk",
    );
}

#[test]
fn awk_hidden_python_obeys_the_python_toggle() {
    let mut options = ClassifyOptions::default();
    options.runtime.python = false;
    let got = classify(r#"awk 'BEGIN{system("python3 -c 1")}'"#, &options);
    assert_eq!(got.decision, Decision::Escalate, "{got:?}");
    assert!(got.reasons.contains(&Reason::CapabilityDisabled {
        command: "python3".into(),
        toggle: Toggle::Python,
    }));
}

// ---- sed ----

#[test]
fn sed_e_command_runs_git() {
    assert_git_is_seen("sed '1e git --version' /session/f");
    assert_git_is_seen("sed -n -e p -e '$e git status' /session/f");
    assert_git_is_seen("sed --expression='/x/{e git log\n}' /session/f");
}

#[test]
fn sed_s_e_flag_runs_git() {
    assert_git_is_seen("echo x | sed 's/.*/git --version/e'");
    assert_git_is_seen("echo x | sed 's|^.*$|git status|ge'");
}

#[test]
fn sed_run_time_commands_are_dynamic() {
    assert_dynamic("sed e cmds.txt", "sed");
    assert_dynamic("sed 's/^/echo /e' f", "sed");
    assert_dynamic(r#"sed "$SCRIPT" f"#, "sed");
    assert_dynamic(r#"sed -e "1e $CMD" f"#, "sed");
    let denied = classify_with("echo x | sed 's/x/git status/e'", &["git"]);
    assert_eq!(denied.decision, Decision::Refuse, "{denied:?}");
}

#[test]
fn sed_script_file_is_opaque() {
    assert_opaque("sed -f edit.sed f", "sed -f edit.sed");
    assert_opaque("sed --file=edit.sed -i f", "sed -f edit.sed");
}

// ---- tar ----

#[test]
fn tar_checkpoint_action_exec_runs_git() {
    assert_git_is_seen("tar -cf /tmp/x.tar --checkpoint=1 --checkpoint-action=exec=git .");
    assert_git_is_seen("tar -cf /tmp/x.tar --checkpoint-act=exec='git status' .");
}

#[test]
fn tar_to_command_runs_git() {
    assert_git_is_seen("tar -xf a.tar --to-command='git apply'");
    assert_git_is_seen("tar -xf a.tar --to-command git");
}

#[test]
fn tar_compress_program_runs_git() {
    assert_git_is_seen("tar -I git -cf x.tar .");
    assert_git_is_seen("tar -cvIgit -f x.tar .");
    assert_git_is_seen("tar --use-compress-program='git hash-object' -cf x.tar .");
    assert_git_is_seen("tar cIf git x.tar .");
}

#[test]
fn tar_volume_scripts_run_git() {
    assert_git_is_seen("tar -F git -cf x.tar .");
    assert_git_is_seen("tar --info-script=git -cf x.tar .");
    assert_git_is_seen("tar --new-volume-script git -cf x.tar .");
}

#[test]
fn tar_remote_shell_runs_git() {
    assert_git_is_seen("tar --rsh-command=/usr/bin/git -cf host:x.tar .");
    assert_git_is_seen("tar --rmt-command=git -cf host:x.tar .");
}

#[test]
fn tar_remote_archive_starts_the_remote_shell() {
    let got = classify_with("tar -czf backup:2024.tgz .", &[]);
    assert_eq!(got.decision, Decision::Escalate, "{got:?}");
    assert!(got.reasons.contains(&Reason::UnknownCommand {
        command: "rsh".into()
    }));
    assert_tier0("tar --force-local -czf backup:2024.tgz .");
}

#[test]
fn tar_run_time_command_is_dynamic() {
    assert_dynamic(r#"tar -xf a.tar --to-command="$C""#, "tar");
    assert_dynamic(r#"tar -xf a.tar --to-command=$C"#, "tar");
    assert_dynamic(r#"tar -I "$Z" -cf x.tar ."#, "tar");
    assert_dynamic(r#"tar -I"$Z" -cf x.tar ."#, "tar");
    assert_dynamic(
        r#"timeout 9 tar --checkpoint-action="exec=$C" -cf x.tar ."#,
        "tar",
    );
    assert_dynamic(r#"sort --compress-program="$P" f"#, "sort");
    assert_dynamic(r#"split --filter="$F" f"#, "split");
    assert_dynamic(r#"gawk --source="$P""#, "gawk");
    assert_dynamic(r#"sed --expression="1e $C" f"#, "sed");
}

// ---- sqlite3 ----

#[test]
fn sqlite_shell_and_system_run_git() {
    assert_git_is_seen("sqlite3 /session/app.db '.shell git --version'");
    assert_git_is_seen("sqlite3 :memory: '.system git status'");
    assert_git_is_seen("sqlite3 :memory: '.sh git status'");
}

#[test]
fn sqlite_output_pipes_run_git() {
    assert_git_is_seen("sqlite3 :memory: '.once |git hash-object --stdin' 'select 1'");
    assert_git_is_seen("sqlite3 :memory: \".output '|git apply'\" 'select 1'");
    assert_git_is_seen("sqlite3 :memory: \".read '|git show HEAD:q.sql'\"");
    assert_git_is_seen("sqlite3 :memory: \".import --csv '|git log' t\"");
}

#[test]
fn sqlite_cmd_option_runs_git() {
    assert_git_is_seen("sqlite3 -cmd '.shell git' /session/app.db 'select 1'");
}

#[test]
fn sqlite_heredoc_runs_git() {
    assert_git_is_seen("sqlite3 /session/app.db <<'EOF'\nselect 1;\n.shell git status\nEOF");
    assert_git_is_seen("sqlite3 /session/app.db <<< '.system git'");
}

#[test]
fn sqlite_edit_function_runs_git() {
    assert_git_is_seen("sqlite3 :memory: \"select edit('x', 'git commit -F')\"");
}

#[test]
fn sqlite_run_time_commands_are_dynamic() {
    assert_dynamic(r#"sqlite3 db "$SQL""#, "sqlite3");
    assert_dynamic("sqlite3 db <<EOF\n.shell $CMD\nEOF", "sqlite3");
    assert_dynamic("sqlite3 db \"select edit(body) from notes\"", "sqlite3");
}

#[test]
fn sqlite_files_extensions_and_piped_commands_are_opaque() {
    assert_opaque("sqlite3 db '.read schema.sql'", "sqlite3 .read schema.sql");
    assert_opaque(
        "sqlite3 -init setup.sql db 'select 1'",
        "sqlite3 -init setup.sql",
    );
    assert_opaque("sqlite3 db '.load ./ext.so'", "sqlite3 .load ./ext.so");
    assert_opaque(
        "sqlite3 db \"select load_extension('./x')\"",
        "sqlite3 load_extension()",
    );
    assert_opaque("sqlite3 db < dump.sql", "sqlite3 (commands on stdin)");
    assert_opaque(
        "echo '.shell git' | sqlite3 db",
        "sqlite3 (commands on stdin)",
    );
}

// ---- sort, split, ripgrep ----

#[test]
fn sort_compress_program_runs_git() {
    assert_git_is_seen("sort --compress-program=git -S 1k big.txt");
    assert_git_is_seen("sort --compress git big.txt");
    // Quoting cannot hide the option from the classifier (the walk only skips `sort` arguments
    // whose text has fewer than two `-`).
    assert_git_is_seen(r#"sort -\-compress-program=git big.txt"#);
    assert_git_is_seen(r#"sort -"-"compress-program=git big.txt"#);
}

#[test]
fn split_filter_runs_git() {
    assert_git_is_seen("split -l 1 --filter='git hash-object --stdin' f");
}

#[test]
fn ripgrep_preprocessor_runs_git() {
    assert_git_is_seen("rg --pre git pattern .");
    assert_git_is_seen("rg --pre=/usr/bin/git pattern .");
}

// ---- bash builtins that evaluate code they are given ----

#[test]
fn trap_action_runs_git() {
    assert_git_is_seen("trap 'git status' EXIT; ls");
    assert_git_is_seen("trap -- 'git stash' INT TERM");
}

#[test]
fn alias_hash_and_mapfile_run_git() {
    assert_git_is_seen("shopt -s expand_aliases; alias ll='git log'");
    assert_git_is_seen("hash -p /usr/bin/git ls; ls");
    assert_git_is_seen("mapfile -t -C 'git status' -c 1 lines < f");
}

#[test]
fn array_subscripts_evaluated_by_builtins_run_git() {
    assert_git_is_seen("a=(1); unset 'a[$(git status)]'");
    assert_git_is_seen("let 'x=a[`git status`]'");
    assert_git_is_seen("printf -v 'a[$(git status)]' %s x");
    assert_git_is_seen("read 'a[$(git status)]' <<< x");
    // Quoting split inside `$(` does not hide it.
    assert_git_is_seen("unset 'a[$''(git status)]'");
    assert_git_is_seen("declare -i n='a[$''(git status)]'");
}

#[test]
fn array_subscripts_in_declarations_and_tests_run_git() {
    assert_git_is_seen("declare -i n='a[$(git status)]'");
    assert_git_is_seen("declare 'a[$(git status)]=1'");
    assert_git_is_seen("f() { local 'b[$(git status)]=1'; }; f");
    assert_git_is_seen("[[ -v 'a[$(git status)]' ]]");
    assert_git_is_seen("[[ 'a[$(git status)]' -eq 0 ]]");
}

#[test]
fn builtin_loading_a_shared_object_is_opaque() {
    assert_opaque("enable -f ./evil.so evil; evil", "enable -f ./evil.so");
}

// ---- ordinary uses stay on Tier-0 ----

#[test]
fn ordinary_uses_of_the_same_tools_stay_on_tier0() {
    for script in [
        "awk 'BEGIN { x = 1 }'",
        "awk '{print $1}' data.txt",
        "awk '{print $1}' data.txt | sort",
        "awk -F'|' '{print $2}' table.md",
        r#"awk '{ printf "| %s | %s |\n", $1, $2 }' f"#,
        r#"awk '{ print "system" }' f"#,
        "awk '/system/ { n++ } END { print n }' /var/log/syslog",
        "awk 'NR > 1 || /x|y/ { print }' f",
        "awk '{ a = $1 / 2; b = $2 / 4 } END { print a \"|\" b }' f",
        r#"awk 'BEGIN { while (("date" | getline d) > 0) print d }'"#,
        r#"awk '{ print | "sort -u" }' f"#,
        // Found by classify_properties: a substitution's quoted text is not arithmetic.
        r#"export V=$( awk '{ print | "echo $( echo  )" }' f )"#,
        r#"declare V=$( awk '{ print | "echo $( echo  )" }' f )"#,
        "grep -c system /var/log/syslog",
        "sed 's/e/x/' f",
        "sed -e 's/a/b/' f",
        "sed -i.bak 's/foo/bar/g' f",
        "sed -n '/error/p' log.txt",
        "sed ':a;N;$!ba;s/\\n/ /g' f",
        "sed '1i\\\nheader line' f",
        "sed 'w /dev/stderr' f",
        "sed '/start/,/end/{/e/d}' f",
        "sed '1e date' f",
        "tar -xzf a.tgz",
        "tar -czf /artifacts/session.tgz -C /session .",
        "tar xzf archive.tgz -C out",
        "tar -cf x.tar --checkpoint=100 --checkpoint-action=dot .",
        "sqlite3 db 'select 1'",
        "sqlite3 -json /session/app.db 'select * from users limit 5'",
        "sqlite3 /session/app.db '.tables' '.schema users'",
        "sqlite3 db \"update notes set edited = 1 where credit > 0\"",
        "sqlite3 db <<'EOF'\n.mode csv\nselect 1;\nEOF",
        "sqlite3 db '.once out.txt' 'select 1'",
        "sort -u -k2 names.txt",
        "split -l 100 big.txt part_",
        "rg -n 'fn main' --type rust",
        "rg --pre-glob '*.pdf' x",
        "trap 'rm -f /tmp/x' EXIT; touch /tmp/x",
        "cleanup() { rm -rf /tmp/w; }; trap cleanup EXIT",
        "trap - EXIT",
        "alias ll='ls -l'",
        "unset 'a[1]' x",
        "printf -v out '%s' \"$(date)\"",
        "printf '%s\\n' '$(not run)'",
        "read -r line < f",
        "declare -i n=0; local x='plain'",
        "[[ -v a[1] ]] && [[ $n -eq 1 ]]",
        "tar -czf \"$OUT\" -C \"$DIR\" .",
        "sort -k2 \"$f\"",
    ] {
        assert_tier0(script);
    }
}

// ---- variables that change what a tool runs ----

#[test]
fn tar_options_variable_runs_git() {
    assert_git_is_seen("TAR_OPTIONS='--to-command=git apply' tar -xf a.tar");
    assert_git_is_seen("export TAR_OPTIONS=--checkpoint-action=exec=git; tar -cf x.tar .");
    assert_git_is_seen("env TAR_OPTIONS=-Igit tar -cf x.tar .");
}

#[test]
fn xtrace_prompt_runs_git() {
    assert_git_is_seen("PS4='+ $(git status) '; set -x; ls");
}

#[test]
fn start_up_and_config_files_named_by_variables_are_opaque() {
    assert_opaque(
        "BASH_ENV=/session/e.sh bash -c ls",
        "BASH_ENV=/session/e.sh (bash runs it at start-up)",
    );
    assert_opaque(
        "export RIPGREP_CONFIG_PATH=/session/rgrc; rg x",
        "RIPGREP_CONFIG_PATH=/session/rgrc (rg reads options from it)",
    );
}

// ---- issue 12, second round: classification misses (an outside tester's findings B1–B7) ----
//
// Each vector ran git under `--deny git`, usually on Tier-1 after a visible `make --version`
// escalated the turn legitimately. The tests below put `make --version;` in front where the
// shape of the attack needs it; the decision is the same without it.

fn unparsed_rule() -> String {
    "denyCommands (named in a script that could not be parsed)".into()
}

/// Refused naming git by `rule` under `--deny git`; without a policy, escalated with `open`.
fn assert_refused_as(script: &str, rule: &str, open: &Reason) {
    let denied = classify_with(script, &["git"]);
    assert_eq!(denied.decision, Decision::Refuse, "{script}: {denied:?}");
    let blocked = Reason::PolicyBlocked {
        command: "git".into(),
        rule: rule.into(),
    };
    assert!(denied.reasons.contains(&blocked), "{script}: {denied:?}");
    let got = classify_with(script, &[]);
    assert_eq!(got.decision, Decision::Escalate, "{script}: {got:?}");
    assert!(got.reasons.contains(open), "{script}: {got:?}");
}

// B1: command substitutions the walk did not see.

#[test]
fn backquotes_inside_parameter_expansion_operators_run_git() {
    for script in [
        "make --version; echo ${x:-`git --version`}",
        "echo ${x/`git --version`/}",
        "echo ${x//[`git --version`]/}",
        "echo ${x#`git --version`}",
        "echo ${x%%*`git --version`}",
        "echo ${x:=`git --version`}",
        ": ${x?`git --version`}",
        "echo \"${x:+`git --version`}\"",
        "echo ${x:-${y:-`git --version`}}",
        "echo ${x:-$[`git --version`]}",
        "[[ $x =~ `git` ]]",
        // Single quotes are plain characters inside a double-quoted expansion.
        "echo \"${x:-'`git --version`'}\"",
    ] {
        assert_git_is_seen(script);
    }
}

#[test]
fn backquotes_inside_an_expansion_in_an_unquoted_heredoc_run_git() {
    assert_git_is_seen("cat <<EOF\n${x:-`git --version`}\nEOF");
    assert_git_is_seen("cat <<EOF\nv=${x#`git --version`} and \\${y}\nEOF");
}

#[test]
fn nested_backquotes_run_git() {
    assert_git_is_seen("echo `echo \\`git --version\\``");
    assert_git_is_seen("echo \"`echo \\`git --version\\``\"");
    assert_git_is_seen("echo `echo \\`echo \\\\\\`git --version\\\\\\`\\``");
}

#[test]
fn escaped_dollar_inside_backquotes_runs_git() {
    // tree-sitter-bash fails on `\$(` inside backquotes; bash unescapes it and runs git. The parse
    // failure already refused this before (git is a plain word there): a guard, not a new fix.
    let script = "echo `echo \\$(git --version)`";
    assert_refused_as(
        script,
        &unparsed_rule(),
        &Reason::ParseFailed {
            detail: "syntax error at line 1, column 12: unexpected `\\$`".into(),
        },
    );
}

#[test]
fn quoted_text_evaluated_as_arithmetic_runs_git() {
    // Bash evaluates a variable's value as an arithmetic expression wherever a name appears in
    // one, and an array subscript in it runs `$(…)`.
    for sink in [
        "echo $(( x ))",
        "(( x ))",
        "[[ $x -eq 1 ]]",
        "declare -i n; n=x",
        "let x",
        "echo ${arr[x]}",
        "echo ${s:x:1}",
        "for (( i = x; i < 0; i++ )); do :; done",
    ] {
        assert_git_is_seen(&format!("make --version; x='a[$(git --version)]'; {sink}"));
    }
    // However the value is written and wherever it is set.
    for set in [
        "x=\"a[\\$(git --version)]\"",
        "x=a\\[\\$\\(git\\ --version\\)\\]",
        "x=$'a[\\x24(git --version)]'",
        "x='a[$'\"$empty\"'(git --version)]'",
        "x='a[`git --version`]'",
        "declare x='a[$(git --version)]'",
        "local -a x=('a[$(git --version)]')",
        "x=(1 'a[$(git --version)]')",
        "for x in 'a[$(git --version)]'; do :; done",
        "read -r x <<< 'a[$(git --version)]'",
        "read -r x <<'EOF'\na[$(git --version)]\nEOF",
        "set -- 'a[$(git --version)]'; x=$1",
        "f() { echo $(( $1 )); }; f 'a[$(git --version)]'",
        "printf -v x '%s' 'a[$(git --version)]'",
    ] {
        assert_git_is_seen(&format!("{set}; echo $(( x ))"));
    }
}

#[test]
fn quoted_text_expanded_as_a_prompt_runs_git() {
    assert_git_is_seen("make --version; x='$(git --version)'; echo ${x@P}");
    assert_git_is_seen("x='\\u `git --version`'; echo \"${x@P}\"");
}

#[test]
fn prompt_expansion_of_a_run_time_value_is_dynamic() {
    for script in [
        "x=$(cat /session/p); echo ${x@P}",
        "read -r x < /session/p; echo ${x@P}",
        "echo ${PS1@P}",
        "y=x; echo ${!y@P}",
        "x='\\u'; eval \"x=\\$(cat f)\"; echo ${x@P}",
    ] {
        for deny in [&[][..], &["git"][..]] {
            let got = classify_with(script, deny);
            let dynamic = got.reasons.iter().any(|r| {
                matches!(r, Reason::DynamicCommand { detail, .. }
                    if detail == "a prompt expansion (`@P`) of a value only known at run time")
            });
            assert!(dynamic, "{script}: {got:?}");
            if deny.is_empty() {
                assert_eq!(got.decision, Decision::Escalate, "{script}: {got:?}");
            } else {
                assert_refused_unjudged(script, &got, "dynamic-command");
            }
        }
    }
}

// B2: commands that run another command are wrappers, so the wrapped one is policy-checked.

#[test]
fn wrappers_that_run_their_arguments_run_git() {
    for script in [
        "setsid git --version",
        "setsid -f -w git --version",
        "coproc git --version",
        "coproc G { git --version; }",
        "flock /tmp/lock git --version",
        "flock -w 5 /tmp/lock git --version",
        "flock /tmp/lock -c 'git --version'",
        "watch git --version",
        "watch -n 1 -d git --version",
        "chroot /srv git --version",
        "chroot --userspec=a:b /srv git --version",
        "chroot /srv <<EOF\ngit --version\nEOF",
        "unshare git --version",
        "unshare -r --propagation private git --version",
        "ionice -c3 git --version",
        "ionice -c 3 -n 7 git --version",
        "taskset -c 0 git --version",
        "taskset 0x1 git --version",
        "chrt 1 git --version",
        "chrt -o 0 git --version",
        "runuser -u x -- git --version",
        "runuser x -c 'git --version'",
        "su -c 'git --version'",
        "su - root -c 'git --version'",
        "su -s /usr/bin/git root",
        "su root <<< 'git --version'",
        "script -qc 'git --version' /dev/null",
        "script -q /dev/null --command='git --version'",
        "parallel git ::: --version",
        "parallel -j 2 ::: 'git --version' ls",
        "parallel '{} --version' ::: git",
        "parallel sh -c ::: 'git --version'",
        "busybox git --version",
        "strace -f -o /tmp/t git --version",
        "ltrace -o /tmp/t git --version",
        "valgrind --tool=none -q git --version",
        "gdb --args git --version",
        "gdb -batch -ex run git",
        "gdb -ex 'shell git --version'",
        "lldb -- git --version",
        "doas git --version",
        "doas -u root git --version",
        "nohup git --version",
        "pkexec git --version",
        "sg wheel -c 'git --version'",
        "setpriv --reuid 1000 git --version",
        "setarch x86_64 -R git --version",
        "prlimit --nofile=10 git --version",
        "numactl -N 0 git --version",
        "nsenter -t 1 -m git --version",
        "fakeroot git --version",
        "eatmydata git --version",
        "faketime '2020-01-01' git --version",
        "entr -s 'git --version' < list",
        "pee 'git --version' cat < f",
        "cgexec -g cpu:x git --version",
        "xvfb-run -a git --version",
        "nice timeout 5 setsid flock /tmp/l git --version",
    ] {
        assert_git_is_seen(script);
    }
}

#[test]
fn wrappers_run_their_tier0_commands_on_tier0() {
    for script in [
        "coproc sleep 1",
        "coproc W { sleep 1; }",
        "nohup sleep 1 &",
        "timeout 5 nice -n 5 ls",
    ] {
        assert_tier0(script);
    }
    // A wrapper that is not a Tier-0 program still escalates, as itself.
    let got = classify_with("setsid sleep 1", &["git"]);
    assert_eq!(got.decision, Decision::Escalate, "{got:?}");
    assert!(got.reasons.contains(&Reason::UnknownCommand {
        command: "setsid".into()
    }));
}

#[test]
fn arguments_of_a_command_the_classifier_cannot_see_into_are_policy_checked() {
    // An unknown program, a script file or a run-time name may run its arguments: with a deny
    // policy, naming the denied command there refuses instead of escalating.
    let rule = "denyCommands (named in an argument of a command the classifier cannot see into)";
    let cases = [
        ("frobnicate-wrapper git --version", "frobnicate-wrapper"),
        ("bwrap --bind / / git --version", "bwrap"),
        ("tmux new-session -d 'git --version'", "tmux"),
    ];
    for (script, unknown) in cases {
        assert_refused_as(
            script,
            rule,
            &Reason::UnknownCommand {
                command: unknown.into(),
            },
        );
    }
    assert_refused_as(
        "./run.sh git --version",
        rule,
        &Reason::OpaqueScript {
            command: "./run.sh".into(),
        },
    );
    assert_refused_as(
        "$RUNNER git --version",
        rule,
        &Reason::DynamicCommand {
            command: "$RUNNER".into(),
            detail: "the command name is only known at run time".into(),
        },
    );
    assert_refused_as(
        "env \"$X\" git --version",
        rule,
        &Reason::DynamicCommand {
            command: "env".into(),
            detail: "the wrapped command is only known at run time".into(),
        },
    );
}

// B3: env's own command line.

#[test]
fn env_command_lines_run_git() {
    for script in [
        "env -- X=1 git --version",
        "env -i -- A=1 B=2 git --version",
        "env - git --version",
        "env -S env git --version",
        "env -S 'env git --version'",
        "env -S -i git --version",
        "env -S \"-i git --version\"",
        "env -S '\\_git --version'",
        "env -S 'env -S \"git --version\"'",
        "env --split-string='-i' git --version",
        "env -S'A=1 git' --version",
    ] {
        assert_git_is_seen(script);
    }
    assert_tier0("env -S 'env rm -v f'");
    assert_tier0("env -S '-i PATH=/bin ls -l'");
}

// B4: a line continuation inside a word.

#[test]
fn line_continuation_inside_a_command_name_runs_git() {
    assert_git_is_seen("g\\\nit --version");
    assert_git_is_seen("make --version; gi\\\nt --version");
    assert_git_is_seen("echo $\\\n(git --version)");
    assert_git_is_seen("x=1 g\\\ni\\\nt --version");
    assert_git_is_seen("echo \"$\\\n(git --version)\"");
    assert_git_is_seen("cat <<EOF\n$\\\n(git --version)\nEOF");
    // In single quotes, comments and quoted heredocs a backslash-newline is text.
    assert_tier0("echo 'g\\\nit'");
    assert_tier0("echo hi # g\\\nls");
    assert_tier0("cat <<'EOF'\ng\\\nit\nEOF");
    assert_tier0("ls -la \\\n  /tmp");
}

// B5: a script that does not parse is refused when it names a denied command, however quoted.

#[test]
fn unparsable_script_naming_a_quoted_or_escaped_denied_command_is_refused() {
    for name in [
        "g\\it",
        "\"g\"it",
        "gi''t",
        "$'\\x67it'",
        "'git'",
        "g\\\nit",
    ] {
        let script = format!("a=(x) > /tmp/f; {name} --version");
        let got = classify_with(&script, &[]);
        assert_eq!(got.decision, Decision::Escalate, "{script}: {got:?}");
        assert!(got.kinds().contains(&"parse-failed"), "{script}: {got:?}");
        let denied = classify_with(&script, &["git"]);
        let blocked = Reason::PolicyBlocked {
            command: "git".into(),
            rule: unparsed_rule(),
        };
        assert_eq!(denied.decision, Decision::Refuse, "{script}: {denied:?}");
        assert!(denied.reasons.contains(&blocked), "{script}: {denied:?}");
    }
}

#[test]
fn ansi_c_quoted_command_name_is_read() {
    assert_git_is_seen("$'\\x67it' --version");
    assert_git_is_seen("$'\\147\\151\\164' --version");
    assert_git_is_seen("[ a == b ]; $'g\\u0069t' --version");
}

// B6: with a policy, a script the classifier cannot judge is refused.

#[test]
fn nesting_beyond_the_limit_with_a_denied_command_is_refused() {
    let script = format!("{}git --version", "eval ".repeat(17));
    let open = classify_with(&script, &[]);
    assert_eq!(open.decision, Decision::Escalate, "{open:?}");
    assert!(open.kinds().contains(&"classifier-unavailable"), "{open:?}");
    let denied = classify_with(&script, &["git"]);
    assert_eq!(denied.decision, Decision::Refuse, "{denied:?}");
    assert!(denied.reasons.contains(&Reason::PolicyBlocked {
        command: "git".into(),
        rule: unparsed_rule(),
    }));
}

#[test]
fn wrapper_chain_beyond_the_limit_is_refused_and_does_not_crash() {
    // 13,000 wrappers deep overflowed the stack (an abort, not a catchable panic) before.
    for count in [17, 13_000] {
        let script = format!("{}git --version", "nohup ".repeat(count));
        let open = classify_with(&script, &[]);
        assert_eq!(open.decision, Decision::Escalate, "{count}: {open:?}");
        assert!(
            open.reasons.contains(&Reason::ClassifierUnavailable {
                detail: "commands nested more than 16 levels deep".into(),
            }),
            "{count}: {open:?}"
        );
        let denied = classify_with(&script, &["git"]);
        assert_eq!(denied.decision, Decision::Refuse, "{count}: {denied:?}");
        let blocked = denied.reasons.iter().any(|r| {
            matches!(r, Reason::PolicyBlocked { command, rule }
                if command == "git" && rule.starts_with("denyCommands (named in "))
        });
        assert!(blocked, "{count}: {denied:?}");
    }
    assert_tier0("nohup nice -n 1 timeout 5 stdbuf -oL env A=1 ls");
}

#[test]
fn with_a_policy_an_unjudged_script_fails_closed() {
    let unjudged = |kind: &str| Reason::PolicyBlocked {
        command: "(unclassified script)".into(),
        rule: format!("denyCommands (fail closed: {kind})"),
    };
    // No denied name anywhere to be seen: still refused while a policy is in force.
    let nested = format!("{}ls", "eval ".repeat(17));
    for (script, kind) in [
        ("a=(x) > /tmp/f; ls", "parse-failed"),
        ("echo $(ls", "parse-failed"),
        (nested.as_str(), "classifier-unavailable"),
    ] {
        let denied = classify_with(script, &["git"]);
        assert_eq!(denied.decision, Decision::Refuse, "{script}: {denied:?}");
        assert_eq!(denied.reasons[0], unjudged(kind), "{script}: {denied:?}");
        let open = classify_with(script, &[]);
        assert_eq!(open.decision, Decision::Escalate, "{script}: {open:?}");
        assert!(open.kinds().contains(&kind), "{script}: {open:?}");
    }
    // A rule hook is a policy too.
    let mut options = ClassifyOptions::default();
    options.policy.rule = Some(std::sync::Arc::new(|_| None));
    let got = classify("a=(x) > /tmp/f; ls", &options);
    assert_eq!(got.decision, Decision::Refuse, "{got:?}");
    assert_eq!(
        got.reasons[0],
        Reason::PolicyBlocked {
            command: "(unclassified script)".into(),
            rule: "policy (fail closed: parse-failed)".into(),
        }
    );
}

// B7: variables that change what a tool runs, set in ways the walk did not see.

#[test]
fn tar_options_set_through_a_nameref_runs_git() {
    assert_git_is_seen(
        "declare -n r=TAR_OPTIONS; export TAR_OPTIONS; r=--to-command=git; tar -xf a.tar",
    );
    assert_git_is_seen("declare -n r; r=TAR_OPTIONS; r='--to-command=git'; tar -xf a.tar");
    assert_git_is_seen(
        "f() { local -n a=TAR_OPTIONS; local -n b=a; b=-Igit; }; f; tar -cf x.tar .",
    );
}

#[test]
fn tar_options_set_by_read_mapfile_for_and_default_expansions_runs_git() {
    for script in [
        "read TAR_OPTIONS <<< '--to-command=git'; export TAR_OPTIONS; tar -xf a.tar",
        "read -r TAR_OPTIONS <<'EOF'\n--to-command=git\nEOF\nexport TAR_OPTIONS; tar -xf a.tar",
        "mapfile -t TAR_OPTIONS <<< '--to-command=git'; export TAR_OPTIONS; tar -xf a.tar",
        "readarray TAR_OPTIONS <<< '--to-command=git'",
        "export TAR_OPTIONS; : ${TAR_OPTIONS:=--to-command=git}; tar -xf a.tar",
        "for TAR_OPTIONS in --to-command=git; do export TAR_OPTIONS; tar -xf a.tar; done",
        "read PS4 <<< '$(git --version)'; set -x; ls",
    ] {
        assert_git_is_seen(script);
    }
}

#[test]
fn tar_options_set_by_printf_or_run_time_input_is_dynamic() {
    let script = "printf -v TAR_OPTIONS %s --to-command=git; export TAR_OPTIONS; tar -xf a.tar";
    assert_refused_as(
        script,
        "denyCommands (named in a command only known at run time)",
        &Reason::DynamicCommand {
            command: "the environment".into(),
            detail: "TAR_OPTIONS set by printf -v at run time".into(),
        },
    );
    for script in [
        "read TAR_OPTIONS < /session/opts; export TAR_OPTIONS; tar -xf a.tar",
        "mapfile -t TAR_OPTIONS < /session/opts",
    ] {
        assert_dynamic(script, "the environment");
    }
}

// Ordinary scripts of the same shapes stay on Tier-0.

#[test]
fn ordinary_scripts_of_the_same_shapes_stay_on_tier0() {
    for script in [
        "echo '$(date)'",
        "printf '%s\\n' '$(not run)' \"${HOME:-/root}\" \"${x#prefix}\" \"${y//a/b}\"",
        "awk '{print $(NF-1)}' f",
        "x=$(awk '{print $(NF-1)}' f); echo \"$x\"",
        "msg='Use `ls` to list'; echo \"$msg\"",
        "cat > README.md <<'EOF'\nRun `git status` and `cargo build`\nEOF",
        "count=$(grep -c x f); if [[ $count -gt 0 ]]; then echo y; fi",
        "i=0; while (( i < 3 )); do i=$((i+1)); done",
        "read -r a b <<< \"1 2\"; echo $((a+b))",
        "set -- a b; echo \"$@\"",
        "x=$'line1\\nline2'; echo \"$x\"",
        "s='abc'; echo ${s@P} ${s@Q}",
        "sed -i 's/$(VERSION)/1.0/' Makefile",
        "grep -E '`' f",
        "echo \\`not a command\\`",
        "timeout 5 grep -r git .",
        "xargs grep git < files",
        "env -i PATH=/bin ls",
        "echo foo\\\nbar",
        "TAR_OPTIONS=--verbose tar -xf a.tar",
        "read -r TAR_OPTIONS <<< '--verbose'; tar -xf a.tar",
    ] {
        assert_tier0(script);
    }
}

// ---- commands the classifier cannot name (second outside attack) ----

/// Each of these ran git on Tier-1 under `--deny git`: the command name is only known at run
/// time, or the script is read from somewhere classification cannot see, so the turn escalated
/// to the tier with every program. Under a policy they are refused now; without one they still
/// escalate.
#[test]
fn commands_it_cannot_name_are_refused_under_a_deny_policy() {
    let scripts = [
        "source /dev/stdin <<< 'git --version'",
        ". <(echo git --version)",
        "bash <(echo git --version)",
        "bash < <(echo git --version)",
        "echo git --version | bash",
        "echo 'git --version' > /tmp/x; bash /tmp/x",
        "cat <<< 'git --version' | sh",
        "readarray -t a <<< 'git'; \"${a[0]}\" --version",
        "a=(git --version); \"${a[@]}\"",
        "set -- git --version; \"$@\"",
        "x=git; $x --version",
        "IFS=_; x=git_--version; $x",
        "f() { \"$@\"; }; f git --version",
        "declare -A m=([k]=git); ${m[k]} --version",
        "\"$(printf git)\" --version",
        "`echo git` --version",
        "${x:-git} --version",
        "bash -c \"$(echo 'git --version')\"",
        "h=git; ${h} --version",
        "declare -n r=h; h=git; $r --version",
        "g{i,}t --version",
        "g{i..i}t --version",
        "nice g{i,}t --version",
        "/usr/bin/gi? --version",
        "/usr/bin/gi[t] --version",
        "ln -s /usr/bin/git g; ./g --version",
    ];
    for script in scripts {
        let got = classify_with(script, &["git"]);
        assert_eq!(got.decision, Decision::Refuse, "{script}: {got:?}");
        let open = classify_with(script, &[]);
        assert_ne!(open.decision, Decision::Tier0, "{script}: {open:?}");
    }
}

/// Brace and pathname expansion make a command name run-time dependent; `[` and `{` alone
/// are the test builtin and a group, not expansions.
#[test]
fn expansions_in_a_command_name_are_dynamic() {
    for script in [
        "g{i,}t",
        "g{i..i}t",
        "/usr/bin/gi?",
        "/usr/bin/g*",
        "/usr/bin/gi[t]",
    ] {
        let got = classify_with(script, &[]);
        assert!(
            got.reasons
                .iter()
                .any(|r| matches!(r, Reason::DynamicCommand { .. })),
            "{script}: {got:?}"
        );
    }
    for script in [
        "[ -f x ]",
        "{ ls; }",
        "echo g{i,}t",
        "ls *.txt",
        "test -d a",
    ] {
        assert_tier0(script);
    }
}

/// Issue 29, item 2: a tool that runs its argument with `/bin/sh -c` runs `sh`. Under a deny
/// policy naming `sh`, awk `system()`, sqlite3 `.shell`, sed's `e` and a wrapper's shell text are
/// refused before anything runs (they were `tier0` before); without the policy they stay Tier-0.
#[test]
fn a_hidden_shell_names_sh_for_the_deny_policy() {
    let blocked = Reason::PolicyBlocked {
        command: "sh".into(),
        rule: "denyCommands".into(),
    };
    for script in [
        r#"awk 'BEGIN{system("ls")}'"#,
        "sqlite3 db '.shell ls'",
        "sed '1e ls' f",
        "echo a | awk '{print | \"cat\"}'",
    ] {
        let got = classify_with(script, &["sh"]);
        assert_eq!(got.decision, Decision::Refuse, "{script}: {got:?}");
        assert!(got.reasons.contains(&blocked), "{script}: {got:?}");
        assert_tier0(script);
        // A deny policy naming something else leaves it alone.
        let other = classify_with(script, &["git"]);
        assert_eq!(other.decision, Decision::Tier0, "{script}: {other:?}");
    }
}
