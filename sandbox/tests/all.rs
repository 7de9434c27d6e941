//! The integration tests, compiled as one test binary (see suite/), except the fork bomb
//! (attack_fork_bomb.rs), which moves its whole process into a pids cgroup, and orphans.rs,
//! which makes its process a child subreaper.

mod suite;
