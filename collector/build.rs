//! With the `ebpf` feature: compiles the kernel probe (BPF C, CO-RE) with clang and
//! generates its Rust skeleton into OUT_DIR. Without it, nothing.

fn main() {
    #[cfg(feature = "ebpf")]
    ebpf::build();
}

#[cfg(feature = "ebpf")]
mod ebpf {
    use std::path::PathBuf;

    const SOURCE: &str = "src/receivers/ebpf/bpf/probe.bpf.c";

    pub fn build() {
        println!("cargo:rerun-if-changed={SOURCE}");
        println!("cargo:rerun-if-changed=src/receivers/ebpf/bpf/kernel_types.h");
        let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
        // bpf_tracing.h's name for the architecture (its pt_regs layout).
        let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
            Ok("aarch64") => "arm64".to_string(),
            Ok("x86_64") | Err(_) => "x86".to_string(),
            Ok(other) => other.to_string(),
        };
        let result = libbpf_cargo::SkeletonBuilder::new()
            .source(SOURCE)
            .clang_args([
                format!("-D__TARGET_ARCH_{arch}"),
                "-Isrc/receivers/ebpf/bpf".to_string(),
                "-O2".to_string(),
                "-g".to_string(),
            ])
            .build_and_generate(out.join("probe.skel.rs"));
        if let Err(error) = result {
            // A build script reports by failing; the message says what to install.
            eprintln!(
                "error: cannot compile the eBPF probe {SOURCE} (the `ebpf` feature needs clang and libelf's headers: \
                 apt-get install clang libelf-dev): {error:#}"
            );
            std::process::exit(1);
        }
    }
}
