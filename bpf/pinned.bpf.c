// SPDX-License-Identifier: GPL-2.0
/* CUDA host (pinned) and device memory per process, from uprobes/uretprobes on the driver API
 * in libcuda.so.1 (and optionally the runtime API, for statically linked runtimes). Sizes are
 * taken at entry, counted at return only when the call succeeded, and kept per returned
 * pointer so that a free subtracts exactly what was allocated. One handler serves every
 * variant of a call (_v2, _ptsz); user space attaches it to each that the library exports.
 * A runtime call reaches the driver underneath: while a runtime call is in flight on a
 * thread, the driver probes of that thread stand aside, so nothing is counted twice. */
#include "common.bpf.h"

enum {
	OP_HOST_ALLOC = 1, /* (void **pp, size_t size) */
	OP_HOST_REGISTER,  /* (void *p, size_t size) */
	OP_HOST_FREE,      /* (void *p) */
	OP_DEV_ALLOC,      /* (CUdeviceptr *dptr, size_t size) */
	OP_DEV_ALLOC_PITCH,/* (CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height) */
	OP_DEV_FREE,       /* (CUdeviceptr p) */
	OP_VMM_CREATE,     /* (handle *h, size_t size, const CUmemAllocationProp *prop) */
	OP_VMM_RELEASE,    /* (handle h) */
	OP_CTX_DESTROY,    /* (CUcontext) */
};

struct call {
	__u64 a0, a1, a2, a3;
	__u32 op;
	__u32 runtime; /* 1: a runtime-API call (driver probes of this thread stand aside) */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct call);
} cuda_calls SEC(".maps");

/* Threads inside a runtime-API call. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u32);
} cuda_in_runtime SEC(".maps");

/* CU_MEM_LOCATION_TYPE_HOST* (2, 3, 4): a VMM allocation in host memory counts as pinned. */
#define HR_CU_MEM_LOCATION_TYPE_DEVICE 1

static __always_inline int on_enter(__u32 op, __u64 a0, __u64 a1, __u64 a2, __u64 a3, __u32 runtime)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct call c = {.a0 = a0, .a1 = a1, .a2 = a2, .a3 = a3, .op = op, .runtime = runtime};
	__u32 one = 1;

	if (!runtime && bpf_map_lookup_elem(&cuda_in_runtime, &id))
		return 0;
	if (runtime)
		bpf_map_update_elem(&cuda_in_runtime, &id, &one, BPF_ANY);
	bpf_map_update_elem(&cuda_calls, &id, &c, BPF_ANY);
	return 0;
}

static __always_inline void add_alloc(struct gpu_mem *g, __u32 tgid, __u32 kind, __u64 addr, __u64 size)
{
	struct gpu_alloc_key key = {.tgid = tgid, .kind = kind, .addr = addr};

	if (!size)
		return;
	bpf_map_update_elem(&gpu_allocs, &key, &size, BPF_ANY);
	if (kind == HR_ALLOC_PINNED) {
		__u64 live = __sync_add_and_fetch(&g->pinned_live, size);
		if (live > g->pinned_peak)
			g->pinned_peak = live;
		__sync_fetch_and_add(&g->pinned_allocs, 1);
	} else {
		__u64 live = __sync_add_and_fetch(&g->device_live, size);
		if (live > g->device_peak)
			g->device_peak = live;
		__sync_fetch_and_add(&g->device_allocs, 1);
	}
}

static __always_inline void drop_alloc(struct gpu_mem *g, __u32 tgid, __u32 kind, __u64 addr)
{
	struct gpu_alloc_key key = {.tgid = tgid, .kind = kind, .addr = addr};
	__u64 *size = bpf_map_lookup_elem(&gpu_allocs, &key);
	__u64 s;

	if (!size)
		return; /* allocated before we attached, or not by this API */
	s = *size;
	bpf_map_delete_elem(&gpu_allocs, &key);
	if (kind == HR_ALLOC_PINNED) {
		__sync_fetch_and_sub(&g->pinned_live, s);
		__sync_fetch_and_add(&g->pinned_frees, 1);
	} else {
		__sync_fetch_and_sub(&g->device_live, s);
		__sync_fetch_and_add(&g->device_frees, 1);
	}
}

struct drop_ctx {
	__u32 tgid;
	__u32 _pad;
	__u64 bytes;
};

static long drop_all_of(struct bpf_map *map, struct gpu_alloc_key *key, __u64 *size, struct drop_ctx *ctx)
{
	if (key->tgid == ctx->tgid) {
		ctx->bytes += *size;
		bpf_map_delete_elem(map, key);
	}
	return 0;
}

