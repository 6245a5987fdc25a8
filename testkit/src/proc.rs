//! Processes killed on drop, temporary folders removed on drop, and waiting on a
//! process's own counters.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A child process killed on drop (so a failing test leaves nothing running).
pub struct Proc {
    /// The child.
    pub child: Child,
    /// Its name, for messages.
    pub name: String,
}

impl Proc {
    /// Spawns `bin args`, stdout and stderr captured to files in `dir`.
    pub fn spawn(bin: &Path, args: &[&str], dir: &Path, name: &str) -> Self {
        Self::spawn_env(bin, args, dir, name, &[])
    }

    /// [`Proc::spawn`] with environment variables `env` set.
    pub fn spawn_env(
        bin: &Path,
        args: &[&str],
        dir: &Path,
        name: &str,
        env: &[(String, String)],
    ) -> Self {
        let out = std::fs::File::create(dir.join(format!("{name}.stdout"))).unwrap();
        let err = std::fs::File::create(dir.join(format!("{name}.stderr"))).unwrap();
        let mut cmd = Command::new(bin);
        // Nothing from the developer's environment changes what a test runs (a
        // CREST_TOKEN, CREST_RATE, CREST_CONTROL_CA... left exported).
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("CREST_") {
                cmd.env_remove(k);
            }
        }
        let child = cmd
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        Self {
            child,
            name: name.to_string(),
        }
    }

    /// Waits up to `limit` for exit; panics (after killing) when it does not come.
    pub fn wait(&mut self, limit: Duration) -> i32 {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{} did not exit within {limit:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A temporary folder removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty folder under the system temp dir.
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("crest-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits (at most 30 s) until `calls()` reaches `n`: the run is under way.
pub fn wait_for_calls(n: u64, calls: impl Fn() -> u64) {
    let t0 = Instant::now();
    while calls() < n {
        assert!(t0.elapsed() < Duration::from_secs(30), "run never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`), while the process runs.
pub fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
