//! What the probe needs from the host, checked before loading it so that the log
//! says what is missing rather than what the verifier or libbpf made of it.

use std::path::Path;

/// Why the receiver runs without its probe; `reason()` labels the count of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    #[error("this opscope was built without the `ebpf` cargo feature")]
    NotBuilt,
    #[error(
        "missing capabilities: loading the probe needs CAP_BPF and CAP_PERFMON (kernel 5.8 or later) or CAP_SYS_ADMIN; the process has {held}"
    )]
    Capabilities { held: String },
    #[error(
        "the kernel publishes no BTF ({0} is missing): the probe is relocated against it (CONFIG_DEBUG_INFO_BTF, kernel 5.4 or later; in a pod, mount the host's /sys/kernel/btf)"
    )]
    NoBtf(String),
    #[error("cgroups: {0}")]
    Cgroups(String),
    #[error("{0}")]
    Load(String),
}

impl Unavailable {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotBuilt => "not_built",
            Self::Capabilities { .. } => "capabilities",
            Self::NoBtf(_) => "no_btf",
            Self::Cgroups(_) => "cgroups",
            Self::Load(_) => "load_failed",
        }
    }
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Where libbpf looks for tracefs, in its order.
const TRACEFS_EVENTS: [&str; 2] = [
    "/sys/kernel/tracing/events/syscalls",
    "/sys/kernel/debug/tracing/events/syscalls",
];

/// Whether the process may load and attach tracing programs.
pub fn check_capabilities(status: &str) -> Result<(), Unavailable> {
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| effective & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    Err(Unavailable::Capabilities {
        held: format!("CapEff {effective:#x}"),
    })
}

/// Capabilities and BTF; the cgroup hierarchy is checked by the caller.
pub fn check_host() -> Result<(), Unavailable> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    check_capabilities(&status)?;
    if !Path::new(KERNEL_BTF).is_file() {
        return Err(Unavailable::NoBtf(KERNEL_BTF.into()));
    }
    Ok(())
}

/// Whether the syscall tracepoints (ENOSPC from writes) can be attached: they are
/// found by name in tracefs.
pub fn tracefs_mounted() -> bool {
    TRACEFS_EVENTS
        .iter()
        .any(|events| Path::new(events).is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_read_from_the_effective_set() {
        // Root in a container with the default capabilities plus BPF and PERFMON.
        assert_eq!(
            check_capabilities("CapInh:\t0\nCapEff:\t000000c0a80425fb\n"),
            Ok(())
        );
        // Full root.
        assert_eq!(check_capabilities("CapEff:\t000001ffffffffff\n"), Ok(()));
        // Docker's default set: no CAP_SYS_ADMIN, no CAP_BPF.
        let error = check_capabilities("CapEff:\t00000000a80425fb\n").unwrap_err();
        assert_eq!(error.reason(), "capabilities");
        assert!(error.to_string().contains("CAP_BPF and CAP_PERFMON"));
        // CAP_BPF alone cannot attach tracing programs.
        assert!(check_capabilities("CapEff:\t0000008000000000\n").is_err());
        assert!(check_capabilities("").is_err());
    }
}
