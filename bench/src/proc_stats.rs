//! CPU time and memory of a process, read from Linux's `/proc/<pid>/stat` and
//! `/proc/<pid>/status`.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("/proc stat line without {0}")]
    Stat(&'static str),
    #[error("/proc status without a {0} line in kB")]
    Status(&'static str),
}

/// One reading of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessSample {
    /// User plus system CPU time, in clock ticks.
    pub cpu_ticks: u64,
    /// Resident memory now (`VmRSS`).
    pub rss_bytes: u64,
    /// The most resident memory so far (`VmHWM`).
    pub peak_rss_bytes: u64,
}

/// `utime + stime` from a `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may itself hold spaces and parentheses, so fields are counted
/// from the last `)`.
pub fn parse_stat_cpu_ticks(stat: &str) -> Result<u64, ProcError> {
    let after_name = stat
        .rfind(')')
        .map(|at| &stat[at + 1..])
        .ok_or(ProcError::Stat("a command name"))?;
    // After the name come field 3 (state) onwards; utime is field 14, stime 15.
    let mut fields = after_name.split_whitespace().skip(11);
    let mut next = |what| {
        fields
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or(ProcError::Stat(what))
    };
    Ok(next("utime")? + next("stime")?)
}

/// The value of a `Key:   123 kB` line of `/proc/<pid>/status`, in bytes.
pub fn parse_status_bytes(status: &str, key: &'static str) -> Result<u64, ProcError> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|value| value.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or(ProcError::Status(key))
}

/// Reads process `pid` now.
pub fn sample(pid: u32) -> Result<ProcessSample, ProcError> {
    let read = |file: &str| {
        let path = PathBuf::from(format!("/proc/{pid}/{file}"));
        std::fs::read_to_string(&path).map_err(|source| ProcError::Read { path, source })
    };
    let status = read("status")?;
    Ok(ProcessSample {
        cpu_ticks: parse_stat_cpu_ticks(&read("stat")?)?,
        rss_bytes: parse_status_bytes(&status, "VmRSS")?,
        peak_rss_bytes: parse_status_bytes(&status, "VmHWM")?,
    })
}

/// Clock ticks per second, the unit of `/proc/<pid>/stat` CPU times.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // Linux has used 100 everywhere for decades; taken if sysconf fails.
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// CPU time of the calling thread so far, in seconds.
pub fn thread_cpu_seconds() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec the call writes into.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if result != 0 {
        return 0.0;
    }
    now.tv_sec as f64 + now.tv_nsec as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = include_str!("../tests/fixtures/proc_stat.txt");
    const STATUS: &str = include_str!("../tests/fixtures/proc_status.txt");

    #[test]
    fn cpu_ticks_are_utime_plus_stime_counted_after_the_name() {
        assert_eq!(parse_stat_cpu_ticks(STAT).ok(), Some(1523 + 311));
    }

    #[test]
    fn memory_lines_are_read_in_bytes() {
        assert_eq!(
            parse_status_bytes(STATUS, "VmRSS").ok(),
            Some(48_212 * 1024)
        );
        assert_eq!(
            parse_status_bytes(STATUS, "VmHWM").ok(),
            Some(61_440 * 1024)
        );
        assert!(parse_status_bytes(STATUS, "VmSwapped").is_err());
    }

    #[test]
    fn a_truncated_stat_line_is_an_error() {
        assert!(parse_stat_cpu_ticks("1234 (opscope) S 1 2").is_err());
        assert!(parse_stat_cpu_ticks("no name here").is_err());
    }

    #[test]
    fn this_process_can_be_sampled() {
        let own = sample(std::process::id()).expect("read /proc/self");
        assert!(own.rss_bytes > 0 && own.peak_rss_bytes >= own.rss_bytes);
        assert!(clock_ticks_per_second() > 0);
    }
}
