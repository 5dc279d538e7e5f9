// SPDX-License-Identifier: GPL-2.0
/* mmap/munmap/mremap/mlock/munlock bytes per process, from the syscall tracepoints (tp/ needs
 * tracefs). Sizes are taken at entry and counted at exit only when the call succeeded. */
#include "common.bpf.h"

enum { OP_MMAP = 1, OP_MUNMAP, OP_MREMAP, OP_MLOCK, OP_MUNLOCK };

struct pending {
	__u64 a;
	__u64 b;
	__u32 op;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* pid_tgid: one syscall in flight per thread */
	__type(value, struct pending);
} mmap_pending SEC(".maps");

static __always_inline int enter(__u32 op, __u64 a, __u64 b)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct pending p = {.a = a, .b = b, .op = op};

	if (!current_tracked())
		return 0;
	bpf_map_update_elem(&mmap_pending, &id, &p, BPF_ANY);
	return 0;
}

static __always_inline int leave(long ret)
{
	static const struct proc_activity zero = {};
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct pending *p = bpf_map_lookup_elem(&mmap_pending, &id);
	struct proc_activity *a;

	if (!p)
		return 0;
	if (ret < 0 && ret >= -MAX_ERRNO) /* failed: nothing was mapped or locked */
		goto out;
	a = lookup_or_init(&proc_activity, &tgid, &zero);
	if (!a)
		goto out;
	switch (p->op) {
	case OP_MMAP:
		__sync_fetch_and_add(&a->mmap_bytes, p->a);
		break;
	case OP_MUNMAP:
		__sync_fetch_and_add(&a->munmap_bytes, p->a);
		break;
	case OP_MREMAP:
		if (p->b > p->a)
			__sync_fetch_and_add(&a->mremap_grow_bytes, p->b - p->a);
		else
			__sync_fetch_and_add(&a->mremap_shrink_bytes, p->a - p->b);
		break;
	case OP_MLOCK:
		__sync_fetch_and_add(&a->mlock_bytes, p->a);
		break;
	case OP_MUNLOCK:
		__sync_fetch_and_add(&a->munlock_bytes, p->a);
		break;
	}
out:
	bpf_map_delete_elem(&mmap_pending, &id);
	return 0;
}

SEC("tp/syscalls/sys_enter_mmap")
int enter_mmap(struct trace_event_raw_sys_enter *ctx) { return enter(OP_MMAP, ctx->args[1], 0); }
SEC("tp/syscalls/sys_exit_mmap")
int exit_mmap(struct trace_event_raw_sys_exit *ctx) { return leave(ctx->ret); }

SEC("tp/syscalls/sys_enter_munmap")
int enter_munmap(struct trace_event_raw_sys_enter *ctx) { return enter(OP_MUNMAP, ctx->args[1], 0); }
SEC("tp/syscalls/sys_exit_munmap")
int exit_munmap(struct trace_event_raw_sys_exit *ctx) { return leave(ctx->ret); }

SEC("tp/syscalls/sys_enter_mremap")
int enter_mremap(struct trace_event_raw_sys_enter *ctx) { return enter(OP_MREMAP, ctx->args[1], ctx->args[2]); }
SEC("tp/syscalls/sys_exit_mremap")
int exit_mremap(struct trace_event_raw_sys_exit *ctx) { return leave(ctx->ret); }

SEC("tp/syscalls/sys_enter_mlock")
int enter_mlock(struct trace_event_raw_sys_enter *ctx) { return enter(OP_MLOCK, ctx->args[1], 0); }
SEC("tp/syscalls/sys_exit_mlock")
int exit_mlock(struct trace_event_raw_sys_exit *ctx) { return leave(ctx->ret); }

SEC("tp/syscalls/sys_enter_mlock2")
int enter_mlock2(struct trace_event_raw_sys_enter *ctx) { return enter(OP_MLOCK, ctx->args[1], 0); }
SEC("tp/syscalls/sys_exit_mlock2")
int exit_mlock2(struct trace_event_raw_sys_exit *ctx) { return leave(ctx->ret); }

SEC("tp/syscalls/sys_enter_munlock")
int enter_munlock(struct trace_event_raw_sys_enter *ctx) { return enter(OP_MUNLOCK, ctx->args[1], 0); }
SEC("tp/syscalls/sys_exit_munlock")
int exit_munlock(struct trace_event_raw_sys_exit *ctx) { return leave(ctx->ret); }
