// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Dual-licensed as the kernel requires of programs that call its GPL-only helpers
 * (the LICENSE section at the end says so to the verifier). */
/* opscope's kernel probe: per cgroup, the outcomes of TCP connections to the API
 * server, the bytes and send calls on them, process and thread creation, and
 * writes that failed with ENOSPC.
 *
 * Everything is counted in kernel maps that user space reads every interval; no
 * event is copied out. Counts are per CPU (no atomic operations on the hot path)
 * and summed in user space.
 */
#include "kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/* Set by user space before loading. */
/* Cgroup v1 hosts: key by the memory controller's cgroup, whose directory the
 * kubelet names after the pod; on v2, by the task's (unified) cgroup. */
const volatile bool cgroup_v1 = false;

#define AF_INET 2
#define AF_INET6 10

#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2
#define TCP_CLOSE 7

#define EPIPE 32
#define ENOSPC 28
#define ECONNRESET 104
#define ETIMEDOUT 110
#define ECONNREFUSED 111

#define MAX_CGROUPS 16384
#define MAX_CONNECTIONS 65536
#define MAX_API_SERVERS 64

/* Kept in step with `Counts` in probe.rs (repr(C)). */
struct counts {
	__u64 established;
	__u64 refused;
	__u64 reset;
	__u64 timed_out;
	__u64 failed;
	__u64 sent_bytes;
	__u64 send_calls;
	__u64 forks;
	__u64 enospc;
	char comm[16];
};

/* An API server's address: IPv4 written as IPv4-mapped IPv6, port in host order. */
struct endpoint {
	__u8 addr[16];
	__u16 port;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_API_SERVERS);
	__type(key, struct endpoint);
	__type(value, __u8);
} api_servers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct counts);
} cgroup_counts SEC(".maps");

/* Connections to an API server being set up or open: socket -> the cgroup that
 * connected it. The handshake ends in softirq, where the current task is anyone. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_CONNECTIONS);
	__type(key, __u64);
	__type(value, __u64);
} connecting SEC(".maps");

/* Counts lost because cgroup_counts was full. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps");

static __always_inline __u64 current_cgroup(void)
{
	if (!cgroup_v1)
		return bpf_get_current_cgroup_id();
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	int memory = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
	if (memory < 0 || memory >= 16)
		return 0;
	return BPF_CORE_READ(task, cgroups, subsys[memory], cgroup, kn, id);
}

static __always_inline struct counts *counts_of(__u64 cgroup, bool name_it)
{
	struct counts *counts = bpf_map_lookup_elem(&cgroup_counts, &cgroup);
	if (counts)
		return counts;
	struct counts fresh = {};
	if (name_it)
		bpf_get_current_comm(&fresh.comm, sizeof(fresh.comm));
	if (bpf_map_update_elem(&cgroup_counts, &cgroup, &fresh, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&cgroup_counts, &cgroup)) {
		__u32 zero = 0;
		__u64 *lost = bpf_map_lookup_elem(&dropped, &zero);
		if (lost)
			*lost += 1;
		return 0;
	}
	return bpf_map_lookup_elem(&cgroup_counts, &cgroup);
}

static __always_inline bool to_api_server(const struct sock *sk)
{
	struct endpoint peer = {};
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	peer.port = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (family == AF_INET) {
		__be32 daddr = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		peer.addr[10] = 0xff;
		peer.addr[11] = 0xff;
		__builtin_memcpy(&peer.addr[12], &daddr, 4);
	} else if (family == AF_INET6) {
		BPF_CORE_READ_INTO(&peer.addr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	} else {
		return false;
	}
	return bpf_map_lookup_elem(&api_servers, &peer) != 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_tcp_state, const struct sock *sk, int oldstate, int newstate)
{
	__u64 socket = (__u64)sk;
	if (newstate == TCP_SYN_SENT) {
		/* connect(2) itself, in the connecting task. */
		if (!to_api_server(sk))
			return 0;
		__u64 cgroup = current_cgroup();
		counts_of(cgroup, true);
		bpf_map_update_elem(&connecting, &socket, &cgroup, BPF_ANY);
		return 0;
	}
	/* Only a handshake's end and a close concern a connection being watched; the
	 * server side's SYN_RECV -> ESTABLISHED is skipped before any lookup. */
	if (newstate == TCP_ESTABLISHED ? oldstate != TCP_SYN_SENT : newstate != TCP_CLOSE)
		return 0;
	__u64 *cgroup = bpf_map_lookup_elem(&connecting, &socket);
	if (!cgroup)
		return 0;
	struct counts *counts = counts_of(*cgroup, false);
	if (newstate == TCP_ESTABLISHED) {
		if (counts)
			counts->established += 1;
		return 0;
	}
	/* The kernel sets sk_err before it closes the socket. */
	int err = BPF_CORE_READ(sk, sk_err);
	if (counts) {
		if (oldstate == TCP_SYN_SENT) {
			if (err == ECONNREFUSED)
				counts->refused += 1;
			else if (err == ETIMEDOUT)
				counts->timed_out += 1;
			else if (err == ECONNRESET)
				counts->reset += 1;
			else
				counts->failed += 1;
		} else if (err == ECONNRESET || err == EPIPE) {
			counts->reset += 1;
		}
	}
	bpf_map_delete_elem(&connecting, &socket);
	return 0;
}

static __always_inline int count_send(const struct sock *sk, int sent)
{
	if (sent < 0 || !to_api_server(sk))
		return 0;
	struct counts *counts = counts_of(current_cgroup(), true);
	if (!counts)
		return 0;
	counts->send_calls += 1;
	counts->sent_bytes += sent;
	return 0;
}

/* Every send on a socket, with what it returned (kernel 6.3 and later). */
SEC("tp_btf/sock_send_length")
int BPF_PROG(on_sock_send, struct sock *sk, int sent, int flags)
{
	return count_send(sk, sent);
}

/* The same on older kernels, where BPF trampolines are available. */
SEC("fexit/tcp_sendmsg")
int BPF_PROG(on_tcp_sendmsg, struct sock *sk, void *msg, __u64 size, int sent)
{
	return count_send(sk, sent);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	struct counts *counts = counts_of(current_cgroup(), true);
	if (counts)
		counts->forks += 1;
	return 0;
}

static __always_inline int count_write_exit(const struct syscall_exit_record *record)
{
	if (record->ret != -ENOSPC)
		return 0;
	struct counts *counts = counts_of(current_cgroup(), true);
	if (counts)
		counts->enospc += 1;
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_write")
int on_write_exit(struct syscall_exit_record *record)
{
	return count_write_exit(record);
}

SEC("tracepoint/syscalls/sys_exit_writev")
int on_writev_exit(struct syscall_exit_record *record)
{
	return count_write_exit(record);
}

SEC("tracepoint/syscalls/sys_exit_pwrite64")
int on_pwrite_exit(struct syscall_exit_record *record)
{
	return count_write_exit(record);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
