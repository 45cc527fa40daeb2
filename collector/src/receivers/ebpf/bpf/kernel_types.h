/* The few kernel types the probe reads, declared by hand for CO-RE.
 *
 * Every struct carries preserve_access_index: clang records each field access by
 * name, and libbpf moves it to the running kernel's offset from its BTF
 * (/sys/kernel/btf/vmlinux) at load time. So the members listed are only those
 * read, in any order, and the header serves x86_64 and aarch64 alike; nothing
 * here is a layout. (A full vmlinux.h, from `bpftool btf dump file
 * /sys/kernel/btf/vmlinux format c`, is 3 MB per architecture and would tie the
 * build to the build machine's kernel.) Members the kernel keeps in anonymous
 * unions are found by name too: libbpf searches anonymous members.
 */
#ifndef OPSCOPE_KERNEL_TYPES_H
#define OPSCOPE_KERNEL_TYPES_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

/* libbpf's headers use these. */
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct in6_addr {
	union {
		__u8 u6_addr8[16];
		__be32 u6_addr32[4];
	} in6_u;
};

struct sock_common {
	__be32 skc_daddr;
	__be16 skc_dport;
	unsigned short skc_family;
	struct in6_addr skc_v6_daddr;
};

struct sock {
	struct sock_common __sk_common;
	int sk_err;
};

struct kernfs_node {
	__u64 id;
};

struct cgroup {
	struct kernfs_node *kn;
};

struct cgroup_subsys_state {
	struct cgroup *cgroup;
};

struct css_set {
	struct cgroup_subsys_state *subsys[16];
};

struct task_struct {
	struct css_set *cgroups;
};

#pragma clang attribute pop

/* The record of the syscall exit tracepoints (syscalls/sys_exit_write and its
 * kin), a fixed layout that tracefs publishes in each event's `format` file:
 * eight bytes of common fields, `int __syscall_nr` at 8, `long ret` at 16. */
struct syscall_exit_record {
	__u64 common;
	__s64 syscall_nr;
	long ret;
};

/* Only the name matters: bpf_core_enum_value() finds the running kernel's value. */
enum cgroup_subsys_id {
	memory_cgrp_id = 4,
};

#endif
