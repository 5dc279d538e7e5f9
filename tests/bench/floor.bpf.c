// SPDX-License-Identifier: GPL-2.0
/* The measuring instrument's own cost: an empty program on the fault tracepoint, so that the
 * bench can say what kernel.bpf_stats charges a program that does nothing on this machine. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/page_fault_user")
int BPF_PROG(empty_fault)
{
	return 0;
}