static __always_inline int on_return(long ret)
{
	static const struct gpu_mem zero = {};
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct call *c = bpf_map_lookup_elem(&cuda_calls, &id);
	struct gpu_mem *g;
	__u64 addr = 0;
	__u32 loc = 0;

	if (!c)
		return 0;
	if (c->runtime)
		bpf_map_delete_elem(&cuda_in_runtime, &id);
	g = lookup_or_init(&gpu_mem, &tgid, &zero);
	if (!g)
		goto out;
	if ((int)ret != 0) { /* CUDA_SUCCESS / cudaSuccess is 0: a failed call counts nothing */
		__sync_fetch_and_add(&g->failed_calls, 1);
		goto out;
	}
	switch (c->op) {
	case OP_HOST_ALLOC:
		bpf_probe_read_user(&addr, sizeof(addr), (void *)c->a0);
		add_alloc(g, tgid, HR_ALLOC_PINNED, addr, c->a1);
		break;
	case OP_HOST_REGISTER:
		add_alloc(g, tgid, HR_ALLOC_PINNED, c->a0, c->a1);
		break;
	case OP_HOST_FREE:
		drop_alloc(g, tgid, HR_ALLOC_PINNED, c->a0);
		break;
	case OP_DEV_ALLOC:
		bpf_probe_read_user(&addr, sizeof(addr), (void *)c->a0);
		add_alloc(g, tgid, HR_ALLOC_DEVICE, addr, c->a1);
		break;
	case OP_DEV_ALLOC_PITCH: {
		__u64 pitch = 0;
		bpf_probe_read_user(&addr, sizeof(addr), (void *)c->a0);
		bpf_probe_read_user(&pitch, sizeof(pitch), (void *)c->a1);
		add_alloc(g, tgid, HR_ALLOC_DEVICE, addr, pitch * c->a3);
		break;
	}
	case OP_DEV_FREE:
		drop_alloc(g, tgid, HR_ALLOC_DEVICE, c->a0);
		break;
	case OP_VMM_CREATE:
		bpf_probe_read_user(&addr, sizeof(addr), (void *)c->a0);
		/* CUmemAllocationProp: type, requestedHandleTypes, then location {type, id}. */
		bpf_probe_read_user(&loc, sizeof(loc), (void *)(c->a2 + 8));
		add_alloc(g, tgid, loc == HR_CU_MEM_LOCATION_TYPE_DEVICE ? HR_ALLOC_DEVICE : HR_ALLOC_PINNED, addr, c->a1);
		break;
	case OP_VMM_RELEASE:
		drop_alloc(g, tgid, HR_ALLOC_DEVICE, c->a0);
		drop_alloc(g, tgid, HR_ALLOC_PINNED, c->a0);
		break;
	case OP_CTX_DESTROY: {
		/* Destroying a context frees what was allocated in it: release the process's memory. */
		struct drop_ctx d = {.tgid = tgid};
		bpf_for_each_map_elem(&gpu_allocs, drop_all_of, &d, 0);
		__sync_fetch_and_add(&g->implicit_frees, d.bytes);
		g->pinned_live = 0;
		g->device_live = 0;
		break;
	}
	}
out:
	bpf_map_delete_elem(&cuda_calls, &id);
	return 0;
}

#define ARG(n) PT_REGS_PARM##n(ctx)

SEC("uprobe") int host_alloc(struct pt_regs *ctx) { return on_enter(OP_HOST_ALLOC, ARG(1), ARG(2), 0, 0, 0); }
SEC("uprobe") int host_register(struct pt_regs *ctx) { return on_enter(OP_HOST_REGISTER, ARG(1), ARG(2), 0, 0, 0); }
SEC("uprobe") int host_free(struct pt_regs *ctx) { return on_enter(OP_HOST_FREE, ARG(1), 0, 0, 0, 0); }
SEC("uprobe") int dev_alloc(struct pt_regs *ctx) { return on_enter(OP_DEV_ALLOC, ARG(1), ARG(2), 0, 0, 0); }
SEC("uprobe") int dev_alloc_pitch(struct pt_regs *ctx) { return on_enter(OP_DEV_ALLOC_PITCH, ARG(1), ARG(2), ARG(3), ARG(4), 0); }
SEC("uprobe") int dev_free(struct pt_regs *ctx) { return on_enter(OP_DEV_FREE, ARG(1), 0, 0, 0, 0); }
SEC("uprobe") int vmm_create(struct pt_regs *ctx) { return on_enter(OP_VMM_CREATE, ARG(1), ARG(2), ARG(3), 0, 0); }
SEC("uprobe") int vmm_release(struct pt_regs *ctx) { return on_enter(OP_VMM_RELEASE, ARG(1), 0, 0, 0, 0); }
SEC("uprobe") int ctx_destroy(struct pt_regs *ctx) { return on_enter(OP_CTX_DESTROY, ARG(1), 0, 0, 0, 0); }

/* The runtime API (libcudart, or the prover's own binary when the runtime is linked in). */
SEC("uprobe") int rt_host_alloc(struct pt_regs *ctx) { return on_enter(OP_HOST_ALLOC, ARG(1), ARG(2), 0, 0, 1); }
SEC("uprobe") int rt_host_register(struct pt_regs *ctx) { return on_enter(OP_HOST_REGISTER, ARG(1), ARG(2), 0, 0, 1); }
SEC("uprobe") int rt_host_free(struct pt_regs *ctx) { return on_enter(OP_HOST_FREE, ARG(1), 0, 0, 0, 1); }
SEC("uprobe") int rt_dev_alloc(struct pt_regs *ctx) { return on_enter(OP_DEV_ALLOC, ARG(1), ARG(2), 0, 0, 1); }
SEC("uprobe") int rt_dev_free(struct pt_regs *ctx) { return on_enter(OP_DEV_FREE, ARG(1), 0, 0, 0, 1); }

SEC("uretprobe") int cuda_return(struct pt_regs *ctx) { return on_return(PT_REGS_RC(ctx)); }
